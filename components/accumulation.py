"""Exact gradient accumulation for Keras 3 ``model.fit`` (TensorFlow backend).

One ``fit`` step receives the whole effective batch, cuts it into ``k`` micro-batches,
runs forward and backward on them one after another inside a ``tf.while_loop`` (so only
one micro-batch's activations are alive at a time), adds each micro-batch's gradient into
float32 accumulators weighted by its share of the loss denominator, and applies the
optimizer once. Nothing survives between steps, so ``optimizer.iterations``, learning-rate
schedules, callbacks and checkpoints all count real updates, and the result equals
training on the whole batch up to float rounding.

Example:

```python
import keras
from components import GradientAccumulationModel

inputs = keras.Input((64,))
outputs = keras.layers.Dense(10, activation="softmax")(keras.layers.Dense(32)(inputs))
model = GradientAccumulationModel(inputs, outputs, gradient_accumulation_steps=4)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
model.fit(x, y, batch_size=128)  # each step: 4 micro-batches of 32, one update
```
"""

from __future__ import annotations

import warnings
from typing import Any

import keras
import tensorflow as tf
from keras import tree

__all__ = ["GradientAccumulationModel", "validate_accumulation_steps"]


def validate_accumulation_steps(value: Any, name: str = "gradient_accumulation_steps") -> int:
    """Returns ``value`` as an int >= 1, or raises naming ``name`` and the value."""
    if isinstance(value, bool) or not isinstance(value, int):
        # numpy integers are fine; floats, strings and bools are not.
        if hasattr(value, "__index__") and not isinstance(value, bool):
            value = int(value)
        else:
            raise TypeError(
                f"`{name}` must be an int >= 1 (1 means plain training). "
                f"Received: {name}={value!r} of type {type(value).__name__}."
            )
    if value < 1:
        raise ValueError(
            f"`{name}` must be an int >= 1 (1 means plain training). Received: {name}={value}."
        )
    return int(value)


def _batch_size(x: Any) -> tf.Tensor:
    first = next(t for t in tree.flatten(x) if t is not None)
    return tf.shape(first)[0]


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


def _to_accumulator(gradient: Any) -> tf.Tensor:
    if isinstance(gradient, tf.IndexedSlices):
        gradient = tf.convert_to_tensor(gradient)
    return tf.cast(gradient, tf.float32)


def _scale(gradient: Any, factor: tf.Tensor) -> Any:
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values * factor, gradient.indices, gradient.dense_shape)
    return gradient * factor


def _cast(gradient: Any, dtype) -> Any:
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(
            tf.cast(gradient.values, dtype), gradient.indices, gradient.dense_shape
        )
    return tf.cast(gradient, dtype)


