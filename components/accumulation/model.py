"""Exact gradient accumulation for Keras 3 ``model.fit`` (TensorFlow, JAX and PyTorch backends).

This module holds the model (its arguments, the loss split into exact shares, the
warnings and refusals, all backend-independent) and TensorFlow's step, described below;
JAX's step is ``tfx_accum.components.accumulation.jax_step`` and PyTorch's
``tfx_accum.components.accumulation.torch_step``, which reuse the rest.

One ``fit`` step receives the whole effective batch, cuts it into ``k`` micro-batches,
runs forward and backward on them one after another inside a ``tf.while_loop`` (so only
one micro-batch's activations are alive at a time), adds each micro-batch's gradient into
float32 accumulators weighted by its exact share of the whole batch's loss, and applies
the optimizer once. Nothing survives between steps, so ``optimizer.iterations``,
learning-rate schedules, callbacks and checkpoints all count real updates, and the result
equals training on the whole batch up to float rounding.

Example:

```python
import keras
from tfx_accum.components import GradientAccumulationModel

inputs = keras.Input((64,))
outputs = keras.layers.Dense(10, activation="softmax")(keras.layers.Dense(32)(inputs))
model = GradientAccumulationModel(inputs, outputs, gradient_accumulation_steps=4)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
model.fit(x, y, batch_size=128)  # each step: 4 micro-batches of 32, one update
```

How a micro-batch's share is computed (see ``tfx_accum.components.accumulation.loss_split``): each
output's compiled loss is called through its own ``__call__`` and every reduction Keras makes
there is split into the numerator and denominator Keras would reduce it with
(``"sum_over_batch_size"``: elements, or valid elements under a mask;
``"mean_with_sample_weight"``: the sum of sample weights; ``"sum"``: none; one value for the
batch: its rows' share, or 1 for a sum, times the batch's weight factor), and every
micro-batch is divided by the *whole* batch's denominator, known before its backward pass
(masked and sample-weighted denominators come from a forward-only pass that TensorFlow
prunes down to the masks). Losses added in ``call()``: activity regularizers are sums over
the batch, as Keras computes them; other ``add_loss`` values follow ``add_loss_reduction``.

Size (over 500 lines): one Keras class. Its step is one traced function whose closures
share the step's state; the pieces that stand alone already live beside it (``micro_batches``,
``accumulators``, ``inexact_cases``, ``jax_step``, ``keras_adapter``, ``loss_split``).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import keras
from keras import ops, tree

from tfx_accum.components.accumulation import inexact_cases, loss_split
from tfx_accum.components.accumulation import keras_adapter as adapter
from tfx_accum.components.accumulation.arguments import validate_positive_int
from tfx_accum.components.accumulation.multi_worker_strategy import (
    refuse_tensorflows_multi_worker_strategy,
)

# The step below is TensorFlow's; on the JAX and PyTorch backends the model trains through
# tfx_accum.components.accumulation.jax_step and torch_step, and TensorFlow need not be
# installed.
_BACKEND = keras.backend.backend()
if _BACKEND == "tensorflow":
    import tensorflow as tf

    from tfx_accum.components.accumulation import micro_batches
    from tfx_accum.components.accumulation.accumulators import (
        cast_like,
        is_sparse,
        make_accumulator,
        to_float32,
    )
    from tfx_accum.components.accumulation.micro_batches import check_splittable
elif _BACKEND == "jax":
    from tfx_accum.components.accumulation import jax_step
elif _BACKEND == "torch":
    from tfx_accum.components.accumulation import torch_step
else:
    raise ImportError(
        f"GradientAccumulationModel: the Keras backend {_BACKEND!r} is not supported; use "
        "KERAS_BACKEND=tensorflow, KERAS_BACKEND=jax or KERAS_BACKEND=torch."
    )

__all__ = ["GradientAccumulationModel", "LOSS_REDUCTIONS"]

# How a loss value the model cannot look inside (an ``add_loss`` value, or what a
# ``compute_loss`` override adds) grows with the batch: ``"mean"`` (a mean over the
# batch's samples, or a value that does not depend on the batch at all) or ``"sum"``.
LOSS_REDUCTIONS = ("mean", "sum")


def _validate_reduction(name: str, value: Any) -> str | None:
    if value is None or value in LOSS_REDUCTIONS:
        return value
    raise ValueError(
        f"`{name}` must be one of {LOSS_REDUCTIONS} or None. Received: {name}={value!r}."
    )


# ----------------------------------------------------------------- step context


class _Step:
    """Trace-time state of one training step, shared with ``compute_loss``.

    ``collecting`` is true while ``compute_loss`` runs for a micro-batch: the model's own
    ``compute_loss`` then returns that micro-batch's exactly weighted share of the whole
    batch's loss instead of the micro-batch's own loss.
    """

    def __init__(self, samples: Any, totals: dict[int, dict[int, list[Any]]]):
        self.samples = samples  # the whole (global) batch's sample count, float32
        # output index -> part index -> the whole batch's sums (loss_split.totals_of)
        self.totals = totals
        self.activity_kinds: dict[int, str] = {}
        self.collecting = False
        self.share: Any = None  # micro-batch samples / whole batch samples
        self.super_called = False
        self.own_value: Any = None
        # Per output, what its ``<output>_loss`` metric is updated with (summed over the
        # micro-batches) and with which sample weight; see ``compute_loss``.
        self.per_output: list[Any] = []
        self.per_output_weights: list[Any] = []
        # What the logged loss differs from the differentiated one by (reduction=None:
        # the gradient is of the sum, the log is the mean, as in plain Keras).
        self.log_delta: Any = 0.0
        self.static_n: int | None = None
        self.local_n: Any = None


class _DefaultSteps(int):
    """The default ``gradient_accumulation_steps`` (1), told apart from an explicit 1: a
    copy made by ``keras.models.clone_model`` takes the original's instead."""


