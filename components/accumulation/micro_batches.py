"""Where each micro-batch of one training step lies in the batch, and how it is cut out.

A step of :class:`~tfx_accum.components.accumulation.model.GradientAccumulationModel` receives the
whole batch of ``n`` rows and cuts it into ``k`` micro-batches. Two schedules, both exact (any
split of the rows is; they differ in shapes, memory and what a compiler needs):

- :class:`DynamicSchedule` (no XLA): ``min(n, k)`` micro-batches whose sizes differ by at
  most one row, cut with slices whose bounds are tensors. ``k`` may itself be a tensor (a
  variable read in the step), so that one traced step serves every ``k``.
- :class:`StaticSchedule` (``jit_compile=True``, TPUs): ``k`` is a Python int, and every
  micro-batch inside a loop has one size XLA knows when it compiles: the ``n mod k``
  micro-batches of ``n // k + 1`` rows run in one loop and the others, of ``n // k`` rows,
  in a second (XLA compiles a step per batch shape, so both sizes are constants there).
  Layers with loops of their own (LSTM, GRU, ``while_loop``) then compile; with sizes
  that depend on the loop counter, XLA cannot infer their batch dimension. On a CPU the
  ``k`` micro-batches are traced one after another instead of in loops (``unrolled``):
  XLA's CPU backend compiles convolution gradients inside a ``while`` loop to code many
  times slower than the same convolutions outside one (``bench.speed``'s conv net); the
  order of the traced micro-batches is then left to XLA's (memory-aware) scheduler.

Dense tensors are cut by slicing; in the static schedule each loop's slice size is a
loop-invariant that XLA folds to a constant. ``tf.SparseTensor`` and ``tf.RaggedTensor``
inputs are cut along their rows in the dynamic schedule; under XLA they are refused with
one line (XLA cannot give a sparse or ragged slice a static shape; plain Keras does not
compile sparse inputs either).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import tensorflow as tf
from keras import tree

__all__ = [
    "DynamicSchedule",
    "Segment",
    "StaticSchedule",
    "check_splittable",
    "first_leaf",
]


def first_leaf(structure: Any) -> Any:
    return next(t for t in tree.flatten(structure) if t is not None)


def rows(structure: Any) -> tf.Tensor:
    """The batch's row count (the first input's leading dimension)."""
    leaf = first_leaf(structure)
    if isinstance(leaf, tf.SparseTensor):
        return tf.cast(leaf.dense_shape[0], tf.int32)
    if isinstance(leaf, tf.RaggedTensor):
        return tf.cast(leaf.nrows(), tf.int32)
    return tf.shape(leaf)[0]


def _kind(t: Any) -> str | None:
    if isinstance(t, tf.SparseTensor):
        return "tf.SparseTensor"
    if isinstance(t, tf.RaggedTensor):
        return "tf.RaggedTensor"
    return None


def check_splittable(data: Any, static: bool) -> None:
    """Refuses, in one line, inputs the chosen schedule cannot cut into micro-batches."""
    if not static:
        return
    for path, leaf in tree.flatten_with_path(data):
        kind = _kind(leaf)
        if kind is not None:
            name = "/".join(str(p) for p in path) or "x"
            raise ValueError(
                f"GradientAccumulationModel: input {name!r} is a {kind}, which XLA cannot cut "
                "into micro-batches of a static shape (jit_compile=True); compile with "
                "jit_compile=False (exact accumulation, sparse and ragged inputs are split "
                "along their rows), or feed it dense."
            )


def _slice_rows(t: Any, start: Any, size: Any) -> Any:
    """Rows ``start:start+size`` of a dense, sparse or ragged tensor (tensor bounds)."""
    if t is None:
        return None
    if isinstance(t, tf.SparseTensor):
        rank = t.dense_shape.shape[0]
        begin = tf.concat([[tf.cast(start, tf.int64)], tf.zeros([rank - 1], tf.int64)], 0)
        extent = tf.concat([[tf.cast(size, tf.int64)], t.dense_shape[1:]], 0)
        return tf.sparse.slice(t, begin, extent)
    # A strided slice with tensor bounds works for dense and ragged tensors alike.
    return t[start : start + size]


@dataclasses.dataclass
class Segment:
    """Micro-batches ``lo .. hi-1``, run in one loop; ``fetch(j)`` returns micro-batch j.

    ``fetch`` returns ``(structures, start, size)``: the cut structures (in the order they
    were given to the schedule) and the micro-batch's first row and row count.
    """

    lo: Any
    hi: Any
    fetch: Callable[[Any], tuple[list[Any], Any, Any]]
    inline: bool = False  # one micro-batch (j = lo) traced in place, not in a loop


class DynamicSchedule:
    """``min(n, k)`` micro-batches, sizes differing by at most one row; tensor bounds."""

    static = False

    def __init__(self, structures: list[Any], n: tf.Tensor, k: Any):
        self.structures = structures
        self.n = n
        k = tf.cast(k, tf.int32)
        self.count = tf.maximum(tf.minimum(n, k), 1)
        self.first_size = self._bounds(tf.constant(0))[1]

    def _bounds(self, j):
        start = (j * self.n) // self.count
        return start, ((j + 1) * self.n) // self.count - start

    def _fetch(self, j):
        start, size = self._bounds(j)
        cut = [
            tree.map_structure(lambda t: _slice_rows(t, start, size), s) for s in self.structures
        ]
        return cut, start, size

    def first(self):
        return self._fetch(tf.constant(0))

    def segments(self) -> list[Segment]:
        return [Segment(tf.constant(1), self.count, self._fetch)]


class StaticSchedule:
    """``k`` micro-batches: ``n mod k`` of ``n // k + 1`` rows, then ``n // k`` rows.

    Every size is a function of the batch's row count only, and each loop's size is
    loop-invariant, so XLA (which compiles one step per batch shape) sees constants: the
    micro-batches inside a loop all have one static shape. The first micro-batch runs
    outside the loops.
    """

    static = True

    def __init__(self, structures: list[Any], n: tf.Tensor, k: int, unrolled: bool = False):
        self.structures = structures
        self.n = n
        self.k = k
        self.unrolled = unrolled
        self.q = n // k  # rows of the short micro-batches
        self.r = n - self.q * k  # how many have one row more
        self.first_size = self.q + tf.minimum(self.r, 1)
        self.count = tf.where(self.q > 0, k, self.r)  # n < k: n micro-batches of 1 row
        self._long_rows = self.r * (self.q + 1)

    def _cut(self, start, size):
        def cut(t):
            if t is None:
                return None
            rank = len(t.shape)
            return tf.slice(t, [start] + [0] * (rank - 1), [size] + [-1] * (rank - 1))

        return [tree.map_structure(cut, s) for s in self.structures]

    def first(self):
        return self._cut(0, self.first_size), tf.constant(0), self.first_size

    def segments(self) -> list[Segment]:
        q, r, k = self.q, self.r, self.k
        if self.unrolled:
            # Micro-batch j in place: ``q + 1`` rows for j < r, else ``q`` (0 when n < k).
            def fetch(j):
                size = q + tf.cast(j < r, tf.int32)
                start = j * q + tf.minimum(j, r)
                return self._cut(start, size), start, size

            return [Segment(j, j + 1, fetch, inline=True) for j in range(1, k)]
        # The long loop is compiled even when it has no micro-batch (r = 0): its size
        # must still fit in the batch.
        long_size = tf.minimum(q + 1, self.n)

        def fetch_long(j):
            start = j * (q + 1)
            return self._cut(start, long_size), start, long_size

        def fetch_short(j):
            start = self._long_rows + (j - r) * q
            return self._cut(start, q), start, q

        short_lo = tf.maximum(r, 1)
        short_hi = tf.where(q > 0, k, short_lo)  # no short micro-batch of 0 rows
        return [Segment(tf.constant(1), r, fetch_long), Segment(short_lo, short_hi, fetch_short)]
