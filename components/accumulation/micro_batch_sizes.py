"""How a batch of ``n`` rows is cut into ``k`` micro-batches, in Python ints.

The cut the eager and compiled steps share (JAX's, PyTorch's, and TensorFlow's static
schedule in ``micro_batches``): ``min(n, k)`` micro-batches whose sizes differ by at most
one row, the ``n mod k`` long ones first. Any cut of the rows is exact; one cut everywhere
makes the backends' steps comparable micro-batch by micro-batch.
"""

from __future__ import annotations

__all__ = ["micro_batch_cuts", "micro_batch_groups"]


def micro_batch_groups(n: int, k: int) -> list[tuple[int, int]]:
    """``[(size, count), ...]``: ``min(n, k)`` micro-batches as equal as possible, long first."""
    count = max(min(n, k), 1)
    short, long_count = divmod(n, count)
    groups = [(short + 1, long_count), (short, count - long_count)]
    return [(size, c) for size, c in groups if size > 0 and c > 0]


def micro_batch_cuts(n: int, k: int) -> list[tuple[int, int]]:
    """``[(start, size), ...]``: each micro-batch of :func:`micro_batch_groups`, in order."""
    cuts, start = [], 0
    for size, count in micro_batch_groups(n, k):
        for _ in range(count):
            cuts.append((start, size))
            start += size
    return cuts
