"""Serialized or parsed ``tf.Example`` features to the dense raw tensors the Preprocessor takes.

One contract for training (TFXIO's dense and sparse tensors, tfx_accum.components.data.datasets)
and serving (``tf.io.parse_example``'s ragged tensors, tfx_accum.components.training.export): each
feature becomes its examples' first value, ``(batch, 1)``, with a fill where an example has
none (numbers: NaN, which the model's ``FillMissing`` replaces with the training mean;
categories: -1; strings: ""); image bytes stay ``(batch,)``.

The numeric columns that arrive ragged (every one, in serving) are taken in one block:
their values concatenated, their row splits stacked, each example's first value gathered
at once, so the graph holds a fixed number of ops whatever the width. Per column, a ragged
``to_tensor`` is a dozen ops: on 5,000 columns the serving function would have 15,000 ops
to trace and optimise on its first call, in every process that loads it; the block is a few ops.
Both give the same values (tests/data/test_raw_features.py).

Example::

    raw = parse_raw(serialized, data)      # {name: (batch, 1) numbers, ...}
    inputs = Preprocessor(data)(raw)
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from tfx_accum.components.data.feature_kinds import CATEGORICAL, NUMERIC, STRING, TENSOR

if TYPE_CHECKING:  # tfx_accum.components.data.features imports this module
    from tfx_accum.components.data.features import DataDescription, InputFeature


def raw_spec(names_and_dtypes: dict[str, str]) -> dict[str, tf.io.RaggedFeature]:
    """A parse spec that accepts a feature with zero or more values (missing is allowed)."""
    return {
        name: tf.io.RaggedFeature(tf.as_dtype(dtype), row_splits_dtype=tf.int64)
        for name, dtype in names_and_dtypes.items()
    }


def _label_dtype(data: DataDescription) -> str:
    if data.label_vocabulary:
        return "string"
    return data.label_raw_dtype if data.label_raw_dtype != "string" else "int64"


def _first_value(column, fill) -> tf.Tensor:
    """Each example's first value, ``(batch, 1)``, ``fill`` where it has none, whatever
    form a parser gave (dense, sparse or ragged)."""
    if isinstance(column, tf.SparseTensor):
        column = tf.RaggedTensor.from_sparse(column)
    if isinstance(column, tf.RaggedTensor):
        return column.to_tensor(default_value=fill, shape=[None, 1])
    column = tf.convert_to_tensor(column)
    if column.shape.rank == 1:
        column = column[:, None]
    if column.shape.rank == 2 and column.shape[1] == 1:
        return column
    return column[:, :1]


def _is_flat_ragged(column) -> bool:
    return isinstance(column, tf.RaggedTensor) and column.ragged_rank == 1


def _first_numbers(columns: list[tf.RaggedTensor]) -> list[tf.Tensor]:
    """Each ragged column's first value per example as float32 ``(batch, 1)``, NaN where
    an example has none: one gather over all the columns' values."""
    values = tf.concat(
        [tf.cast(c.flat_values, tf.float32) for c in columns] + [tf.constant([np.nan])], 0
    )
    splits = tf.stack([tf.cast(c.row_splits, tf.int64) for c in columns])  # (n, batch + 1)
    starts = splits[:, :-1] + tf.cumsum(splits[:, -1], exclusive=True)[:, None]
    present = splits[:, 1:] > splits[:, :-1]
    missing_index = tf.cast(tf.shape(values)[0] - 1, tf.int64)  # the NaN appended last
    first = tf.gather(values, tf.where(present, starts, missing_index))  # (n, batch)
    return tf.split(tf.transpose(first), len(columns), axis=1)


_TENSOR_FILLS = {"float32": np.nan, "int64": 0, "string": ""}


def _as_declared(column, feature: InputFeature) -> tf.Tensor:
    """A ``TENSOR`` feature in the shape its model declares, ``(batch, *shape)``, in its
    own dtype; a missing value filled (numbers NaN, which ``FillMissing`` replaces with
    the mean; integers 0 and strings "", as TFX's examples fill them). An input of more
    than one value takes exactly that many per example: another count fails, never padded."""
    fill = _TENSOR_FILLS[feature.raw_dtype]
    size = int(np.prod(feature.tensor_shape))
    if isinstance(column, tf.SparseTensor):
        column = tf.RaggedTensor.from_sparse(column)
    if isinstance(column, tf.RaggedTensor):
        if size > 1:
            lengths = column.row_lengths()
            check = tf.debugging.assert_equal(
                lengths,
                tf.cast(size, lengths.dtype),
                message=f"feature {feature.name!r} must have {size} values in every example",
            )
            with tf.control_dependencies([check]):
                column = tf.identity(column.to_tensor(default_value=fill, shape=[None, size]))
        else:
            column = column.to_tensor(default_value=fill, shape=[None, 1])
    column = tf.convert_to_tensor(column)
    if feature.raw_dtype == "float32":
        column = tf.cast(column, tf.float32)
    return tf.reshape(column, [-1, *feature.tensor_shape])


