"""Reading the ExampleGen splits for the Tuner and Trainer modules, streamed.

TFX builds datasets at one fixed batch size. Tuning batch sizes needs per-trial batching
(tfx #3591), so the splits are read unbatched and each trial or training run batches them
at its own effective batch size. A split whose parsed values exceed ``CACHE_BYTES`` is
streamed: every epoch reads the examples from ExampleGen's files again (the shuffle buffer
is the only thing held), so a data set larger than memory trains and memory does not grow
with the data. A smaller split is cached, parsed, in blocks of ``_READ_BATCH`` examples (no
per-example overhead): re-parsing small data every epoch would cost more than holding it.
What the inputs are (kinds, statistics, vocabularies, the label's classes) comes from a
bounded pass over the first ``STATS_ROWS`` training examples
(:func:`~tfx_accum.components.features.describe_data`), and every example is preprocessed
in the input pipeline by the Keras layers that are exported with the model; the split sizes
come from counting records, without parsing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from tfx_accum.components.features import (
    DataDescription,
    Preprocessor,
    describe_data,
    parse_raw,
)

_READ_BATCH = 256
CACHE_BYTES = 64 * 2**20  # a split up to this many bytes of float32 values is cached


def load_schema(schema_path: str) -> schema_pb2.Schema:
    # As tfx.utils.parse_pbtxt_file, without importing TFX (seconds, in every worker process).
    with tf.io.gfile.GFile(schema_path) as handle:
        return text_format.Parse(handle.read(), schema_pb2.Schema())


@dataclasses.dataclass
class Splits:
    """Unbatched, streamed ``(model inputs, class index)`` datasets and what the model's
    inputs are (:class:`~tfx_accum.components.features.DataDescription`)."""

    train: tf.data.Dataset
    eval: tf.data.Dataset
    data: DataDescription
    train_size: int
    preprocessor: Preprocessor


def _files(file_patterns: list[str]) -> list[str]:
    return sorted(f for pattern in file_patterns for f in tf.io.gfile.glob(pattern))


def _records(files: list[str]) -> tf.data.Dataset:
    """ExampleGen's serialized ``tf.Example`` records (gzipped TFRecord files), in order."""
    return tf.data.TFRecordDataset(files, compression_type=_compression(files[0] if files else ""))


def preprocess_records(
    records: tf.data.Dataset, data: DataDescription, preprocessor: Preprocessor
) -> tf.data.Dataset:
    """Serialized examples to ``(model inputs, class indices)`` blocks of ``_READ_BATCH``
    examples, parsed and preprocessed, in order (``.unbatch()`` for single examples)."""

    def preprocess(serialized):
        raw = parse_raw(serialized, data, with_label=True)
        label = preprocessor.encode_label(raw.pop(data.label_key))
        return preprocessor(raw), label

    batches = records.batch(_READ_BATCH)
    return batches.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _read(file_patterns, data: DataDescription, preprocessor, cache: bool) -> tf.data.Dataset:
    dataset = preprocess_records(_records(_files(file_patterns)), data, preprocessor)
    return (dataset.cache() if cache else dataset).unbatch()


def load_splits(fn_args, label_key: str, num_classes: int | None = None) -> Splits:
    """The train and eval splits of a Trainer/Tuner ``fn_args``, streamed and preprocessed.

    ``num_classes``: the user's override (checked), else inferred from the labels.
    """
    schema = load_schema(fn_args.schema_path)
    count, eval_count = count_records(fn_args.train_files), count_records(fn_args.eval_files)
    if count == 0:
        raise ValueError("The training split is empty: the data has no rows to train on.")
    data = describe_data(_records(_files(fn_args.train_files)), schema, label_key, num_classes)
    preprocessor = Preprocessor(data)

    def small(rows: int) -> bool:
        return rows * data.values_per_example * 4 <= CACHE_BYTES

    train = _read(fn_args.train_files, data, preprocessor, small(count))
    evaluation = _read(fn_args.eval_files, data, preprocessor, small(eval_count))
    return Splits(train, evaluation, data, count, preprocessor)


