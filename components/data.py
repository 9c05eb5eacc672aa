"""Reading the ExampleGen splits for the Tuner and Trainer modules, streamed.

TFX builds datasets at one fixed batch size. Tuning batch sizes needs per-trial batching
(tfx #3591), so the splits are read unbatched and each trial or training run batches them
at its own effective batch size. A split whose parsed values exceed ``CACHE_BYTES`` is
streamed: every epoch reads the examples from ExampleGen's files again (the shuffle buffer
is the only thing held), so a data set larger than memory trains and memory does not grow
with the data. A smaller split is cached, parsed, in blocks of ``_READ_BATCH`` examples (no
per-example overhead): re-parsing small data every epoch would cost more than holding it.
The normalisation statistics come from a bounded pass (the first ``STATS_ROWS`` training
examples); the split sizes from counting records, without parsing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any

import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx_bsl.public import tfxio

_READ_BATCH = 256
STATS_ROWS = 100_000  # training examples the normalisation statistics are computed from
CACHE_BYTES = 64 * 2**20  # a split up to this many bytes of float32 values is cached


def _natural_key(name: str):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def load_schema(schema_path: str) -> schema_pb2.Schema:
    # As tfx.utils.parse_pbtxt_file, without importing TFX (seconds, in every worker process).
    with tf.io.gfile.GFile(schema_path) as handle:
        return text_format.Parse(handle.read(), schema_pb2.Schema())


def feature_keys(schema: schema_pb2.Schema, label_key: str) -> list[str]:
    """The model's input features: every schema feature but the label, in natural order."""
    names = [f.name for f in schema.feature]
    if label_key not in names:
        raise ValueError(
            f"The label column {label_key!r} is not in the data (columns: "
            f"{', '.join(sorted(names, key=_natural_key)[:10])}...). Set the label key."
        )
    return sorted((n for n in names if n != label_key), key=_natural_key)


def feature_spec(schema: schema_pb2.Schema, keys: list[str]) -> dict[str, tf.io.FixedLenFeature]:
    """``tf.io.parse_example`` spec of the input features (one value each)."""
    types = {f.name: f.type for f in schema.feature}
    return {
        k: tf.io.FixedLenFeature([1], tf.float32 if types[k] == schema_pb2.FLOAT else tf.int64)
        for k in keys
    }


@dataclasses.dataclass
class Splits:
    """Unbatched, streamed ``(features, label)`` datasets and feature statistics."""

    train: tf.data.Dataset
    eval: tf.data.Dataset
    keys: list[str]
    train_size: int
    mean: np.ndarray
    variance: np.ndarray


def _as_float(keys: list[str], label_key: str):
    def convert(features, label):
        return (
            {k: tf.cast(features[k], tf.float32) for k in keys},
            tf.cast(tf.reshape(label, [-1]), tf.int64),
        )

    return convert


def _read(fn_args, files, schema, keys, label_key, cache: bool) -> tf.data.Dataset:
    dataset = fn_args.data_accessor.tf_dataset_factory(
        files,
        tfxio.TensorFlowDatasetOptions(
            batch_size=_READ_BATCH, label_key=label_key, num_epochs=1, shuffle=False
        ),
        schema,
    )
    dataset = dataset.map(_as_float(keys, label_key))
    return (dataset.cache() if cache else dataset).unbatch()


def load_splits(fn_args, label_key: str) -> Splits:
    """The train and eval splits of a Trainer/Tuner ``fn_args``, streamed, with statistics."""
    schema = load_schema(fn_args.schema_path)
    keys = feature_keys(schema, label_key)
    count, eval_count = count_records(fn_args.train_files), count_records(fn_args.eval_files)

    def small(rows: int) -> bool:
        return rows * (len(keys) + 1) * 4 <= CACHE_BYTES

    train = _read(fn_args, fn_args.train_files, schema, keys, label_key, small(count))
    evaluation = _read(fn_args, fn_args.eval_files, schema, keys, label_key, small(eval_count))
    if count == 0:
        raise ValueError("The training split is empty: the data has no rows to train on.")
    mean, variance = feature_statistics(train, keys, STATS_ROWS)
    return Splits(train, evaluation, keys, count, mean, variance)


def count_records(file_patterns: list[str]) -> int:
    """The number of records in ExampleGen's (gzipped TFRecord) files, without parsing them."""
    files = [f for pattern in file_patterns for f in tf.io.gfile.glob(pattern)]
    if not files:
        return 0
    records = tf.data.TFRecordDataset(files, compression_type=_compression(files[0]))
    return int(records.reduce(np.int64(0), lambda count, _: count + 1))


def _compression(path: str) -> str:
    return "GZIP" if path.endswith(".gz") else ""


def feature_statistics(
    dataset: tf.data.Dataset, keys: list[str], rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of each feature over the first ``rows`` examples (a bounded read)."""
    count, total, total_sq = 0, np.zeros(len(keys)), np.zeros(len(keys))
    for features, _ in dataset.take(rows).batch(4096):
        block = np.concatenate([features[k].numpy() for k in keys], axis=1).astype("float64")
        count += block.shape[0]
        total += block.sum(axis=0)
        total_sq += (block**2).sum(axis=0)
    mean = total / max(count, 1)
    variance = np.maximum(total_sq / max(count, 1) - mean**2, 1e-6)
    return mean, variance


def batched(
    dataset: tf.data.Dataset,
    batch_size: int,
    shuffle_seed: int | None,
    repeat: bool = True,
    drop_remainder: bool = False,
) -> tf.data.Dataset:
    """Shuffles (optionally), repeats and batches an unbatched split."""
    if shuffle_seed is not None:
        dataset = dataset.shuffle(4096, seed=shuffle_seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    return dataset.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)


def location_for_inputs(root: str, prefix: str, fn_args, **inputs: Any) -> str:
    """``<root>/<prefix>-<hash>``: one folder per set of inputs, stable across executions.

    TFX gives every execution a new working directory; state that a retry or rerun of the
    same inputs must find again (the Trainer's backup, the Tuner's search) lives here,
    keyed by the examples, the schema and ``inputs`` (JSON-serialisable settings).
    """
    key = json.dumps(
        {
            "train": sorted(fn_args.train_files),
            "eval": sorted(fn_args.eval_files),
            "schema": fn_args.schema_path,
            **inputs,
        },
        sort_keys=True,
    )
    return f"{root.rstrip('/')}/{prefix}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
