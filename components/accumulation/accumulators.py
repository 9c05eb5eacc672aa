"""Gradient accumulators: how each micro-batch's gradient is added into the step's total.

Dense gradients add into a float32 tensor. Sparse gradients (``tf.IndexedSlices``, from
embeddings) stay sparse: their slices are concatenated, which is exactly the gradient
plain Keras sees for the whole batch. Densifying would change the update of Adam and
RMSprop, which square each slice before summing duplicate indices.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["cast_like", "is_sparse", "make_accumulator", "to_float32"]


def to_float32(gradient: Any) -> tf.Tensor:
    if isinstance(gradient, tf.IndexedSlices):
        gradient = tf.convert_to_tensor(gradient)
    return tf.cast(gradient, tf.float32)


def cast_like(gradient: Any, dtype) -> Any:
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(
            tf.cast(gradient.values, dtype), gradient.indices, gradient.dense_shape
        )
    return tf.cast(gradient, dtype)


class _DenseAccumulator:
    def start(self, gradient: Any, rows: tf.Tensor) -> Any:
        return to_float32(gradient)

    def add(self, state: Any, j: tf.Tensor, gradient: Any) -> Any:
        return state if gradient is None else state + to_float32(gradient)

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


def is_sparse(gradient: Any) -> bool:
    return isinstance(gradient, tf.IndexedSlices)


def make_accumulator(gradient: Any, count: tf.Tensor, first_size: Any, xla: bool):
    """The accumulator for one variable's gradient, seeded later with ``start``.

    ``count`` is the number of micro-batches of the step and ``first_size`` the rows of
    the first one (they size the fixed buffer that XLA needs for sparse gradients).
    """
    if not is_sparse(gradient):
        return _DenseAccumulator()
    if xla:
        return _SparseBufferAccumulator(count, first_size)
    return _SparseAccumulator()
