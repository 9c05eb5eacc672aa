"""The examples the Tuner and Trainer hold are the examples read, counted and checked
(tfx_accum.components.data.datasets: ``read_splits``, ``held_parts``, ``HeldInMemory``): a split
that yields fewer examples than its statistics count, or fewer than a part asks for, is an
error naming both counts, never a shorter part reported as the full one.

The split is read through TFX's stock data accessor (TFXIO's factory of an ``Examples``
artifact, what ``fn_args.data_accessor`` holds in TFX's Tuner and Trainer). The partial
reads that cut a cached split short, and the stock Tuner itself, run in fresh processes:
tests/search/test_split_counts_fresh.py.
"""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
import tensorflow as tf
from stock_tuner_counts import KEYS, LABEL, artifacts, exec_properties, write_examples
from tfx.components.trainer import fn_args_utils

from tfx_accum.components.data import datasets
from tfx_accum.components.data.datasets import (
    HeldInMemory,
    SplitCountError,
    held_parts,
    read_splits,
)
from tfx_accum.components.data.features import DataDescription

ROWS = 1_000


@pytest.fixture(scope="module")
def examples(tmp_path_factory) -> tuple[object, DataDescription]:
    """``fn_args`` as TFX makes them (the stock data accessor) over a split of ``ROWS``
    examples, and the split's description."""
    root = tmp_path_factory.mktemp("examples")
    write_examples(root, ROWS)
    fn_args = fn_args_utils.get_common_fn_args(artifacts(root), exec_properties("mlp"))
    data = DataDescription.numeric(KEYS, 2, label_key=LABEL)
    return fn_args, dataclasses.replace(data, rows=ROWS)


def test_a_split_that_reads_fewer_examples_than_its_statistics_count_is_refused(examples):
    fn_args, data = examples
    with pytest.raises(SplitCountError, match=r"Read 1,000 examples .* statistics count 1,005"):
        read_splits(fn_args, dataclasses.replace(data, rows=ROWS + 5))


def _numbered(rows: int) -> tf.data.Dataset:
    x = np.arange(rows * 2, dtype="float32").reshape(rows, 2)
    return tf.data.Dataset.from_tensor_slices(({"numeric": x}, np.arange(rows) % 2))


def test_holding_more_examples_than_the_split_has_is_refused():
    """Asked for more than the split yields: an error naming both counts, never a
    shorter part reported as the asked count."""
    splits = types.SimpleNamespace(blocks=_numbered(100).batch(32))
    with pytest.raises(SplitCountError, match=r"Held 80 training examples .* 90 were asked"):
        held_parts(splits, 90, 10)
    with pytest.raises(SplitCountError, match=r"Held 20 held-out examples .* 30 were asked"):
        held_parts(splits, 10, 30)
    with pytest.raises(SplitCountError, match=r"Held 100 training examples .* 120 were asked"):
        HeldInMemory.first(_numbered(100), 120, "training")
    assert HeldInMemory.first(_numbered(100), 100, "training").count == 100
    assert [h.count for h in held_parts(splits, 80, 20)] == [80, 20]


def test_the_split_is_held_in_the_blocks_it_was_read_in(examples):
    """The held split yields the same blocks as a plain read of the files: the same
    examples, in the same order, in blocks of the reading batch."""
    fn_args, data = examples
    splits = read_splits(fn_args, data)
    schema = datasets._pruned(datasets.examples_schema(fn_args), {*data.keys, data.label_key})
    plain = list(datasets._parsed(fn_args, list(fn_args.train_files), schema))
    held = list(splits.blocks)
    assert [len(b[1]) for b in held] == [len(b[LABEL]) for b in plain]
    for (inputs, label), raw in zip(held, plain, strict=True):
        np.testing.assert_array_equal(label.numpy().ravel(), raw[LABEL].numpy().ravel())
        np.testing.assert_allclose(
            inputs["f0"].numpy().ravel(), raw["f0"].numpy().ravel(), rtol=0, atol=1e-6
        )