_DEFAULT_STEPS = _DefaultSteps(1)


@keras.saving.register_keras_serializable(package="tfx_accum")
class GradientAccumulationModel(keras.Model):
    """A ``keras.Model`` whose every ``fit`` step accumulates over micro-batches.

    Build it like any functional model, with one extra argument:

    ```python
    model = GradientAccumulationModel(inputs=inputs, outputs=outputs,
                                      gradient_accumulation_steps=4)
    ```

    wrap a model you already have (functional or Sequential, built), sharing its layers
    and weights:

    ```python
    model = GradientAccumulationModel.from_model(existing_model, gradient_accumulation_steps=4)
    ```

    or subclass it with your own ``call`` (in any order with functional instances):

    ```python
    class MyModel(GradientAccumulationModel):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.dense = keras.layers.Dense(10)

        def call(self, x):
            return self.dense(x)

    model = MyModel(gradient_accumulation_steps=4)
    ```

    Each training step takes the batch ``fit`` gives it (the *effective* batch, for example
    128 samples), splits it into ``gradient_accumulation_steps`` micro-batches of as equal
    a size as possible (a short last batch is split the same way; a batch smaller than
    ``k`` gives one-sample micro-batches), and applies the optimizer once.

    Exactness: the update equals plain ``fit`` on the whole batch for every loss
    reduction (``"sum_over_batch_size"``, ``"sum"``, ``"mean_with_sample_weight"``,
    ``None``) and every way of writing the loss (per-sample values, a scalar mean or sum,
    a ``__call__`` override proportional to the reduced loss), with sample and class
    weights, masks, several outputs (each with its own denominator) and ``loss_weights``;
    a loss whose micro-batch shares cannot add up to the batch's is named in an
    ``InexactAccumulationWarning``; weight regularizers count once per update; activity
    regularizers are sums over the batch, as Keras computes them. Under ``tf.distribute``
    every denominator is global across replicas.

    Args:
        gradient_accumulation_steps: int >= 1, the number of micro-batches each step is cut
            into. ``1`` (the default) is plain Keras training; a copy made by
            ``keras.models.clone_model`` keeps the original's (and its reductions).
        add_loss_reduction: ``"mean"`` or ``"sum"``: how values that layers add with
            ``add_loss`` in ``call()`` (other than activity regularizers) grow with the
            batch. ``"mean"`` is right for a mean over the samples (a VAE's KL term) and
            for values that do not depend on the batch (a penalty on weights); ``"sum"``
            for sums over the samples. ``None`` (default): ``"mean"``, with a warning
            once if the model has such values.
        compute_loss_reduction: the same for what an override of ``compute_loss`` adds
            to ``super().compute_loss(...)`` (or returns, if it does not call ``super()``).
        *args, **kwargs: as for ``keras.Model`` (functional ``inputs``/``outputs``).

    Limits: BatchNormalization layers that train normalise each micro-batch with its own
    statistics (a warning is given); frozen ones (``trainable=False``) are exact.

    Changing ``k`` on a built model: assign ``model.gradient_accumulation_steps = k``.
    Without XLA the traced step reads ``k`` from a variable, so one traced step serves
    every ``k`` and batch size (``model.train_step_trace_count`` counts the traces); with
    ``jit_compile=True`` ``k`` shapes the compiled step, and a new ``k`` retraces it.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("train_step")
        if own is not None and not getattr(own, "_tfx_accum_checked", False):
            cls.train_step = _checked_train_step(own)

    def __new__(cls, *args, **kwargs):
        if adapter.is_functional_call(args, kwargs):
            variant = adapter.functional_variant(cls)
            if variant is not cls:
                _register_like(variant, cls)
            cls = variant
        return super().__new__(cls, *args, **kwargs)

    def __init__(
        self,
        *args,
        gradient_accumulation_steps: int = _DEFAULT_STEPS,
        add_loss_reduction: str | None = None,
        compute_loss_reduction: str | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        # The strategy Keras captured for this model: TensorFlow's own across workers would
        # crash in fit (multi_worker_strategy.MultiWorkerMirroredStrategy says why): one line.
        refuse_tensorflows_multi_worker_strategy(getattr(self, "distribute_strategy", None))
        if gradient_accumulation_steps is _DEFAULT_STEPS:
            # keras.models.clone_model builds the clone as `model.__class__(inputs, outputs,
            # name=...)`, which passes none of this class's arguments: the clone takes them
            # from the model it copies (else it would train on whole batches, silently).
            source = adapter.model_being_cloned()
            if isinstance(source, GradientAccumulationModel):
                gradient_accumulation_steps = source.gradient_accumulation_steps
                add_loss_reduction = add_loss_reduction or source.add_loss_reduction
                compute_loss_reduction = compute_loss_reduction or source.compute_loss_reduction
            else:
                gradient_accumulation_steps = 1
        self._steps_value = 1
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.add_loss_reduction = _validate_reduction("add_loss_reduction", add_loss_reduction)
        self.compute_loss_reduction = _validate_reduction(
            "compute_loss_reduction", compute_loss_reduction
        )
        self._warned: set[str] = set()
        self._step: _Step | None = None

    # ------------------------------------------------------------ accumulation steps

    @property
    def gradient_accumulation_steps(self) -> int:
        """``k``, the micro-batches per optimizer update; settable on a built model.

        Without XLA the next step uses the new value without retracing; with
        ``jit_compile=True`` (where ``k`` fixes the compiled shapes) the train function is
        rebuilt on the next ``fit``.
        """
        return self._steps_value

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, value: int) -> None:
        value = validate_positive_int(
            "gradient_accumulation_steps", value, "1 means plain training"
        )
        if value > 1 and getattr(self, "_bypassed_by", None):
            raise _bypass_error(self._bypassed_by, value)
        if value > 1:
            self._refuse_stateful_rnn(value)
        object.__setattr__(self, "_steps_value", value)
        if value > 1 and self.train_step_trace_count:
            # The traced step may not be traced again: what its trace found, said now.
            self._warn_if_batch_normalization()
            self._warn_inexact_cases()
        variable = getattr(self, "_steps_variable", None)
        if variable is not None:
            variable.assign(value)
        traced = getattr(self, "_traced_static_steps", None)
        if traced is not None and traced != value:
            # The compiled step has k in its shapes: build a new train function.
            self.train_function = None
            object.__setattr__(self, "_traced_static_steps", None)

    def set_accumulation_steps(self, k: int) -> GradientAccumulationModel:
        """Sets ``gradient_accumulation_steps`` (see there) and returns the model."""
        self.gradient_accumulation_steps = k
        return self

    @property
    def train_step_trace_count(self) -> int:
        """How many times this model's ``train_step`` has been traced into a graph."""
        return getattr(self, "_train_step_traces", 0)

    def make_train_function(self, force=False):
        # Once per process: fail loudly, before training, on a Keras whose loss
        # internals differ from those the accumulation mirrors (keras_adapter).
        adapter.self_check()
        adapter.check_compiled(self)
        if _BACKEND != "tensorflow":
            return super().make_train_function(force=force)
        # The variable the traced step reads k from, outside any tf.function; a plain
        # tf.Variable kept out of Keras's tracking (it is no weight of the model).
        if getattr(self, "_steps_variable", None) is None:
            with tf.init_scope():
                variable = tf.Variable(
                    self._steps_value, dtype=tf.int32, trainable=False, name="accumulation_steps"
                )
            object.__setattr__(self, "_steps_variable", variable)
        return super().make_train_function(force=force)

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_model(
        cls, model: keras.Model, gradient_accumulation_steps: int, **kwargs
    ) -> GradientAccumulationModel:
        """Wraps a built functional or Sequential model without copying its weights.

        The returned model shares the layers (and so the weights) of ``model``; other
        keyword arguments (``add_loss_reduction``, ...) are passed on. For a subclassed
        model, subclass GradientAccumulationModel instead.
        """
        if not isinstance(model, keras.Model):
            raise TypeError(
                f"`model` must be a keras.Model (functional or Sequential). "
                f"Received: model={model!r} of type {type(model).__name__}."
            )
        try:
            inputs, outputs = model.inputs, model.outputs
        except (AttributeError, ValueError):
            inputs = outputs = None
        if not inputs or not outputs:
            raise ValueError(
                "`model` must be a built functional or Sequential model with defined inputs "
                f"(got {model.name!r}). Build a Sequential model with a `keras.Input` first; "
                "for a subclassed model, subclass GradientAccumulationModel instead of "
                "keras.Model (it takes gradient_accumulation_steps=... in __init__)."
            )
        # Keep the original nesting (single tensor, list or dict) so that call signatures
        # and exported serving signatures stay the same as the wrapped model's.
        inputs = getattr(model, "_inputs_struct", inputs)
        outputs = getattr(model, "_outputs_struct", outputs)
        return cls(
            inputs=inputs,
            outputs=outputs,
            name=model.name,
            gradient_accumulation_steps=gradient_accumulation_steps,
            **kwargs,
        )

    def get_config(self) -> dict:
        config = super().get_config()
        config["gradient_accumulation_steps"] = self.gradient_accumulation_steps
        config["add_loss_reduction"] = self.add_loss_reduction
        config["compute_loss_reduction"] = self.compute_loss_reduction
        return config

    @classmethod
    def from_config(cls, config: dict, custom_objects=None):
        config = dict(config)
        own = {
            name: config.pop(name, default)
            for name, default in (
                ("gradient_accumulation_steps", 1),
                ("add_loss_reduction", None),
                ("compute_loss_reduction", None),
            )
        }
        model = super().from_config(config, custom_objects=custom_objects)
        model.gradient_accumulation_steps = own["gradient_accumulation_steps"]
        model.add_loss_reduction = _validate_reduction(
            "add_loss_reduction", own["add_loss_reduction"]
        )
        model.compute_loss_reduction = _validate_reduction(
            "compute_loss_reduction", own["compute_loss_reduction"]
        )
        return model

    # ---------------------------------------------------------------------- warnings

    def _warn_once(self, key: str, message: str, category: type[Warning] = UserWarning) -> None:
        if not hasattr(self, "_warned"):
            self._warned = set()
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, category, stacklevel=3)

    def _training_batch_normalization(self) -> list[keras.layers.Layer]:
        return [
            layer
            for layer in self._flatten_layers()
            if isinstance(layer, keras.layers.BatchNormalization) and layer.trainable
        ]

    def _warn_if_batch_normalization(self) -> None:
        training = [layer.name for layer in self._training_batch_normalization()]
        if training:
            self._warn_once(
                "batchnorm",
                f"GradientAccumulationModel: BatchNormalization layers ({', '.join(training[:3])}"
                f"{', ...' if len(training) > 3 else ''}) normalise each micro-batch of "
                f"~1/{self.gradient_accumulation_steps} of the batch with its own statistics, "
                "so training is not exactly equivalent to the whole batch. Use "
                "LayerNormalization/GroupNormalization, or freeze BatchNormalization "
                "(layer.trainable = False), for exact accumulation.",
                inexact_cases.InexactAccumulationWarning,
            )

    def _stateful_rnn_names(self) -> list[str]:
        if not hasattr(self, "_layers"):
            return []  # during __init__ of a subclass, before any layer: checked when traced
        return [
            layer.name
            for layer in self._flatten_layers()
            if isinstance(layer, keras.layers.RNN) and getattr(layer, "stateful", False)
        ]

    def _refuse_stateful_rnn(self, k: int) -> None:
        stateful = self._stateful_rnn_names() if k > 1 else []
        if stateful:
            raise ValueError(
                f"GradientAccumulationModel: gradient_accumulation_steps={k} with the stateful "
                f"recurrent layer {stateful[0]!r} (stateful=True), whose state belongs to each "
                "row of a fixed batch that micro-batches cannot carry: accumulation cannot be "
                "exact. Use stateful=False, or gradient_accumulation_steps=1."
            )

    def _find_inexact_cases(self, x, values=None) -> None:
        """Once per model, when its step is first traced: the layers that assign state in
        their training forward pass (tfx_accum.components.accumulation.inexact_cases; ``values``:
        see there)."""
        if getattr(self, "_inexact_probed", False):
            return
        object.__setattr__(self, "_inexact_probed", True)
        found = getattr(self, "_inexact_cases", {})
        layers = inexact_cases.state_assigning_layers(self, x, self._forward, values)
        if layers:
            found["state"] = (
                f"GradientAccumulationModel: layers that assign state in their training "
                f"forward pass ({', '.join(layers[:3])}{', ...' if len(layers) > 3 else ''}) "
                f"assign it once per micro-batch, {self.gradient_accumulation_steps} times per "
                "step where the whole batch assigns it once (e.g. SpectralNormalization's "
                "power iteration), so training is not exactly equivalent to the whole batch. "
                "Freeze them, or use gradient_accumulation_steps=1 for exact training."
            )
        object.__setattr__(self, "_inexact_cases", found)

    def _loss_plan(self, index: int, loss: Any, y_true, y_pred, sample_weight):
        """How output ``index``'s compiled loss splits (``inexact_cases.plan_loss``), probed
        once per compiled loss object."""
        plans = self.__dict__.setdefault("_loss_plans", {})
        known = plans.get(index)
        if known is None or known[0] is not loss:
            plan = inexact_cases.plan_loss(loss, y_true, y_pred, sample_weight)
            known = plans[index] = (loss, plan)
            self.__dict__.setdefault("_loss_plans_noted", set()).discard(index)
        return known[1]

    def _note_loss_problem(self, index: int, term: loss_split.LossTerm) -> None:
        """Once per probed loss: why its shares would not add up, for the step's warnings
        (a loss the probe could not evaluate only where it returns one value per batch)."""
        noted = self.__dict__.setdefault("_loss_plans_noted", set())
        if index in noted:
            return
        noted.add(index)
        plan = self._loss_plans[index][1]
        problem = plan.problem
        one_value = not term.parts or any(p.kind == loss_split.SCALAR for p in term.parts)
        if problem is None and not plan.probed and one_value:
            cause, remedy = inexact_cases.UNCHECKED
            problem = (cause.format(error=plan.error or "no batch shape"), remedy)
        if problem is None:
            return
        name = inexact_cases.describe_loss(term.loss)
        found = getattr(self, "_inexact_cases", {})
        found[f"loss-{name}"] = (
            f"GradientAccumulationModel: loss {name} {problem[0]}, so its micro-batches' "
            "shares do not add up to the whole batch's loss and accumulation is not exact: "
            f"{problem[1]}, or use gradient_accumulation_steps=1."
        )
        object.__setattr__(self, "_inexact_cases", found)

    def _warn_inexact_cases(self) -> None:
        for key, message in getattr(self, "_inexact_cases", {}).items():
            self._warn_once(key, message, inexact_cases.InexactAccumulationWarning)

    def _refuse_synchronized_batch_normalization(self) -> None:
        if _BACKEND != "tensorflow" or not tf.distribute.has_strategy():
            return  # without a strategy the layer is the unsynchronized one
        synchronized = [
            layer.name
            for layer in self._training_batch_normalization()
            if getattr(layer, "synchronized", False)
        ]
        if synchronized:
            raise ValueError(
                f"GradientAccumulationModel: BatchNormalization(synchronized=True) layer "
                f"{synchronized[0]!r} all-reduces its moments across replicas, which "
                "tf.distribute does not allow inside the accumulation loop; use "
                "synchronized=False (per-replica statistics of each micro-batch), "
                "LayerNormalization/GroupNormalization, or freeze it (trainable=False)."
            )

    def _overrides(self, name: str) -> bool:
        """Whether the user's class overrides method ``name`` of this class."""
        return getattr(type(self), name) is not getattr(GradientAccumulationModel, name)

    # ---------------------------------------------------------------------- the loss

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Keras's ``compute_loss``; during an accumulation step, a micro-batch's share.

        Inside a training step with ``gradient_accumulation_steps > 1`` this returns the
        micro-batch's exactly weighted share of the whole batch's compiled loss and
        ``add_loss`` values (weight regularizers are added once per step), so that an
        override that returns ``super().compute_loss(...) + extra`` stays exact.
        """
        step = self._step
        if step is None or not step.collecting:
            return super().compute_loss(x, y, y_pred, sample_weight, training=training)
        step.collecting = False  # an override may call super() only once per micro-batch
        step.super_called = True
        total = ops.zeros((), "float32")
        step.per_output, step.per_output_weights, step.log_delta = [], [], 0.0
        shares: list[loss_split.Shares] = []

        def split(index, loss, y_true, y_pred_output, output_weight):
            plan = self._loss_plan(index, loss, y_true, y_pred_output, output_weight)
            totals = step.totals.get(index, {})
            shares.append(loss_split.Shares(step.samples, step.share, totals, plan))
            return loss_split.split(loss, y_true, y_pred_output, output_weight, shares[-1])

        terms = adapter.compile_loss_terms(self, y, y_pred, sample_weight, split)
        outputs = loss_split.compiled_shares(terms, shares)
        for index, (term, output) in enumerate(zip(terms, outputs)):
            self._note_loss_problem(index, term)
            if output.unreduced and _BACKEND in _SCALAR_TRAINERS:
                raise _unreduced_refused(term)
            # The <output>_loss metric, as plain Keras updates it: with the output's value
            # weighted by the static batch size, or its values' mean weighted by the rows.
            step.per_output.append(output.logged)
            step.per_output_weights.append(_ROWS if output.unreduced else step.static_n)
            weight = 1.0 if term.loss_weight is None else float(term.loss_weight)
            total += output.share * weight
            step.log_delta += (output.logged - output.share) * weight
        user_reduction = self.add_loss_reduction
        for loss in adapter.added_losses(self):
            value = ops.cast(ops.sum(loss), "float32")
            activity = step.activity_kinds.get(id(loss))
            if activity is not None:  # an activity regularizer's: a sum or a mean (Keras 3.15)
                total += value if activity == adapter.SUM else value * step.share
                continue
            if user_reduction is None:
                self._warn_once(
                    "add-loss",
                    "GradientAccumulationModel: the model adds losses with add_loss() in "
                    "call(); they are weighted as means over the batch (right for a VAE's "
                    "mean KL and for values that do not depend on the batch). If they are "
                    "sums over the samples, pass add_loss_reduction='sum'; pass "
                    "add_loss_reduction='mean' to confirm and silence this warning.",
                )
            total += value if user_reduction == "sum" else value * step.share
        step.own_value = total
        return total

    def _micro_batch_share(self, step: _Step, share, x, y, y_pred, sample_weight):
        """``(objective, logged)``: a micro-batch's share of the whole batch's loss, to
        differentiate, and what the loss log adds up. ``compute_loss`` runs in its collecting
        mode (user overrides included), as the TensorFlow and PyTorch steps call it after the
        micro-batch's forward pass; ``share`` is its fraction of the batch's samples."""
        step.share = share
        step.super_called, step.own_value = False, None
        step.per_output, step.per_output_weights, step.log_delta = [], [], 0.0
        step.collecting = True
        try:
            value = adapter.compute_loss(self, x, y, y_pred, sample_weight)
        finally:
            step.collecting = False
        objective = self._objective(step, value)
        return objective, objective + step.log_delta

    def _objective(self, step: _Step, value: tf.Tensor) -> tf.Tensor:
        """The micro-batch's share of the whole batch's loss, from compute_loss's value."""
        value = ops.cast(value, "float32")
        if not self._overrides("compute_loss"):
            return value
        reduction = self.compute_loss_reduction
        if reduction is None:
            self._warn_once(
                "compute-loss",
                "GradientAccumulationModel: compute_loss is overridden; what it adds to "
                "super().compute_loss(...) (or returns, without super()) is weighted as a "
                "mean over the batch. If it is a sum over the samples, pass "
                "compute_loss_reduction='sum'; pass compute_loss_reduction='mean' to confirm "
                "and silence this warning.",
            )
        weight = 1.0 if reduction == "sum" else step.share
        if step.super_called:
            own = step.own_value
            return own + (value - own) * weight
        return value * weight

    # -------------------------------------------------------------------- training

    def _forward(self, x, training: bool = True):
        if adapter.call_has_training_arg(self):
            return self(x, training=training)
        return self(x)

    def _static_schedule(self) -> bool:
        """Whether the step is compiled by XLA (jit_compile, or a TPU), so needs static shapes."""
        if self.jit_compile:
            return True
        strategy = tf.distribute.get_strategy()
        return isinstance(
            strategy, (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy)
        )

    def train_step(self, *args):
        """One update from one batch: Keras's ``train_step`` for this backend.

        TensorFlow calls it with ``(data)``; JAX with ``(state, data)`` (its stateless
        trainer), which :func:`tfx_accum.components.accumulation.jax_step.train_step` serves;
        PyTorch with ``(data)``, served by
        :func:`tfx_accum.components.accumulation.torch_step.train_step`.
        """
        if _BACKEND == "jax":
            object.__setattr__(self, "_entered_train_step", True)
            return jax_step.train_step(self, *args, plain_step=super().train_step)
        if _BACKEND == "torch":
            object.__setattr__(self, "_entered_train_step", True)
            return torch_step.train_step(self, *args, plain_step=super().train_step)
        (data,) = args
        object.__setattr__(self, "_entered_train_step", True)
        if not tf.executing_eagerly():
            object.__setattr__(self, "_train_step_traces", self.train_step_trace_count + 1)
        static = self._static_schedule()
        object.__setattr__(self, "_traced_static_steps", self._steps_value if static else None)
        if static and self._steps_value == 1:
            return super().train_step(data)  # plain Keras, exactly
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        trainable = self.trainable_weights
        if not trainable:
            return super().train_step(data)
        if self._stateful_rnn_names():
            self._refuse_stateful_rnn(self._steps_value)
            return super().train_step(data)  # k is 1 (refused otherwise): plain Keras
        check_splittable(data, static)
        self._refuse_synchronized_batch_normalization()
        if self._steps_value > 1:
            self._warn_if_batch_normalization()
        self._find_inexact_cases(x)
        with adapter.recording_activity_losses(self) as activity_kinds:
            try:
                logs = self._accumulation_step(
                    x, y, sample_weight, trainable, activity_kinds, static
                )
            finally:
                self._step = None
        if self._steps_value > 1:
            self._warn_inexact_cases()
        return logs

    def _steps_tensor(self) -> tf.Tensor:
        variable = getattr(self, "_steps_variable", None)
        if variable is None:  # train_step called outside fit
            return tf.constant(self._steps_value, tf.int32)
        return variable.read_value()

    def _accumulation_step(self, x, y, sample_weight, trainable, activity_kinds, static):
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        replica_ctx = tf.distribute.get_replica_context()

        def all_sum(value):
            if replicas > 1 and replica_ctx is not None:
                return replica_ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)
            return value

        n = micro_batches.rows(x)
        structures = [x, y, sample_weight]
        if static:
            schedule = micro_batches.StaticSchedule(
                structures, n, self._steps_value, unrolled=_xla_on_cpu()
            )
        else:
            schedule = micro_batches.DynamicSchedule(structures, n, self._steps_tensor())
        step = _Step(all_sum(tf.cast(n, tf.float32)), self._global_totals(schedule, all_sum))
        step.static_n = getattr(micro_batches.first_leaf(x), "shape", [None])[0]
        step.activity_kinds = activity_kinds
        self._step = step
        # Metrics are updated once per step with the whole batch's predictions (any metric
        # then equals plain Keras's); they are kept only where a metric needs them.
        keep_predictions = adapter.has_compiled_metrics(self) or self._overrides("compute_metrics")

        def micro_step(cut, start, size, maybe_empty=False):
            xj, yj, swj = cut
            share = tf.math.divide_no_nan(tf.cast(size, tf.float32), step.samples)
            with tf.GradientTape() as tape:
                y_pred = self._forward(xj)
                objective, logged = self._micro_batch_share(step, share, xj, yj, y_pred, swj)
                if maybe_empty:
                    # A micro-batch without rows adds nothing, also where a value over its
                    # 0 rows (a mean) is NaN; its weight gradients are sums over 0 rows.
                    objective = tf.where(size > 0, objective, 0.0)
                    logged = tf.where(size > 0, logged, 0.0)
                scaled = self.optimizer.scale_loss(objective)
            grads = tape.gradient(scaled, trainable)
            per_output = tf.stack(step.per_output) if step.per_output else tf.zeros([0], tf.float32)
            if maybe_empty:
                per_output = tf.where(size > 0, per_output, tf.zeros_like(per_output))
            return grads, logged, per_output, y_pred

        # First micro-batch outside the loop: it fixes which gradients exist (None ones
        # stay None, as in plain Keras) and seeds the accumulators.
        cut0, start0, size0 = schedule.first()
        grads0, loss0, outputs0, pred0 = micro_step(cut0, start0, size0)
        metric_weights = list(step.per_output_weights)
        uses_super = step.super_called or not self._overrides("compute_loss")
        present = [i for i, g in enumerate(grads0) if g is not None]
        accumulators = [
            make_accumulator(grads0[i], schedule.count, schedule.first_size, static)
            for i in present
        ]
        acc0 = [
            a.start(grads0[i], tf.shape(grads0[i].indices)[0] if is_sparse(grads0[i]) else None)
            for a, i in zip(accumulators, present)
        ]
        kept = _Predictions(pred0, n) if keep_predictions else None
        kept0 = kept.write(kept.initial(), pred0, start0, size0) if kept else []
        carry = (acc0, loss0, outputs0, kept0)

        def advance(j, cut, start, size, acc, loss_sum, outputs_sum, kept_state, empty=False):
            grads, loss, outputs, pred = micro_step(cut, start, size, maybe_empty=empty)
            acc = [a.add(s, j, grads[i]) for a, s, i in zip(accumulators, acc, present)]
            if kept:
                kept_state = kept.write(kept_state, pred, start, size)
            return acc, loss_sum + loss, outputs_sum + outputs, kept_state

        for segment in schedule.segments():
            if segment.inline:
                # Traced in place (XLA on a CPU). A micro-batch may have no rows (a batch
                # smaller than k): it adds nothing (see micro_step). A BatchNormalization
                # that trains would update its moving statistics from 0 rows (NaN), so
                # then it is skipped with a cond (slower: XLA compiles convolutions in a
                # cond's branches as it does in loops).
                cut, start, size = segment.fetch(segment.lo)  # outside any cond: XLA folds

                def run(j=segment.lo, cut=cut, start=start, size=size, carry=carry):
                    return advance(j, cut, start, size, *carry, empty=True)

                if self._training_batch_normalization():
                    carry = tf.cond(size > 0, run, lambda carry=carry: carry)
                else:
                    carry = run()
                continue

            def body(j, acc, loss_sum, outputs_sum, kept_state, segment=segment):
                cut, start, size = segment.fetch(j)
                state = advance(j, cut, start, size, acc, loss_sum, outputs_sum, kept_state)
                return (j + 1, *state)

            # A loop may only start once the work before it is done; otherwise the
            # executor can run its first forward pass alongside the previous backward
            # pass and hold two micro-batches of activations at once.
            with tf.control_dependencies([t for t in tree.flatten(carry) if tf.is_tensor(t)]):
                lo = tf.identity(segment.lo)
            _, *carry = tf.while_loop(
                lambda j, *_, hi=segment.hi: j < hi, body, (lo, *carry), parallel_iterations=1
            )
        acc, loss_sum, outputs_sum, kept_state = carry
        gradients: list[Any] = [None] * len(trainable)
        for a, s, i in zip(accumulators, acc, present):
            gradients[i] = a.result(s, grads0[i])

        batch_loss = all_sum(loss_sum)
        regularized = [
            (v, v.regularizer) for v in trainable if getattr(v, "regularizer", None) is not None
        ]
        if regularized and uses_super:
            # Weight regularizers count once per update (divided over replicas, whose
            # gradients are summed). A weight reached only by its regularizer is updated too.
            with tf.GradientTape() as tape:
                reg = tf.add_n([tf.cast(tf.reduce_sum(r(v)), tf.float32) for v, r in regularized])
                reg_scaled = self.optimizer.scale_loss(reg / float(replicas))
            for i, g in enumerate(tape.gradient(reg_scaled, trainable)):
                if g is not None:
                    g = to_float32(g)
                    gradients[i] = (
                        g if gradients[i] is None else tf.convert_to_tensor(gradients[i]) + g
                    )
            batch_loss += reg
        gradients = [
            None if g is None else cast_like(g, v.dtype) for g, v in zip(gradients, trainable)
        ]
        self.optimizer.apply_gradients(zip(gradients, trainable))

        # Every replica reports the exact whole-batch loss, weighted by its sample count
        # so that the cross-replica mean is that loss again (as plain Keras weights it);
        # likewise each output's loss, weighted as Keras weights it.
        self._update_loss_metrics(batch_loss, all_sum(outputs_sum), metric_weights, n)
        if kept:
            return self.compute_metrics(x, y, kept.result(kept_state), sample_weight=sample_weight)
        return self.get_metrics_result()

    def _update_loss_metrics(self, batch_loss, per_output, metric_weights, n) -> None:
        """Updates ``loss`` and each ``<output>_loss`` once per step, as plain Keras does:
        ``per_output`` summed over micro-batches, weighted as ``compute_loss`` says."""
        adapter.loss_tracker(self).update_state(batch_loss, sample_weight=n)
        output_metrics = adapter.per_output_loss_metrics(self)
        if len(output_metrics) == per_output.shape[0]:  # else compute_loss skipped super()
            for index, metric in enumerate(output_metrics):
                weight = metric_weights[index]
                metric.update_state(
                    per_output[index], sample_weight=n if weight is _ROWS else weight
                )

    def _recorded_terms(self, y, y_pred, sample_weight) -> list[loss_split.LossTerm]:
        """Each output's loss on one micro-batch, as Keras computes it, in parts."""

        def split(index, loss, y_true, y_pred_output, output_weight):
            return loss_split.split(loss, y_true, y_pred_output, output_weight)

        return adapter.compile_loss_terms(self, y, y_pred, sample_weight, split)

    def _global_totals(self, schedule, all_sum) -> dict[int, dict[int, list[tf.Tensor]]]:
        """The whole batch's sums that shares need (masks' valid counts, sums of sample
        weights; ``loss_split.Part.summed``), per output and part.

        They must be known before the first backward pass. Which outputs need them is found
        at trace time from the first micro-batch in inference mode; their sums come from a
        forward-only pass over the micro-batches (no dropout, no state updates), of which
        TensorFlow keeps only what the masks and weights depend on.
        """
        (xj, yj, swj), _, _ = schedule.first()
        terms = self._recorded_terms(yj, self._forward(xj, training=False), swj)
        layout, first = loss_split.summed(terms)
        if not layout:
            return {}
        sums = tf.stack(first)
        for segment in schedule.segments():

            def body(j, sums, segment=segment):
                (xj, yj, swj), _, _ = segment.fetch(j)
                terms = self._recorded_terms(yj, self._forward(xj, training=False), swj)
                return j + 1, sums + tf.stack(loss_split.summed(terms)[1])

            if segment.inline:
                _, sums = body(segment.lo, sums)
                continue
            _, sums = tf.while_loop(
                lambda j, _, hi=segment.hi: j < hi, body, (segment.lo, sums), parallel_iterations=1
            )
        return loss_split.totals_of(layout, all_sum(sums))


