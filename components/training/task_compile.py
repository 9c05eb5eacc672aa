"""The loss and metrics each task trains with (components/data/tasks.py), for every model.

- ``multiclass``: sparse categorical cross-entropy on class probabilities; ``accuracy``.
- ``binary``: the same on two class probabilities (class 1 positive); ``accuracy``,
  ``auc``, ``precision`` and ``recall`` of class 1 (the Tuner ranks by ``val_auc``).
- ``regression``: mean squared error on the standardised target (components/data/features.py);
  ``mae`` (in standard deviations of the target; the Trainer's line converts it).

Example:

```python
model.compile(optimizer=keras.optimizers.Adam(1e-3), **compile_arguments("binary"))
```
"""

from __future__ import annotations

from typing import Any

import keras

from tfx_accum.components.data.tasks import BINARY, MULTICLASS, REGRESSION


class _PositiveClass:
    """A binary metric of class 1's probability from two-class probabilities."""

    def update_state(self, y_true, y_pred, sample_weight=None):
        return super().update_state(y_true, y_pred[..., 1], sample_weight=sample_weight)


@keras.saving.register_keras_serializable("tfx_accum")
class PositiveClassAUC(_PositiveClass, keras.metrics.AUC):
    pass


@keras.saving.register_keras_serializable("tfx_accum")
class PositiveClassPrecision(_PositiveClass, keras.metrics.Precision):
    pass


@keras.saving.register_keras_serializable("tfx_accum")
class PositiveClassRecall(_PositiveClass, keras.metrics.Recall):
    pass


def metrics_for(task: str) -> list:
    if task == REGRESSION:
        return [keras.metrics.MeanAbsoluteError(name="mae")]
    metrics: list[Any] = ["accuracy"]
    if task == BINARY:
        metrics += [
            PositiveClassAUC(name="auc"),
            PositiveClassPrecision(name="precision"),
            PositiveClassRecall(name="recall"),
        ]
    return metrics


def loss_for(task: str) -> str:
    return "mean_squared_error" if task == REGRESSION else "sparse_categorical_crossentropy"


def compile_arguments(task: str) -> dict[str, Any]:
    """``loss`` and ``metrics`` for ``model.compile`` (the optimizer is the caller's)."""
    if task not in (MULTICLASS, BINARY, REGRESSION):
        raise ValueError(f"Unknown task {task!r}.")
    return {"loss": loss_for(task), "metrics": metrics_for(task)}
