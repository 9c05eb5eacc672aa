"""The numeric columns' first values, taken in one block, equal each column's own.

tfx_accum.components.data.raw_features gathers every ragged numeric column's first value at once
(a fixed number of ops whatever the width); the reference is each column on its own through
``RaggedTensor.to_tensor``, what the serving function did before. Examples with no value,
with several values, integer and float columns, and an empty batch.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfx_accum.components.data import raw_features
from tfx_accum.components.data.feature_kinds import NUMERIC, STRING
from tfx_accum.components.data.features import DataDescription, InputFeature

ROWS = [  # per example: {column: values}; a column an example lacks is missing
    {"a": [1.5], "b": [3], "s": [b"x"], "label": [1]},
    {"b": [7, 8], "c": [-2.0, 4.0], "label": [0]},
    {"a": [2.5, 9.0], "label": [1]},
    {"a": [0.25], "b": [-1], "c": [6.0], "s": [b"y"], "label": [0]},
]
DTYPES = {"a": tf.float32, "b": tf.int64, "c": tf.float32}


def _example(row: dict) -> bytes:
    def feature(values):
        if isinstance(values[0], bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        if isinstance(values[0], int):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))

    features = {name: feature(values) for name, values in row.items()}
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def _data() -> DataDescription:
    numbers = [InputFeature(n, NUMERIC, raw_dtype=tf.as_dtype(t).name) for n, t in DTYPES.items()]
    return DataDescription((*numbers, InputFeature("s", STRING, raw_dtype="string")), "label", 2)


def _reference(serialized, data) -> dict[str, np.ndarray]:
    spec = raw_features.raw_spec({f.name: f.raw_dtype for f in data.features})
    parsed = tf.io.parse_example(serialized, spec)
    return {
        name: tf.cast(parsed[name], tf.float32).to_tensor(np.nan, shape=[None, 1]).numpy()
        for name in DTYPES
    }


def test_the_block_equals_each_columns_first_value():
    data = _data()
    serialized = tf.constant([_example(r) for r in ROWS])
    raw = raw_features.parse_raw(serialized, data, with_label=True)
    assert list(raw) == ["a", "b", "c", "s", "label"]
    reference = _reference(serialized, data)
    for name in DTYPES:
        assert raw[name].dtype == tf.float32 and raw[name].shape == (len(ROWS), 1)
        np.testing.assert_array_equal(raw[name].numpy(), reference[name])
    np.testing.assert_array_equal(raw["a"].numpy()[:, 0], [1.5, np.nan, 2.5, 0.25])
    np.testing.assert_array_equal(raw["b"].numpy()[:, 0], [3, 7, np.nan, -1])
    assert raw["s"].numpy()[:, 0].tolist() == [b"x", b"", b"", b"y"]
    assert raw["label"].numpy().tolist() == [1, 0, 1, 0]


def test_an_empty_batch_and_a_batch_without_numbers():
    data = _data()
    empty = raw_features.parse_raw(tf.constant([], tf.string), data)
    assert all(empty[name].shape == (0, 1) for name in DTYPES)
    none = raw_features.parse_raw(tf.constant([_example({"s": [b"z"]})] * 2), data)
    for name in DTYPES:
        np.testing.assert_array_equal(none[name].numpy(), np.full((2, 1), np.nan, np.float32))


@pytest.mark.parametrize("finite", [False, True], ids=["parse", "and-refuse-non-finite"])
def test_the_serving_graph_does_not_grow_with_the_columns(finite):
    def ops(width: int) -> int:
        """The graph's ops, without the Identity that names each returned column."""
        data = DataDescription.numeric([f"x{i}" for i in range(width)], 2)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def parse(serialized):
            return raw_features.parse_raw(serialized, data, finite=finite)

        graph = parse.get_concrete_function().graph
        return sum(op.type != "Identity" for op in graph.get_operations())

    assert ops(400) == ops(10)