# A per-output metric weighted by the batch's rows (see ``compute_loss``).
_ROWS = object()


class _Predictions:
    """The whole batch's predictions (and their Keras masks), written micro-batch by
    micro-batch into buffers of the batch's rows, for one metrics update per step."""

    def __init__(self, example: Any, n: tf.Tensor):
        self.structure = example
        self.n = n
        self.leaves = tree.flatten(example)
        for leaf in self.leaves:
            if not isinstance(leaf, tf.Tensor):
                raise ValueError(
                    "GradientAccumulationModel: the model's outputs must be dense tensors to "
                    f"update metrics once per step (got {type(leaf).__name__}); compile "
                    "without metrics, or return dense outputs."
                )
        self.masks = [adapter.keras_mask(leaf) is not None for leaf in self.leaves]

    def _parts(self, pred: Any) -> list[tf.Tensor]:
        parts = []
        for leaf, masked in zip(tree.flatten(pred), self.masks):
            parts.append(tf.stop_gradient(leaf))
            if masked:
                parts.append(adapter.keras_mask(leaf))
        return parts

    def initial(self) -> list[tf.Tensor]:
        shapes = self._parts(self.structure)
        return [tf.zeros(tf.concat([[self.n], tf.shape(p)[1:]], 0), p.dtype) for p in shapes]

    def write(self, state: list[tf.Tensor], pred: Any, start: Any, size: Any) -> list[tf.Tensor]:
        where = tf.expand_dims(start + tf.range(size), 1)
        return [
            tf.tensor_scatter_nd_update(buffer, where, part)
            for buffer, part in zip(state, self._parts(pred))
        ]

    def result(self, state: list[tf.Tensor]) -> Any:
        leaves, position = [], 0
        for masked in self.masks:
            leaf = state[position]
            position += 1
            if masked:
                adapter.set_keras_mask(leaf, state[position])
                position += 1
            leaves.append(leaf)
        return tree.pack_sequence_as(self.structure, leaves)