def count_records(file_patterns: list[str]) -> int:
    """The number of records in ExampleGen's (gzipped TFRecord) files, without parsing them."""
    files = _files(file_patterns)
    if not files:
        return 0
    return int(_records(files).reduce(np.int64(0), lambda count, _: count + 1))


def _compression(path: str) -> str:
    return "GZIP" if path.endswith(".gz") else ""


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


# Keys of TensorFlow's keyed hash (SipHash), fixed so that a fingerprint is stable.
_ENTRY_KEY = (0x74667861, 0x63637521)
_FINGERPRINT_KEYS = ((0x7466782D, 0x61636375), (0x6D2D6578, 0x616D706C))
_HASH_BUCKETS = 2**31 - 1  # sums of up to 2**32 records fit an int64
_LAST = np.int64(2**63 - 1)  # sorts after every entry hash (which are below 2**62)


def _canonical_examples(records: tf.Tensor) -> tf.Tensor:
    """One string per serialized ``tf.Example``, the same whatever order its features were
    serialized in: the sorted hashes of its (name, value) entries.

    A ``tf.Example``'s features are a protobuf map, whose serialized order is not fixed:
    two ExampleGen runs over the same CSV write the same examples as different bytes.
    """
    _, (features,) = tf.io.decode_proto(records, "tensorflow.Example", ["features"], [tf.string])
    sizes, (entries,) = tf.io.decode_proto(
        tf.reshape(features, [-1]), "tensorflow.Features", ["feature"], [tf.string]
    )
    lengths = tf.reshape(sizes, [-1])
    hashes = tf.strings.to_hash_bucket_strong(entries, 2**62, list(_ENTRY_KEY))
    present = tf.sequence_mask(lengths, tf.shape(entries)[1])
    ordered = tf.sort(tf.where(present, hashes, _LAST), axis=1)  # padding last
    rows = tf.RaggedTensor.from_tensor(ordered, lengths=lengths)
    return tf.strings.reduce_join(tf.strings.as_string(rows), axis=1, separator=",")


def examples_fingerprint(file_patterns: list[str]) -> str:
    """A digest of the ``tf.Example`` s in ``file_patterns``: the same for the same examples
    however ExampleGen sharded, named or ordered them and serialized their features (a count
    and two sums of keyed hashes of :func:`_canonical_examples`).

    A Kubeflow run's ExampleGen writes new files under a new path every run, also for
    unchanged data; this is what stays the same.
    """
    files = _files(file_patterns)
    if not files:
        return "empty"

    def digest(records):
        canonical = _canonical_examples(records)
        return (
            tf.size(records, out_type=tf.int64),
            *(
                tf.reduce_sum(tf.strings.to_hash_bucket_strong(canonical, _HASH_BUCKETS, list(k)))
                for k in _FINGERPRINT_KEYS
            ),
        )

    totals = (
        _records(files)
        .batch(_READ_BATCH)
        .map(digest)
        .reduce(
            (np.int64(0),) * (1 + len(_FINGERPRINT_KEYS)),
            lambda total, batch: tuple(t + b for t, b in zip(total, batch)),
        )
    )
    return "-".join(f"{int(value):x}" for value in totals)


def _file_digest(path: str) -> str:
    with tf.io.gfile.GFile(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def location_for_inputs(root: str, prefix: str, fn_args, **inputs: Any) -> str:
    """``<root>/<prefix>-<hash>``: one folder per set of inputs, stable across executions.

    TFX gives every execution a new working directory; state that a retry or rerun of the
    same inputs must find again (the Trainer's backup, the Tuner's search) lives here,
    keyed by the *content* of the examples (:func:`examples_fingerprint`) and of the schema,
    and by ``inputs`` (JSON-serialisable settings). Not by their paths: on Kubeflow every
    run's ExampleGen writes the same examples to a new path, and a rerun on unchanged data
    must find the finished search.
    """
    key = json.dumps(
        {
            "train": examples_fingerprint(fn_args.train_files),
            "eval": examples_fingerprint(fn_args.eval_files),
            "schema": _file_digest(fn_args.schema_path),
            **inputs,
        },
        sort_keys=True,
    )
    return f"{root.rstrip('/')}/{prefix}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