@tf.autograph.experimental.do_not_convert  # Python over features, no tensor control flow
def dense_raw(parsed: dict[str, Any], data: DataDescription, with_label: bool = False):
    """Parsed features (``tf.io.parse_example``'s ragged, or TFXIO's dense and sparse
    tensors) to dense raw tensors: ``(batch, 1)`` numbers (NaN where missing), category
    integers (-1 where missing) and strings ("" where missing); ``(batch,)`` image bytes;
    with ``with_label``, the raw label ``(batch,)`` under ``data.label_key``."""
    ragged_numbers = [
        f.name for f in data.features if f.kind == NUMERIC and _is_flat_ragged(parsed[f.name])
    ]
    in_block = {}
    if ragged_numbers:
        in_block = dict(zip(ragged_numbers, _first_numbers([parsed[n] for n in ragged_numbers])))
    raw = {}
    for feature in data.features:
        column = parsed[feature.name]
        if feature.name in in_block:
            raw[feature.name] = in_block[feature.name]
        elif feature.kind == NUMERIC:
            if isinstance(column, tf.SparseTensor | tf.RaggedTensor):
                column = tf.cast(column, tf.float32)
            else:
                column = tf.cast(tf.convert_to_tensor(column), tf.float32)
            raw[feature.name] = _first_value(column, np.nan)
        elif feature.kind == CATEGORICAL:
            raw[feature.name] = _first_value(column, tf.constant(-1, column.dtype))
        elif feature.kind == STRING:
            raw[feature.name] = _first_value(column, "")
        elif feature.kind == TENSOR:
            raw[feature.name] = _as_declared(column, feature)
        else:
            raw[feature.name] = _first_value(column, "")[:, 0]
    if with_label:
        label = parsed[data.label_key]
        fill = "" if data.label_vocabulary else tf.constant(-1, label.dtype)
        raw[data.label_key] = _first_value(label, fill)[:, 0]
    return raw


def parse_raw(
    serialized: tf.Tensor, data: DataDescription, with_label: bool = False, finite: bool = False
) -> dict[str, tf.Tensor]:
    """Dense raw features of a batch of serialized examples (see :func:`dense_raw`); with
    ``finite``, a number that is not finite is an error (:func:`assert_finite_numbers`)."""
    dtypes = {f.name: f.raw_dtype for f in data.features}
    if with_label:
        dtypes[data.label_key] = _label_dtype(data)
    parsed = tf.io.parse_example(serialized, raw_spec(dtypes))
    if finite:
        assert_finite_numbers(parsed)
    return dense_raw(parsed, data, with_label)


NOT_FINITE = (
    "A served example holds a number that is not finite (inf, -inf or NaN): send finite "
    "numbers, and leave a missing value out of the example. Feature, example, value:"
)


def _as_flat_ragged(column) -> tf.RaggedTensor:
    """A parsed column as ``(batch, None)`` ragged values: ``parse_example``'s ragged ones as
    they are (no op), TFXIO's or Transform's sparse and dense ones converted."""
    if isinstance(column, tf.RaggedTensor):
        return column if column.ragged_rank == 1 else column.merge_dims(1, -1)
    if isinstance(column, tf.SparseTensor):
        return tf.RaggedTensor.from_sparse(tf.sparse.reshape(column, [column.dense_shape[0], -1]))
    column = tf.convert_to_tensor(column)
    return tf.RaggedTensor.from_tensor(tf.reshape(column, [tf.shape(column)[0], -1]))


@tf.autograph.experimental.do_not_convert  # Python over features, no tensor control flow
def assert_finite_numbers(parsed: dict[str, Any]) -> None:
    """Raises ``InvalidArgumentError`` naming the feature, the example (from 0) and the
    value where a floating-point feature of ``parsed`` holds inf, -inf or NaN (a missing
    value is an absent feature, never NaN). One check over the columns' values concatenated,
    as :func:`_first_numbers` reads them, so that the graph holds a fixed number of ops
    whatever the width; the first bad value's column and example are found from its
    position."""
    names = [n for n, c in parsed.items() if c.dtype.is_floating]
    if not names:
        return
    columns = [_as_flat_ragged(parsed[n]) for n in names]
    values = tf.concat([tf.cast(c.flat_values, tf.float32) for c in columns] + [[0.0]], 0)
    splits = tf.stack([tf.cast(c.row_splits, tf.int64) for c in columns])  # (n, batch + 1)
    ends = tf.cumsum(splits[:, -1])  # where each column's values end in ``values``
    finite = tf.math.is_finite(values)
    first = tf.argmax(tf.cast(tf.logical_not(finite), tf.int64))  # the appended 0 if none
    column = tf.searchsorted(ends, first[None], side="right")[0]  # n for the appended 0
    starts = tf.concat([[0], ends], 0)
    splits = tf.concat([splits, tf.zeros_like(splits[:1])], 0)
    example = tf.searchsorted(splits[column], (first - starts[column])[None], side="right")[0]
    feature = tf.gather(tf.constant([*names, ""]), column)
    tf.debugging.Assert(tf.reduce_all(finite), [NOT_FINITE, feature, example - 1, values[first]])


def parse_label(serialized: tf.Tensor, data: DataDescription) -> tf.Tensor:
    """The raw label of each serialized example, ``(batch,)``."""
    parsed = tf.io.parse_example(serialized, raw_spec({data.label_key: _label_dtype(data)}))
    return dense_raw(parsed, dataclasses.replace(data, features=()), with_label=True)[
        data.label_key
    ]
