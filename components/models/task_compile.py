"""The loss and metrics each task trains with (tfx_accum.components.config.tasks), for every model.

- ``multiclass``: sparse categorical cross-entropy on class probabilities; ``accuracy``.
- ``binary``: the same on two class probabilities (class 1 positive); ``accuracy``,
  ``auc``, ``precision`` and ``recall`` of class 1 (the Tuner ranks by ``val_auc``). A
  model of your own may instead output one unit, class 1's probability (a sigmoid; binary
  cross-entropy), as TFX's taxi example does; the metrics then read it directly.
- ``regression``: mean squared error on the standardised target
(tfx_accum.components.data.features);
  ``mae`` (in standard deviations of the target; the Trainer's line converts it).

A model of your own whose output is logits (its loss says ``from_logits=True``, or, not
compiled, its last layer has no activation) gets the same metrics of the probabilities.

Example:

```python
model.compile(optimizer=keras.optimizers.Adam(1e-3), **compile_arguments("binary"))
```
"""

from __future__ import annotations

from typing import Any

import keras

from tfx_accum.components.config.tasks import BINARY, MULTICLASS, REGRESSION


class _PositiveClass:
    """A binary metric of class 1's probability from two-class probabilities (from their
    logits with ``softmax_first``)."""

    def __init__(self, *args, softmax_first: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.softmax_first = softmax_first

    def update_state(self, y_true, y_pred, sample_weight=None):
        if self.softmax_first:
            y_pred = keras.ops.softmax(y_pred, axis=-1)
        return super().update_state(y_true, y_pred[..., 1], sample_weight=sample_weight)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "softmax_first": self.softmax_first}


@keras.saving.register_keras_serializable("tfx_accum")
class PositiveClassAUC(_PositiveClass, keras.metrics.AUC):
    pass


@keras.saving.register_keras_serializable("tfx_accum")
class PositiveClassPrecision(_PositiveClass, keras.metrics.Precision):
    pass


@keras.saving.register_keras_serializable("tfx_accum")
class PositiveClassRecall(_PositiveClass, keras.metrics.Recall):
    pass


def metrics_for(task: str, units: int | None = None, from_logits: bool = False) -> list:
    """The task's metrics for an output of ``units`` (None: the task's own) that is
    probabilities, or logits with ``from_logits``."""
    if task == REGRESSION:
        return [keras.metrics.MeanAbsoluteError(name="mae")]
    if task == BINARY and units == 1:
        threshold = 0.0 if from_logits else 0.5  # a logit of 0 is a probability of 0.5
        return [
            keras.metrics.BinaryAccuracy(name="accuracy", threshold=threshold),
            keras.metrics.AUC(name="auc", from_logits=from_logits),
            keras.metrics.Precision(name="precision", thresholds=threshold),
            keras.metrics.Recall(name="recall", thresholds=threshold),
        ]
    metrics: list[Any] = ["accuracy"]
    if task == BINARY:
        metrics += [
            PositiveClassAUC(name="auc", softmax_first=from_logits),
            PositiveClassPrecision(name="precision", softmax_first=from_logits),
            PositiveClassRecall(name="recall", softmax_first=from_logits),
        ]
    return metrics


def loss_for(task: str, units: int | None = None, from_logits: bool = False) -> Any:
    """The task's loss for an output of ``units`` (probabilities, or logits)."""
    if task == REGRESSION:
        return "mean_squared_error"
    if task == BINARY and units == 1:
        return (
            keras.losses.BinaryCrossentropy(from_logits=True)
            if from_logits
            else ("binary_crossentropy")
        )
    if from_logits:
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return "sparse_categorical_crossentropy"


def compile_arguments(task: str, units: int | None = None, from_logits: bool = False) -> dict:
    """``loss`` and ``metrics`` for ``model.compile`` (the optimizer is the caller's), for
    an output of ``units`` probabilities (the task's number when None), or logits."""
    if task not in (MULTICLASS, BINARY, REGRESSION):
        raise ValueError(f"Unknown task {task!r}.")
    return {
        "loss": loss_for(task, units, from_logits),
        "metrics": metrics_for(task, units, from_logits),
    }
