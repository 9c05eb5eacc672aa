"""Exact gradient accumulation for Keras 3 ``model.fit`` (TensorFlow backend).

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

How a micro-batch's share is computed (see :mod:`components.keras_adapter`): each
output's compiled loss is split into the numerator and denominator Keras would reduce it
with (``"sum_over_batch_size"``: elements, or valid elements under a mask;
``"mean_with_sample_weight"``: the sum of sample weights; ``"sum"``: none), and every
micro-batch is divided by the *whole* batch's denominator, known before its backward pass
(masked and sample-weighted denominators come from a forward-only pass that TensorFlow
prunes down to the masks). Losses added in ``call()``: activity regularizers are sums over
the batch, as Keras computes them; other ``add_loss`` values follow ``add_loss_reduction``.
"""

from __future__ import annotations

import warnings
from typing import Any

import keras
import tensorflow as tf
from keras import tree

from tfx_accum.components import keras_adapter as adapter
from tfx_accum.components.settings import validate_positive_int

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


def _first(structure: Any) -> Any:
    return next(t for t in tree.flatten(structure) if t is not None)


def _slice(structure: Any, start: tf.Tensor, size: tf.Tensor | int) -> Any:
    """Rows ``start:start+size`` of every tensor; a Python-int size keeps shapes static."""

    def cut(t):
        if t is None:
            return None
        if isinstance(size, int):
            rank = len(t.shape)
            return tf.slice(t, [start] + [0] * (rank - 1), [size] + [-1] * (rank - 1))
        # A strided slice, unlike tf.slice with a tensor size, also compiles under XLA.
        return t[start : start + size]

    return tree.map_structure(cut, structure)


def _to_float32(gradient: Any) -> tf.Tensor:
    if isinstance(gradient, tf.IndexedSlices):
        gradient = tf.convert_to_tensor(gradient)
    return tf.cast(gradient, tf.float32)


def _cast(gradient: Any, dtype) -> Any:
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(
            tf.cast(gradient.values, dtype), gradient.indices, gradient.dense_shape
        )
    return tf.cast(gradient, dtype)


# ------------------------------------------------------------------ accumulators
#
# Dense gradients add into a float32 tensor. Sparse gradients (tf.IndexedSlices, from
# embeddings) stay sparse: their slices are concatenated, which is exactly the gradient
# plain Keras sees for the whole batch. Densifying would change the update of Adam and
# RMSprop, which square each slice before summing duplicate indices.


class _DenseAccumulator:
    def start(self, gradient: Any, rows: tf.Tensor) -> Any:
        return _to_float32(gradient)

    def add(self, state: Any, j: tf.Tensor, gradient: Any) -> Any:
        return state if gradient is None else state + _to_float32(gradient)

    def result(self, state: Any, first: Any) -> Any:
        return state


def _as_slices(gradient: Any, values_shape: tf.TensorShape, index_dtype) -> tf.IndexedSlices:
    if gradient is None:
        return tf.IndexedSlices(
            tf.zeros(tf.TensorShape([0]).concatenate(values_shape[1:]), tf.float32),
            tf.zeros([0], index_dtype),
        )
    if not isinstance(gradient, tf.IndexedSlices):
        rows = tf.shape(gradient)[0]
        gradient = tf.IndexedSlices(gradient, tf.range(rows, dtype=index_dtype))
    return gradient


class _SparseAccumulator:
    """Growable TensorArrays of slices: any number of rows per micro-batch."""

    def start(self, gradient: tf.IndexedSlices, rows: tf.Tensor) -> Any:
        shape = tf.TensorShape([None]).concatenate(gradient.values.shape[1:])
        values = tf.TensorArray(
            tf.float32, size=0, dynamic_size=True, infer_shape=False, element_shape=shape
        )
        indices = tf.TensorArray(
            gradient.indices.dtype,
            size=0,
            dynamic_size=True,
            infer_shape=False,
            element_shape=tf.TensorShape([None]),
        )
        return (
            values.write(0, tf.cast(gradient.values, tf.float32)),
            indices.write(0, gradient.indices),
        )

    def add(self, state: Any, j: tf.Tensor, gradient: Any) -> Any:
        values, indices = state
        gradient = _as_slices(gradient, values.element_shape, indices.dtype)
        return (
            values.write(j, tf.cast(gradient.values, tf.float32)),
            indices.write(j, tf.cast(gradient.indices, indices.dtype)),
        )

    def result(self, state: Any, first: tf.IndexedSlices) -> tf.IndexedSlices:
        values, indices = state
        return tf.IndexedSlices(values.concat(), indices.concat(), first.dense_shape)


