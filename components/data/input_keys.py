"""Where a rerun of the same inputs finds its state: keys from the examples' content.

TFX gives every execution a new working directory, and on Kubeflow every run's ExampleGen
writes the same examples to a new path. What a retry or rerun must find again (the Tuner's
search, the Trainer's backup) is keyed by what the inputs hold: :func:`examples_fingerprint`
(the ``tf.Example`` s, however sharded, named, ordered or serialized) and the schema's bytes,
with the settings that decide the work (:func:`location_for_inputs`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import tensorflow as tf

from tfx_accum.components.data.tfxio_parsing import matched_files, records

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
    files = matched_files(file_patterns)
    if not files:
        return "empty"
    # The Tuner and the Trainer of a local run ask for the same files in one process.
    stats = tuple((f, (st := tf.io.gfile.stat(f)).length, st.mtime_nsec) for f in files)
    if stats not in _FINGERPRINTS:
        _FINGERPRINTS[stats] = _fingerprint(files)
    return _FINGERPRINTS[stats]


# Fingerprints computed in this process, by the files' names, sizes and modification times.
_FINGERPRINTS: dict[tuple, str] = {}


def _fingerprint(files: list[str]) -> str:
    def digest(records):
        canonical = _canonical_examples(records)
        return (
            tf.size(records, out_type=tf.int64),
            *(
                tf.reduce_sum(tf.strings.to_hash_bucket_strong(canonical, _HASH_BUCKETS, list(k)))
                for k in _FINGERPRINT_KEYS
            ),
        )

    # Sums: the batching does not change them. Reading the next batch while one is digested
    # (prefetch), in batches of 2,048, is the faster of the readings measured; reading the
    # files in parallel (interleave) is slower on few CPUs.
    totals = (
        records(files)
        .batch(2048)
        .prefetch(2)
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
    must find the finished search. The examples are the training split's, the only one
    the Tuner and Trainer read (the Evaluator scores the eval split): a third of the
    fingerprint's reading at 1M x 64 was the eval split's, which changes neither.
    """
    key = json.dumps(
        {
            "train": examples_fingerprint(fn_args.train_files),
            "schema": _file_digest(fn_args.schema_path),
            **inputs,
        },
        sort_keys=True,
    )
    return f"{root.rstrip('/')}/{prefix}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
