"""Examples held in memory (tfx_accum.components.data.datasets: ``HeldInMemory``, ``stream_reads``):
a shuffled stream over them yields what the stream over the whole split yields."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
import tensorflow as tf

from tfx_accum.components.data.datasets import (
    VALIDATION_EVERY,
    HeldInMemory,
    batched,
    held_out_part,
    held_parts,
    stream_reads,
)

ROWS = 12_000


def _split() -> tf.data.Dataset:
    """Unbatched ``(inputs, label)`` examples, as ``read_splits`` gives them."""
    x = np.arange(ROWS * 3, dtype="float32").reshape(ROWS, 3)
    return tf.data.Dataset.from_tensor_slices(({"numeric": x}, np.arange(ROWS) % 7))


def _batches(dataset: tf.data.Dataset, batch: int, examples: int) -> list[np.ndarray]:
    stream = batched(dataset, batch, shuffle_seed=42).take(math.ceil(examples / batch))
    return [inputs["numeric"].numpy() for inputs, _ in stream]


@pytest.mark.parametrize("batch", [64, 100])
def test_a_stream_over_the_held_examples_is_the_stream_over_the_split(batch):
    examples = math.ceil(5_000 / batch) * batch  # whole batches: what the stream yields
    held = HeldInMemory.first(_split(), stream_reads(examples))
    assert held.count == stream_reads(examples) < ROWS
    assert held.nbytes == held.count * (3 * 4 + 8)
    ours, streamed = _batches(held.dataset, batch, examples), _batches(_split(), batch, examples)
    assert len(ours) == len(streamed)
    for a, b in zip(ours, streamed):
        np.testing.assert_array_equal(a, b)


def test_without_the_shuffle_buffer_the_last_examples_would_differ():
    """Why ``stream_reads`` adds the buffer: holding only the examples a stream yields
    changes the stream's end (the shuffle draws from a draining buffer)."""
    examples = 5_000
    short = HeldInMemory.first(_split(), examples)
    ours, streamed = _batches(short.dataset, 100, examples), _batches(_split(), 100, examples)
    assert any(not np.array_equal(a, b) for a, b in zip(ours, streamed))


@pytest.mark.parametrize(
    "train,validation", [(5_000, 1_000), (100, 2_000), (ROWS * 4 // 5, ROWS // 5)]
)
def test_both_parts_are_read_in_one_pass_as_the_split_holds_them_out(train, validation):
    """``held_parts``: the first training and held-out examples (every VALIDATION_EVERY-th
    example of the split is held out), in order, as the two parts' own streams give them."""
    x = np.arange(ROWS * 3, dtype="float32").reshape(ROWS, 3)
    y = np.arange(ROWS) % 7
    splits = types.SimpleNamespace(blocks=_split().batch(256))
    train_held, validation_held = held_parts(splits, train, validation)
    held_out = np.arange(ROWS) % VALIDATION_EVERY == VALIDATION_EVERY - 1
    for held, mask, count in (
        (train_held, ~held_out, train),
        (validation_held, held_out, validation),
    ):
        inputs, labels = next(iter(held.dataset.batch(ROWS)))
        np.testing.assert_array_equal(inputs["numeric"].numpy(), x[mask][:count])
        np.testing.assert_array_equal(labels.numpy(), y[mask][:count])
        assert held.count == len(x[mask][:count])


def _uneven_blocks() -> tf.data.Dataset:
    """The split in blocks of uneven sizes (none a multiple of VALIDATION_EVERY)."""
    sizes = [7, 256, 1, 33, 256, 256, 12]
    x = np.arange(sum(sizes) * 3, dtype="float32").reshape(-1, 3)
    y = np.arange(sum(sizes)) % 7
    starts = np.cumsum([0, *sizes])
    blocks = [({"numeric": x[a:b]}, y[a:b]) for a, b in zip(starts[:-1], starts[1:], strict=True)]
    return tf.data.Dataset.from_generator(
        lambda: iter(blocks),
        output_signature=(
            {"numeric": tf.TensorSpec((None, 3), tf.float32)},
            tf.TensorSpec((None,), tf.int64),
        ),
    )


@pytest.mark.parametrize("held_out", [False, True])
def test_a_part_is_the_split_filtered_by_position_whatever_the_blocks(held_out):
    """``held_out_part``: the examples a filter of the numbered examples keeps, in order."""
    blocks = _uneven_blocks()
    reference = (
        blocks.unbatch()
        .enumerate()
        .filter(lambda i, _: tf.equal(i % VALIDATION_EVERY == VALIDATION_EVERY - 1, held_out))
        .map(lambda _, example: example)
    )
    ours, theirs = (
        list(d.as_numpy_iterator()) for d in (held_out_part(blocks, held_out), reference)
    )
    assert len(ours) == len(theirs) > 100
    for (inputs, label), (expected_inputs, expected_label) in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(inputs["numeric"], expected_inputs["numeric"])
        assert label == expected_label