class _SparseBufferAccumulator:
    """Fixed-size buffers written by scatter: what XLA can compile.

    XLA cannot grow a TensorArray, and pads its elements to one size (so a concat would
    include padding). The buffer holds ``count * (rows_0 + rows_0 / size_0)`` rows, enough
    when a micro-batch's rows grow with its sample count (embedding lookups) or do not
    depend on it; the exact rows are sliced out at the end. A model whose sparse rows
    exceed that bound gets NaN gradients (a loud failure, never a silent one).
    """

    def __init__(self, count: tf.Tensor, first_size: tf.Tensor):
        self.count = count
        self.first_size = first_size

    def start(self, gradient: tf.IndexedSlices, rows: tf.Tensor) -> Any:
        per_sample = -(-rows // tf.maximum(self.first_size, 1))
        capacity = self.count * (rows + per_sample)
        values = tf.zeros(tf.concat([[capacity], tf.shape(gradient.values)[1:]], 0), tf.float32)
        indices = tf.zeros([capacity], gradient.indices.dtype)
        state = (values, indices, tf.zeros((), tf.int32), capacity)
        return self._write(state, gradient)

    def _write(self, state: Any, gradient: tf.IndexedSlices) -> Any:
        values, indices, offset, capacity = state
        rows = tf.shape(gradient.indices)[0]
        where = tf.expand_dims(tf.minimum(offset + tf.range(rows), capacity - 1), 1)
        values = tf.tensor_scatter_nd_update(values, where, tf.cast(gradient.values, tf.float32))
        indices = tf.tensor_scatter_nd_update(
            indices, where, tf.cast(gradient.indices, indices.dtype)
        )
        return values, indices, offset + rows, capacity

    def add(self, state: Any, j: tf.Tensor, gradient: Any) -> Any:
        values, indices = state[0], state[1]
        slices = _as_slices(gradient, values.shape, indices.dtype)
        return self._write(state, slices)

    def result(self, state: Any, first: tf.IndexedSlices) -> tf.IndexedSlices:
        values, indices, offset, capacity = state
        used = tf.minimum(offset, capacity)
        poison = tf.where(offset > capacity, float("nan"), 1.0)
        return tf.IndexedSlices(values[:used] * poison, indices[:used], first.dense_shape)


# ----------------------------------------------------------------- step context


class _Step:
    """Trace-time state of one training step, shared with ``compute_loss``.

    ``collecting`` is true while ``compute_loss`` runs for a micro-batch: the model's own
    ``compute_loss`` then returns that micro-batch's exactly weighted share of the whole
    batch's loss instead of the micro-batch's own loss.
    """

    def __init__(self, samples: tf.Tensor, denominators: dict[int, tf.Tensor]):
        self.samples = samples  # the whole (global) batch's sample count, float32
        self.denominators = denominators  # output index -> global denominator
        self.activity_ids: set[int] = set()
        self.collecting = False
        self.share: tf.Tensor | None = None  # micro-batch samples / whole batch samples
        self.super_called = False
        self.own_value: tf.Tensor | None = None
        self.per_output: list[tf.Tensor] = []


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
    ``None``), with sample and class weights, masks, several outputs (each with its own
    denominator) and ``loss_weights``; weight regularizers count once per update; activity
    regularizers are sums over the batch, as Keras computes them. Under ``tf.distribute``
    every denominator is global across replicas.

    Args:
        gradient_accumulation_steps: int >= 1, the number of micro-batches each step is cut
            into. ``1`` is plain Keras training.
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
    """

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
        gradient_accumulation_steps: int = 1,
        add_loss_reduction: str | None = None,
        compute_loss_reduction: str | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.gradient_accumulation_steps = validate_positive_int(
            "gradient_accumulation_steps", gradient_accumulation_steps, "1 means plain training"
        )
        self.add_loss_reduction = _validate_reduction("add_loss_reduction", add_loss_reduction)
        self.compute_loss_reduction = _validate_reduction(
            "compute_loss_reduction", compute_loss_reduction
        )
        self._warned: set[str] = set()
        self._step: _Step | None = None

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
        model.gradient_accumulation_steps = validate_positive_int(
            "gradient_accumulation_steps", own["gradient_accumulation_steps"]
        )
        model.add_loss_reduction = _validate_reduction(
            "add_loss_reduction", own["add_loss_reduction"]
        )
        model.compute_loss_reduction = _validate_reduction(
            "compute_loss_reduction", own["compute_loss_reduction"]
        )
        return model

    # ---------------------------------------------------------------------- warnings

    def _warn_once(self, key: str, message: str) -> None:
        if not hasattr(self, "_warned"):
            self._warned = set()
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, stacklevel=3)

    def _warn_if_batch_normalization(self) -> None:
        training = [
            layer.name
            for layer in self._flatten_layers()
            if isinstance(layer, keras.layers.BatchNormalization) and layer.trainable
        ]
        if training:
            self._warn_once(
                "batchnorm",
                f"GradientAccumulationModel: BatchNormalization layers ({', '.join(training[:3])}"
                f"{', ...' if len(training) > 3 else ''}) normalise each micro-batch of "
                f"~1/{self.gradient_accumulation_steps} of the batch with its own statistics, "
                "so training is not exactly equivalent to the whole batch. Use "
                "LayerNormalization/GroupNormalization, or freeze BatchNormalization "
                "(layer.trainable = False), for exact accumulation.",
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
        total = tf.zeros((), tf.float32)
        step.per_output = []
        for index, term in enumerate(adapter.compile_loss_terms(self, y, y_pred, sample_weight)):
            share = self._term_share(step, index, term)
            step.per_output.append(share)
            total += share if term.loss_weight is None else share * float(term.loss_weight)
        user_reduction = self.add_loss_reduction
        for loss in adapter.added_losses(self):
            value = tf.cast(tf.reduce_sum(loss), tf.float32)
            if id(loss) in step.activity_ids:
                total += value  # activity regularizers are sums over the batch
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

    def _term_share(self, step: _Step, index: int, term: adapter.LossTerm) -> tf.Tensor:
        numerator = tf.cast(term.numerator, tf.float32)
        if term.kind in (adapter.SUM, adapter.NONE):
            return numerator
        if term.kind == adapter.MEAN:
            return numerator * step.share
        if term.kind == adapter.COUNT:
            per_sample = tf.cast(term.per_sample, tf.float32)
            return tf.math.divide_no_nan(numerator, step.samples * per_sample)
        if index not in step.denominators:
            raise RuntimeError(
                f"GradientAccumulationModel: output {index}'s loss needs a {term.kind} "
                "denominator that was not seen in inference mode (a mask that appears only "
                "in training?). Please report this model."
            )
        return tf.math.divide_no_nan(numerator, step.denominators[index])

    def _objective(self, step: _Step, value: tf.Tensor) -> tf.Tensor:
        """The micro-batch's share of the whole batch's loss, from compute_loss's value."""
        value = tf.cast(value, tf.float32)
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

    def train_step(self, data):
        k = self.gradient_accumulation_steps
        if k == 1:
            return super().train_step(data)
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        trainable = self.trainable_weights
        if not trainable:
            return super().train_step(data)
        self._warn_if_batch_normalization()
        with adapter.recording_activity_losses(self) as activity_ids:
            try:
                return self._accumulation_step(k, x, y, sample_weight, trainable, activity_ids)
            finally:
                self._step = None

    def _accumulation_step(self, k, x, y, sample_weight, trainable, activity_ids):
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        replica_ctx = tf.distribute.get_replica_context()

        def all_sum(value):
            if replicas > 1 and replica_ctx is not None:
                return replica_ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)
            return value

        first_input = _first(x)
        n = tf.shape(first_input)[0]
        n_float = tf.cast(n, tf.float32)
        static_n = first_input.shape[0]
        if static_n is not None and static_n % k == 0:
            # Static shapes (e.g. drop_remainder=True on TPU): k micro-batches of n/k rows.
            count, static_size = k, static_n // k
        else:
            count, static_size = tf.maximum(tf.minimum(n, k), 1), None

        def bounds(j):
            """Start and size of micro-batch j: sizes differ by at most one sample."""
            if static_size is not None:
                return j * static_size, static_size
            start = (j * n) // count
            return start, ((j + 1) * n) // count - start

        def micro_batch(j):
            start, size = bounds(j)
            return (
                _slice(x, start, size),
                _slice(y, start, size),
                _slice(sample_weight, start, size),
                size,
            )

        step = _Step(all_sum(n_float), self._global_denominators(micro_batch, count, all_sum))
        step.activity_ids = activity_ids
        self._step = step
        metrics_overridden = self._overrides("compute_metrics")

        def micro_step(j):
            xj, yj, swj, size = micro_batch(j)
            step.share = tf.math.divide_no_nan(tf.cast(size, tf.float32), step.samples)
            step.super_called, step.own_value, step.per_output = False, None, []
            with tf.GradientTape() as tape:
                y_pred = self._forward(xj)
                step.collecting = True
                try:
                    value = adapter.compute_loss(self, xj, yj, y_pred, swj)
                finally:
                    step.collecting = False
                objective = self._objective(step, value)
                scaled = self.optimizer.scale_loss(objective)
            grads = tape.gradient(scaled, trainable)
            per_output = tf.stack(step.per_output) if step.per_output else tf.zeros([0], tf.float32)
            logs = self.compute_metrics(xj, yj, y_pred, sample_weight=swj)
            return grads, objective, per_output, (logs if metrics_overridden else {})

        # First micro-batch outside the loop: it fixes which gradients exist (None ones
        # stay None, as in plain Keras) and seeds the accumulators.
        grads0, loss0, outputs0, logs0 = micro_step(tf.constant(0))
        uses_super = step.super_called or not self._overrides("compute_loss")
        present = [i for i, g in enumerate(grads0) if g is not None]
        first_size = bounds(0)[1]
        accumulators = [self._accumulator(grads0[i], count, first_size) for i in present]
        acc0 = [
            a.start(grads0[i], tf.shape(grads0[i].indices)[0] if _sparse(grads0[i]) else None)
            for a, i in zip(accumulators, present)
        ]

        def body(j, acc, loss_sum, outputs_sum, logs):
            grads, loss, outputs, new_logs = micro_step(j)
            acc = [a.add(s, j, grads[i]) for a, s, i in zip(accumulators, acc, present)]
            return j + 1, acc, loss_sum + loss, outputs_sum + outputs, new_logs

        # The loop may only start once the first micro-batch's backward pass is done;
        # otherwise the executor can run the loop's first forward pass alongside it and
        # hold two micro-batches of activations at once.
        with tf.control_dependencies([g for g in tree.flatten(acc0) if tf.is_tensor(g)]):
            first_j = tf.identity(tf.constant(1))
        _, acc, loss_sum, outputs_sum, logs = tf.while_loop(
            lambda j, *_: j < count,
            body,
            (first_j, acc0, loss0, outputs0, logs0),
            parallel_iterations=1,
        )
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
                    g = _to_float32(g)
                    gradients[i] = (
                        g if gradients[i] is None else tf.convert_to_tensor(gradients[i]) + g
                    )
            batch_loss += reg
        gradients = [None if g is None else _cast(g, v.dtype) for g, v in zip(gradients, trainable)]
        self.optimizer.apply_gradients(zip(gradients, trainable))

        # Every replica reports the exact whole-batch loss, weighted by its sample count
        # so that the cross-replica mean is that loss again; likewise each output's loss,
        # weighted as Keras weights it (the static batch size, if any).
        adapter.loss_tracker(self).update_state(batch_loss, sample_weight=n)
        per_output = all_sum(outputs_sum)
        output_metrics = adapter.per_output_loss_metrics(self)
        if len(output_metrics) == outputs0.shape[0]:  # else compute_loss skipped super()
            for index, metric in enumerate(output_metrics):
                metric.update_state(per_output[index], sample_weight=static_n)
        results = self.get_metrics_result()
        if metrics_overridden:
            # What the override returned for the last micro-batch, with every tracked
            # metric's final value (the loss is only known after the loop).
            return {**logs, **{key: results[key] for key in logs if key in results}}
        return results

    def _accumulator(self, gradient: Any, count: tf.Tensor, first_size: Any):
        if not _sparse(gradient):
            return _DenseAccumulator()
        if self.jit_compile:
            return _SparseBufferAccumulator(count, first_size)
        return _SparseAccumulator()

    def _global_denominators(self, micro_batch, count, all_sum) -> dict[int, tf.Tensor]:
        """Denominators of masked and sample-weight-averaged losses over the whole batch.

        They must be known before the first backward pass. Which outputs need one is found
        at trace time from the first micro-batch in inference mode; their sums come from a
        forward-only pass over the micro-batches (no dropout, no state updates), of which
        TensorFlow keeps only what the masks and weights depend on.
        """
        xj, yj, swj, _ = micro_batch(tf.constant(0))
        probe = adapter.compile_loss_terms(self, yj, self._forward(xj, training=False), swj)
        deferred = [
            (i, t.kind) for i, t in enumerate(probe) if t.kind in (adapter.MASKED, adapter.WEIGHTS)
        ]
        if not deferred:
            return {}

        def body(j, sums):
            xj, yj, swj, _ = micro_batch(j)
            terms = adapter.compile_loss_terms(self, yj, self._forward(xj, training=False), swj)
            return j + 1, sums + tf.stack(
                [tf.cast(terms[i].denominator, tf.float32) for i, _ in deferred]
            )

        _, sums = tf.while_loop(
            lambda j, _: j < count,
            body,
            (tf.constant(0), tf.zeros([len(deferred)], tf.float32)),
            parallel_iterations=1,
        )
        sums = all_sum(sums)
        # Keras divides a masked mean by (valid count + epsilon).
        epsilon = keras.config.epsilon()
        return {
            i: sums[position] + (epsilon if kind == adapter.MASKED else 0.0)
            for position, (i, kind) in enumerate(deferred)
        }


def _sparse(gradient: Any) -> bool:
    return isinstance(gradient, tf.IndexedSlices)


def _register_like(variant: type, cls: type) -> None:
    """Registers the functional variant under ``cls``'s Keras name, so saving works."""
    name = keras.saving.get_registered_name(cls)
    if name != cls.__name__ and keras.saving.get_registered_object(name) is not variant:
        package, _, short = name.rpartition(">")
        keras.saving.register_keras_serializable(package=package or "Custom", name=short)(variant)