def _accumulator_start(gradient: Any) -> Any:
    """A float32 accumulator seeded with the first micro-batch's gradient.

    Sparse gradients (``tf.IndexedSlices``, from embeddings) are kept sparse: their slices
    are collected in TensorArrays and concatenated at the end, which is exactly the
    gradient plain Keras sees for the whole batch (optimizers treat duplicate indices
    differently from a dense sum, so densifying would change Adam's update).
    """
    if isinstance(gradient, tf.IndexedSlices):
        values = tf.TensorArray(
            tf.float32,
            size=0,
            dynamic_size=True,
            infer_shape=False,
            element_shape=tf.TensorShape([None]).concatenate(gradient.values.shape[1:]),
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
    return _to_accumulator(gradient)


def _accumulator_add(accumulator: Any, j: tf.Tensor, gradient: Any) -> Any:
    if isinstance(accumulator, tuple):
        values, indices = accumulator
        if gradient is None:
            gradient = tf.IndexedSlices(
                tf.zeros(tf.TensorShape([0]).concatenate(values.element_shape[1:]), tf.float32),
                tf.zeros([0], indices.dtype),
            )
        elif not isinstance(gradient, tf.IndexedSlices):
            rows = tf.shape(gradient)[0]
            gradient = tf.IndexedSlices(gradient, tf.range(rows, dtype=indices.dtype))
        return (
            values.write(j, tf.cast(gradient.values, tf.float32)),
            indices.write(j, tf.cast(gradient.indices, indices.dtype)),
        )
    if gradient is None:
        return accumulator
    return accumulator + _to_accumulator(gradient)


def _accumulator_result(accumulator: Any, first_gradient: Any) -> Any:
    if isinstance(accumulator, tuple):
        values, indices = accumulator
        return tf.IndexedSlices(values.concat(), indices.concat(), first_gradient.dense_shape)
    return accumulator


def _keras_mask(tensor: Any) -> tf.Tensor | None:
    # Keras 3 on TensorFlow keeps a propagated mask as this attribute on the tensor.
    return getattr(tensor, "_keras_mask", None)


def _valid_count(masks: list[tf.Tensor]) -> tf.Tensor:
    return tf.add_n([tf.reduce_sum(tf.cast(m, tf.float32)) for m in masks])


@keras.saving.register_keras_serializable(package="tfx_accum")
class GradientAccumulationModel(keras.Model):
    """A ``keras.Model`` whose every ``fit`` step accumulates over micro-batches.

    Build it like any functional model, with one extra argument:

    ```python
    model = GradientAccumulationModel(inputs=inputs, outputs=outputs,
                                      gradient_accumulation_steps=4)
    ```

    or wrap a model you already have (functional or Sequential, built), sharing its layers
    and weights:

    ```python
    model = GradientAccumulationModel.from_model(existing_model, gradient_accumulation_steps=4)
    ```

    Each training step takes the batch ``fit`` gives it (the *effective* batch, for example
    128 samples), splits it into ``gradient_accumulation_steps`` micro-batches of as equal
    a size as possible (a short last batch is split the same way; a batch smaller than
    ``k`` gives one-sample micro-batches), and applies the optimizer once.

    Exactness: each micro-batch's gradient is weighted by its share of the whole batch's
    loss denominator (samples, or valid elements when the model's output carries a Keras
    mask), so uneven micro-batches, sample and class weights and masked sequence losses
    give the same update as the whole batch. Weight regularizers count once per update;
    losses added in ``call`` (activity regularizers) are summed over the batch, as Keras
    does. Under ``tf.distribute`` the denominator is global across replicas.

    Limits: BatchNormalization normalises with micro-batch statistics (a warning is given);
    with a mask on more than one output only the first output's valid count is used.

    Args:
        gradient_accumulation_steps: int >= 1, the number of micro-batches each step is cut
            into. ``1`` is plain Keras training.
        *args, **kwargs: as for ``keras.Model`` (functional ``inputs``/``outputs``).
    """

    def __init__(self, *args, gradient_accumulation_steps: int = 1, **kwargs):
        super().__init__(*args, **kwargs)
        self.gradient_accumulation_steps = validate_accumulation_steps(gradient_accumulation_steps)
        self._warned: set[str] = set()

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_model(
        cls, model: keras.Model, gradient_accumulation_steps: int
    ) -> GradientAccumulationModel:
        """Wraps a built functional or Sequential model without copying its weights.

        The returned model shares the layers (and so the weights) of ``model``.
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
                f"(got {model.name!r}). Build a Sequential model with an `keras.Input` first, "
                "or subclass GradientAccumulationModel for subclassed models."
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
        )

    def get_config(self) -> dict:
        config = super().get_config()
        config["gradient_accumulation_steps"] = self.gradient_accumulation_steps
        return config

    @classmethod
    def from_config(cls, config: dict, custom_objects=None):
        config = dict(config)
        steps = config.pop("gradient_accumulation_steps", 1)
        model = super().from_config(config, custom_objects=custom_objects)
        model.gradient_accumulation_steps = validate_accumulation_steps(steps)
        return model

    # --------------------------------------------------------------------- training

    def _warn_once(self, key: str, message: str) -> None:
        if not hasattr(self, "_warned"):
            self._warned = set()
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, stacklevel=3)

    def _warn_if_batch_normalization(self) -> None:
        if any(
            isinstance(layer, keras.layers.BatchNormalization) for layer in self._flatten_layers()
        ):
            self._warn_once(
                "batchnorm",
                "GradientAccumulationModel: BatchNormalization layers normalise each "
                f"micro-batch of ~1/{self.gradient_accumulation_steps} of the batch with its "
                "own statistics, so training is not exactly equivalent to the whole batch. "
                "Use LayerNormalization/GroupNormalization, or freeze BatchNormalization "
                "(layer.trainable = False), for exact accumulation.",
            )

    def _forward(self, x):
        if self._call_has_training_arg:
            return self(x, training=True)
        return self(x)

    def _weight_regularizers(self) -> list[tuple[Any, Any]]:
        return [
            (v, v.regularizer)
            for v in self.trainable_weights
            if getattr(v, "regularizer", None) is not None
        ]

    def _call_losses(self, num_weight_regularizers: int) -> list[tf.Tensor]:
        # Model.losses lists add_loss() values (own, then sublayers') and then one weight
        # regularization loss per regularized weight, which are counted separately.
        losses = self.losses
        if num_weight_regularizers:
            losses = losses[: len(losses) - num_weight_regularizers]
        return [tf.cast(tf.reduce_sum(loss), tf.float32) for loss in losses]

    def _data_loss(self, x, y, y_pred, sample_weight, replicas: int) -> tf.Tensor:
        """The micro-batch's mean loss, not scaled for distribution."""
        if type(self).compute_loss is not keras.Model.compute_loss:
            # A user override: treat its value as a mean over the micro-batch.
            loss = self._compute_loss(
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
            )
        elif self._compile_loss is not None:
            loss = self._compile_loss(y, y_pred, sample_weight)
        else:
            loss = None
        if loss is None:
            return tf.zeros((), tf.float32)
        return tf.cast(loss, tf.float32) * float(replicas)

    def train_step(self, data):
        k = self.gradient_accumulation_steps
        if k == 1:
            return super().train_step(data)
        self._warn_if_batch_normalization()
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        trainable = self.trainable_weights
        if not trainable:
            warnings.warn("The model does not have any trainable weights.", stacklevel=2)
            return super().train_step(data)

        strategy = tf.distribute.get_strategy()
        replicas = strategy.num_replicas_in_sync
        replica_ctx = tf.distribute.get_replica_context()

        def all_sum(value):
            if replicas > 1 and replica_ctx is not None:
                return replica_ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)
            return value

        n = _batch_size(x)
        n_float = tf.cast(n, tf.float32)
        static_n = next(t for t in tree.flatten(x) if t is not None).shape[0]
        if static_n is not None and static_n % k == 0:
            # Static shapes (e.g. drop_remainder=True on TPU): k micro-batches of n/k rows.
            count, static_size = k, static_n // k
        else:
            count, static_size = tf.maximum(tf.minimum(n, k), 1), None
        # The whole (global) batch's sample count, the denominator of mean losses.
        global_samples = all_sum(n_float)
        regularized = self._weight_regularizers()

        def bounds(j):
            """Start and size of micro-batch j: sizes differ by at most one sample."""
            if static_size is not None:
                return j * static_size, static_size
            start = (j * n) // count
            return start, ((j + 1) * n) // count - start

        # Decided on the first micro-batch, at trace time: whether the loss denominator is
        # the sample count (known now) or a valid-element count from output masks.
        mode: dict[str, Any] = {}

        def micro_step(j):
            start, size = bounds(j)
            xj = _slice(x, start, size)
            yj = _slice(y, start, size)
            swj = _slice(sample_weight, start, size)
            with tf.GradientTape() as tape:
                y_pred = self._forward(xj)
                data_loss = self._data_loss(xj, yj, y_pred, swj, replicas)
                call_losses = self._call_losses(len(regularized))
                masks = [m for m in (_keras_mask(o) for o in tree.flatten(y_pred)) if m is not None]
                if "masked" not in mode:
                    mode["masked"] = bool(masks)
                    if len(masks) > 1:
                        self._warn_once(
                            "masks",
                            "GradientAccumulationModel: several outputs carry masks; the "
                            "first one's valid count weights the micro-batches.",
                        )
                    if masks and call_losses:
                        self._warn_once(
                            "masked-add-loss",
                            "GradientAccumulationModel: losses added in call() are "
                            "weighted approximately when the output is masked.",
                        )
                if mode["masked"]:
                    denom = _valid_count(masks[:1])
                    # Normalised by local samples for range; rescaled by n/D after the loop.
                    scale = denom / tf.maximum(n_float, 1.0)
                else:
                    denom = tf.cast(size, tf.float32)
                    scale = tf.math.divide_no_nan(denom, global_samples)
                objective = data_loss * scale
                if call_losses:
                    objective += tf.add_n(call_losses)
                scaled = self.optimizer.scale_loss(objective)
            grads = tape.gradient(scaled, trainable)
            # Sum of weighted losses (S_j) for the reported whole-batch loss.
            loss_sum = data_loss * denom
            if call_losses:
                loss_sum_extra = tf.add_n(call_losses)
            else:
                loss_sum_extra = tf.zeros((), tf.float32)
            if self._compile_metrics is not None:
                self._compile_metrics.update_state(yj, y_pred, swj)
            return grads, denom, loss_sum, loss_sum_extra

        # First micro-batch outside the loop: it fixes which gradients exist (None ones
        # stay None, as in plain Keras) and seeds the accumulators.
        grads0, denom0, sum0, extra0 = micro_step(tf.constant(0))
        present = [i for i, g in enumerate(grads0) if g is not None]
        acc0 = [_accumulator_start(grads0[i]) for i in present]

        def body(j, acc, denom, loss_sum, extra):
            grads, d, s, e = micro_step(j)
            new_acc = [_accumulator_add(a, j, grads[i]) for a, i in zip(acc, present)]
            return j + 1, new_acc, denom + d, loss_sum + s, extra + e

        # The loop may only start once the first micro-batch's backward pass is done;
        # otherwise the executor can run the loop's first forward pass alongside it and
        # hold two micro-batches of activations at once.
        with tf.control_dependencies([g for g in tree.flatten(acc0) if tf.is_tensor(g)]):
            first_j = tf.identity(tf.constant(1))
        _, acc, denom, loss_sum, extra = tf.while_loop(
            lambda j, *_: j < count,
            body,
            (first_j, acc0, denom0, sum0, extra0),
            parallel_iterations=1,
        )
        acc = [_accumulator_result(a, grads0[i]) for a, i in zip(acc, present)]

        if mode["masked"]:
            global_denom = all_sum(denom)
            factor = tf.math.divide_no_nan(n_float, global_denom)
            acc = [_scale(a, factor) for a in acc]
        else:
            global_denom = global_samples

        batch_loss = tf.math.divide_no_nan(loss_sum, global_denom) + extra
        gradients: list[Any] = [None] * len(trainable)
        for a, i in zip(acc, present):
            gradients[i] = a
        if regularized:
            # Weight regularizers count once per update (divided over replicas, whose
            # gradients are summed). A weight reached only by its regularizer is updated too.
            with tf.GradientTape() as tape:
                reg = tf.add_n([tf.cast(tf.reduce_sum(r(v)), tf.float32) for v, r in regularized])
                reg_scaled = self.optimizer.scale_loss(reg / float(replicas))
            for i, g in enumerate(tape.gradient(reg_scaled, trainable)):
                if g is not None:
                    g = _to_accumulator(g)
                    gradients[i] = (
                        g if gradients[i] is None else tf.convert_to_tensor(gradients[i]) + g
                    )
            batch_loss += reg / float(replicas)
        gradients = [None if g is None else _cast(g, v.dtype) for g, v in zip(gradients, trainable)]
        self.optimizer.apply_gradients(zip(gradients, trainable))

        # Every replica reports the exact whole-batch loss, weighted by its sample count
        # so that the cross-replica mean is that loss again.
        self._loss_tracker.update_state(all_sum(batch_loss), sample_weight=n)
        return self.get_metrics_result()