def _xla_on_cpu() -> bool:
    """Whether XLA compiles this step for the CPU (no GPU or TPU is visible)."""
    return not any(tf.config.list_logical_devices(kind) for kind in ("GPU", "TPU"))


# The backends whose Keras trainer differentiates only a scalar loss (``jax.value_and_grad``,
# torch's ``backward()``): there plain ``fit`` fails on unreduced values.
_SCALAR_TRAINERS = {"jax": "JAX", "torch": "PyTorch"}


def _unreduced_refused(term: loss_split.LossTerm) -> ValueError:
    return ValueError(
        f"GradientAccumulationModel: loss {inexact_cases.describe_loss(term.loss)} returns "
        f"unreduced values of shape {tuple(term.value.shape)} (reduction="
        f"{getattr(term.loss, 'reduction', None)!r}), and Keras's {_SCALAR_TRAINERS[_BACKEND]} "
        "trainer differentiates only a scalar loss (plain fit fails on it too); use another "
        "reduction, or reduce the values in call() or in compute_loss."
    )


def _bypass_error(cls_name: str, k: int) -> ValueError:
    return ValueError(
        f"GradientAccumulationModel: {cls_name}.train_step does not call "
        "super().train_step(data), so gradient_accumulation_steps="
        f"{k} would be silently ignored (every forward pass would see the whole batch); "
        "override compute_loss or compute_metrics instead (the accumulation calls them), "
        "or call super().train_step(data)."
    )


def _checked_train_step(own):
    """Wraps a subclass's ``train_step`` to refuse one that bypasses the accumulation."""

    @functools.wraps(own)
    def train_step(self, *args):  # (data), or (state, data) on JAX
        object.__setattr__(self, "_entered_train_step", False)
        result = own(self, *args)
        if not self._entered_train_step:
            name = type(self).__name__
            if self.gradient_accumulation_steps > 1:
                raise _bypass_error(name, self.gradient_accumulation_steps)
            object.__setattr__(self, "_bypassed_by", name)  # refuse a later k > 1
        return result

    train_step._tfx_accum_checked = True
    return train_step


def _register_like(variant: type, cls: type) -> None:
    """Registers the functional variant under ``cls``'s Keras name, so saving works."""
    name = keras.saving.get_registered_name(cls)
    if name != cls.__name__ and keras.saving.get_registered_object(name) is not variant:
        package, _, short = name.rpartition(">")
        keras.saving.register_keras_serializable(package=package or "Custom", name=short)(variant)
