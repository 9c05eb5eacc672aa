"""TFXIO's parsing of ``tf.Example`` files, without its per-record reader handoff.

The Tuner and Trainer read the training split through ``fn_args.data_accessor`` (TFX's
TFXIO for ExampleGen's and Transform's ``tf.Example`` files). TFXIO's ``TensorFlowDataset``
reads the files through a parallel ``interleave`` of one ``TFRecordDataset`` per file,
which hands every record from a reader thread to the consumer, then parses batches with
TFXIO's parser configuration for the schema. On a large table the handoff is most of the
Tuner's read: reading the same bytes with one ``TFRecordDataset`` and parsing them takes a
fraction of the time (bench/tfx_floor.py reads both ways).

:func:`parsed_batches` does that: the files one after another in name order (the order in
which TFXIO reads them with one reader thread, tests/data/test_parsed_order.py), each batch
parsed by TFXIO's own parsing op and parser configuration and named as TFXIO names the
tensors. So the tensors are TFXIO's. That the accessor is TFXIO's ``tf.Example`` reader is
checked, not assumed: on up to :data:`PROBE_FEATURES` of the schema's features, the first
batch read this way must equal the accessor's; where it does not (a data view, another
payload format) the accessor's dataset is used as it is. Never other tensors; at worst the
accessor's speed. The probe, not the whole schema: building TFXIO's dataset of every
feature grows with the columns, and so does its first batch.

The one private call: ``TFExampleRecord._GetTfExampleParserConfig`` (tfx-bsl 1.16.x, the
configuration TFXIO's own ``TensorFlowDataset`` parses with); tests/data/test_tfxio_parsing.py
checks the result against TFXIO's dataset, so a change there fails a test, not a model.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2

PROBE_FEATURES = 64  # features of the schema on which the accessor's first batch is compared

# fn_args.data_accessor.tf_dataset_factory: (file patterns, TensorFlowDatasetOptions, schema).
DatasetFactory = Callable[[list[str], object, schema_pb2.Schema], tf.data.Dataset]


def parsed_batches(
    factory: DatasetFactory,
    patterns: list[str],
    files: list[str],
    schema: schema_pb2.Schema,
    options,
) -> tf.data.Dataset:
    """``factory(patterns, options, schema)``'s batches (TFXIO's ``TensorFlowDataset``:
    ``options`` must read one epoch, unshuffled, with one reader thread), read from
    ``files`` (``patterns``' files, in name order) without its handoff where a probe of the
    schema shows they are the same; else ``factory``'s dataset itself."""
    batch_size = options.batch_size
    fast = _read_and_parse(files, schema, batch_size) if files else None
    if fast is not None:
        probe = probe_schema(schema)
        ours = fast if probe is schema else _read_and_parse(files, probe, batch_size)
        try:
            theirs = factory(patterns, options, probe)
        except Exception:  # noqa: BLE001 - an accessor that cannot read the probe: its own way
            theirs = None
        if ours is not None and theirs is not None and _same_first_batch(ours, theirs):
            return fast
    return factory(patterns, options, schema)


def probe_schema(schema: schema_pb2.Schema) -> schema_pb2.Schema:
    """``schema`` itself if it has at most :data:`PROBE_FEATURES` features, else a schema of
    that many of them, spread evenly over its order (the first and the last included)."""
    count = len(schema.feature)
    if count <= PROBE_FEATURES:
        return schema
    picked = {round(i * (count - 1) / (PROBE_FEATURES - 1)) for i in range(PROBE_FEATURES)}
    probe = schema_pb2.Schema()
    probe.CopyFrom(schema)
    probe.ClearField("feature")
    probe.feature.extend(f for i, f in enumerate(schema.feature) if i in picked)
    # Their columns may be left out of the probe; the whole schema's are parsed by the same
    # configuration as the probe's.
    probe.ClearField("sparse_feature")
    probe.ClearField("tensor_representation_group")
    return probe


def _read_and_parse(
    files: list[str], schema: schema_pb2.Schema, batch_size: int
) -> tf.data.Dataset | None:
    from tfx_bsl.public import tfxio

    try:
        # Private: the parser configuration of TFXIO's own TensorFlowDataset (tfx-bsl 1.16).
        config, tensor_names = tfxio.TFExampleRecord(
            file_pattern=files, schema=schema
        )._GetTfExampleParserConfig()  # noqa: SLF001
    except (AttributeError, ValueError):
        return None  # not this tfx-bsl, or a schema TFXIO cannot parse by: the accessor's

    dataset = (
        records(files)
        .batch(batch_size)
        # TFXIO's own parsing op: a map of tf.io.parse_example would trace a function of
        # every feature, many times slower to build on a wide schema.
        .apply(tf.data.experimental.parse_example_dataset(config))
    )
    if any(name != tensor for name, tensor in tensor_names.items()):
        dataset = dataset.map(lambda parsed: {tensor_names[n]: t for n, t in parsed.items()})
    return dataset.prefetch(tf.data.AUTOTUNE)


def matched_files(file_patterns: list[str]) -> list[str]:
    """The files that ``file_patterns`` (TFX's split patterns) match, in name order."""
    return sorted(f for pattern in file_patterns for f in tf.io.gfile.glob(pattern))


def records(files: list[str]) -> tf.data.Dataset:
    """The serialized ``tf.Example`` records of ``files`` (gzipped TFRecord files, as ExampleGen
    and Transform write them, or plain ones), one file after another in the given order."""
    compression = "GZIP" if files and files[0].endswith(".gz") else ""
    return tf.data.TFRecordDataset(files, compression_type=compression)


def _same_first_batch(one: tf.data.Dataset, other: tf.data.Dataset) -> bool:
    if one.element_spec != other.element_spec:
        return False
    firsts = [list(dataset.take(1)) for dataset in (one, other)]
    if len(firsts[0]) != len(firsts[1]):
        return False
    if not firsts[0]:
        return True
    left, right = (tf.nest.flatten(first[0], expand_composites=True) for first in firsts)
    return all(_equal(a.numpy(), b.numpy()) for a, b in zip(left, right))


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
