"""tfx_accum.components.data.tfxio_parsing: TFXIO's tensors, read without its per-record handoff."""

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


OPTIONS = tfxio.TensorFlowDatasetOptions(
    batch_size=BATCH, shuffle=False, num_epochs=1, drop_final_batch=False, reader_num_threads=1
)


def _factory(examples):
    """TFX's data accessor's factory for the split (what fn_args.data_accessor holds)."""
    return tfxio_utils.get_tf_dataset_factory_from_artifact([examples], [])


def _accessor_dataset(examples, files, schema) -> tf.data.Dataset:
    return _factory(examples)(files, OPTIONS, schema)


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
    read = tfxio_parsing.parsed_batches(_factory(examples), files, files, schema, OPTIONS)
    assert _steps(read) != _steps(accessor)  # the fast reading was taken
    assert read.element_spec == accessor.element_spec
    ours, theirs = _all_batches(read), _all_batches(accessor)
    assert len(ours) == len(theirs) == -(-FILES * PER_FILE // BATCH)
    for mine, tfxios in zip(ours, theirs):
        assert len(mine) == len(tfxios)
        for a, b in zip(mine, tfxios):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)  # NaN equals NaN here


def _steps(dataset: tf.data.Dataset) -> list[str]:
    """The dataset's transformations, outermost first (the accessor's has an interleave)."""
    names, current = [], dataset
    while True:
        names.append(type(current).__name__)
        inputs = current._inputs()  # noqa: SLF001 - test-only look at the pipeline's shape
        if not inputs:
            return names
        current = inputs[0]


def _reading(factory, files, schema):
    read = tfxio_parsing.parsed_batches(factory, files, files, schema, OPTIONS)
    return "accessor's" if "_ParallelInterleaveDataset" in _steps(read) else "fast"


def test_an_accessor_that_reads_otherwise_is_used_as_it_is(tmp_path):
    files, examples = _split(tmp_path, gzip=True)
    schema = _schema(with_shapes=True)
    factory = _factory(examples)
    assert _reading(factory, files, schema) == "fast"
    # TFXIO reads the files in name order, whatever order it is given them in.
    assert _reading(lambda f, o, s: factory(f[::-1], o, s), files, schema) == "fast"

    # Other files first, another parsing, other names: the accessor's, as it is.
    def later(f, o, s):
        return factory(f[1:], o, s)

    def doubled(f, o, s):
        return factory(f, o, s).map(lambda batch: {**batch, "count": batch["count"] * 2})

    def renamed(f, o, s):
        return factory(f, o, s).map(lambda batch: {("n_" + k): v for k, v in batch.items()})

    for other in (later, doubled, renamed):
        assert _reading(other, files, schema) == "accessor's", other.__name__

    wide = _wide_schema(schema)

    def fails_on_the_probe(f, o, s):
        if s is not wide:
            raise ValueError("not this schema")
        return factory(f, o, s)

    assert _reading(fails_on_the_probe, files, wide) == "accessor's"


def _wide_schema(schema: schema_pb2.Schema) -> schema_pb2.Schema:
    """``schema`` and more absent INT features than the probe takes (absent: empty)."""
    wide = schema_pb2.Schema()
    wide.CopyFrom(schema)
    for i in range(2 * tfxio_parsing.PROBE_FEATURES):
        wide.feature.add(name=f"absent_{i:03d}", type=schema_pb2.INT)
    return wide


def test_a_wide_schema_is_probed_on_some_features_and_read_whole(tmp_path):
    files, examples = _split(tmp_path, gzip=True)
    wide = _wide_schema(_schema(with_shapes=True))
    probe = tfxio_parsing.probe_schema(wide)
    names = [f.name for f in probe.feature]
    assert len(names) == tfxio_parsing.PROBE_FEATURES
    assert names[0] == "count" and names[-1] == wide.feature[-1].name
    assert tfxio_parsing.probe_schema(_schema(with_shapes=True)) is not None
    factory = _factory(examples)
    read = tfxio_parsing.parsed_batches(factory, files, files, wide, OPTIONS)
    accessor = factory(files, OPTIONS, wide)
    assert "_ParallelInterleaveDataset" not in _steps(read)
    assert read.element_spec == accessor.element_spec
    for mine, tfxios in zip(_all_batches(read), _all_batches(accessor), strict=True):
        for a, b in zip(mine, tfxios, strict=True):
            np.testing.assert_array_equal(a, b)
    # The probe's features are spread over the schema's order, no gap wider than needed.
    order = [f.name for f in wide.feature]
    positions = [order.index(name) for name in names]
    assert max(b - a for a, b in zip(positions, positions[1:])) <= -(-len(order) // len(names))
