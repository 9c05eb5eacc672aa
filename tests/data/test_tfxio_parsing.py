"""components/data/tfxio_parsing.py: TFXIO's tensors, read without its per-record handoff."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.components.util import tfxio_utils
from tfx.types import standard_artifacts
from tfx_bsl.public import tfxio

from tfx_accum.components.data import tfxio_parsing

FILES, PER_FILE, BATCH = 3, 70, 32


def _example(i: int) -> bytes:
    feature = {
        "count": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
        "word": tf.train.Feature(bytes_list=tf.train.BytesList(value=[f"w{i % 7}".encode()])),
        "pair": tf.train.Feature(float_list=tf.train.FloatList(value=[i / 3, -i])),
    }
    if i % 4:  # missing in every fourth example; NaN in some
        value = float("nan") if i % 9 == 0 else i * 0.25
        feature["sometimes"] = tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
    if i % 5 == 0:  # a varying number of values
        feature["many"] = tf.train.Feature(int64_list=tf.train.Int64List(value=list(range(i % 4))))
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString()


def _schema(with_shapes: bool) -> schema_pb2.Schema:
    schema = schema_pb2.Schema()
    for name, kind, fixed in [
        ("count", schema_pb2.INT, 1),
        ("word", schema_pb2.BYTES, 1),
        ("pair", schema_pb2.FLOAT, 2),
        ("sometimes", schema_pb2.FLOAT, None),
        ("many", schema_pb2.INT, None),
    ]:
        feature = schema.feature.add(name=name, type=kind)
        if with_shapes and fixed:
            feature.shape.dim.add(size=fixed)
            feature.presence.min_fraction = 1.0
    return schema


def _split(tmp_path, gzip: bool) -> tuple[list[str], standard_artifacts.Examples]:
    split = tmp_path / "Split-train"
    split.mkdir()
    suffix = ".gz" if gzip else ""
    for shard in range(FILES):
        path = split / f"data_tfrecord-{shard:05d}-of-{FILES:05d}{suffix}"
        with tf.io.TFRecordWriter(str(path), options="GZIP" if gzip else None) as writer:
            for i in range(shard * PER_FILE, (shard + 1) * PER_FILE):
                writer.write(_example(i))
    examples = standard_artifacts.Examples()
    examples.uri, examples.split_names = str(tmp_path), '["train"]'
    return sorted(str(p) for p in split.iterdir()), examples


def _accessor_dataset(examples, files, schema) -> tf.data.Dataset:
    factory = tfxio_utils.get_tf_dataset_factory_from_artifact([examples], [])
    options = tfxio.TensorFlowDatasetOptions(
        batch_size=BATCH, shuffle=False, num_epochs=1, drop_final_batch=False, reader_num_threads=1
    )
    return factory(files, options, schema)


def _all_batches(dataset: tf.data.Dataset) -> list[list[np.ndarray]]:
    return [
        [t.numpy() for t in tf.nest.flatten(batch, expand_composites=True)] for batch in dataset
    ]


@pytest.mark.parametrize("with_shapes", [True, False])
@pytest.mark.parametrize("gzip", [True, False])
def test_every_batch_is_tfxios_own(tmp_path, with_shapes, gzip):
    files, examples = _split(tmp_path, gzip)
    schema = _schema(with_shapes)
    accessor = _accessor_dataset(examples, files, schema)
    read = tfxio_parsing.parsed_batches(accessor, files, schema, BATCH)
    assert read is not accessor  # the fast reading was taken
    assert read.element_spec == accessor.element_spec
    ours, theirs = _all_batches(read), _all_batches(accessor)
    assert len(ours) == len(theirs) == -(-FILES * PER_FILE // BATCH)
    for mine, tfxios in zip(ours, theirs):
        assert len(mine) == len(tfxios)
        for a, b in zip(mine, tfxios):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)  # NaN equals NaN here


def test_an_accessor_that_reads_otherwise_is_used_as_it_is(tmp_path):
    files, examples = _split(tmp_path, gzip=True)
    schema = _schema(with_shapes=True)
    # TFXIO reads the files in name order, whatever order it is given them in.
    reversed_order = _accessor_dataset(examples, files[::-1], schema)
    assert tfxio_parsing.parsed_batches(reversed_order, files, schema, BATCH) is not reversed_order
    # Other files first, and another parsing: the accessor's, as they are.
    later = _accessor_dataset(examples, files[1:], schema)
    assert tfxio_parsing.parsed_batches(later, files, schema, BATCH) is later
    doubled = _accessor_dataset(examples, files, schema).map(
        lambda batch: {**batch, "count": batch["count"] * 2}
    )
    assert tfxio_parsing.parsed_batches(doubled, files, schema, BATCH) is doubled
    renamed = _accessor_dataset(examples, files, schema).map(
        lambda batch: {("n_" + k): v for k, v in batch.items()}
    )
    assert tfxio_parsing.parsed_batches(renamed, files, schema, BATCH) is renamed
