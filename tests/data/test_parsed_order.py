"""A split in several files is read one file after another (tfx_accum.components.data.datasets:
``_parsed``): the examples' order, and so each trial's and the Trainer's batches, does not
depend on how many CPUs the reading machine has.

TFXIO interleaves a pattern's files ``reader_num_threads`` at a time; at its default,
AUTOTUNE, TensorFlow makes that ceil(CPUs / 2): one file at a time on this 2-CPU machine,
two at a time on a 4-CPU Trainer pod. The second case is emulated by a reader that
follows the same rule for 4 CPUs."""

from __future__ import annotations

import types

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.components.trainer.fn_args_utils import DataAccessor
from tfx.components.util import tfxio_utils
from tfx.types import standard_artifacts

from tfx_accum.components.data import datasets

FILES, PER_FILE = 4, 300


def _split(tmp_path) -> tuple[str, standard_artifacts.Examples]:
    split = tmp_path / "Split-train"
    split.mkdir()
    for shard in range(FILES):
        path = split / f"data_tfrecord-{shard:05d}-of-{FILES:05d}.gz"
        with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
            for i in range(shard * PER_FILE, (shard + 1) * PER_FILE):
                feature = {"i": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path)
    examples.split_names = '["train"]'
    return str(split / "*"), examples


def _four_cpu_factory(patterns, options, schema):
    """TFXIO's reading as on a 4-CPU machine: ``options.reader_num_threads`` files at a
    time, or ceil(4 / 2) = 2 where it is AUTOTUNE (TFXIO's default)."""
    threads = options.reader_num_threads
    cycle = 2 if threads == tf.data.AUTOTUNE else min(threads, 4)
    files = tf.data.Dataset.from_tensor_slices(sorted(tf.io.gfile.glob(patterns)))
    records = files.interleave(
        lambda f: tf.data.TFRecordDataset(f, "GZIP"), cycle_length=cycle, num_parallel_calls=cycle
    )
    spec = {"i": tf.io.FixedLenFeature([1], tf.int64)}
    return records.batch(options.batch_size).map(lambda r: tf.io.parse_example(r, spec))


@pytest.mark.parametrize("reader", ["tfxio", "tfxio_on_4_cpus"])
def test_the_files_of_a_split_are_read_in_order(tmp_path, reader):
    pattern, examples = _split(tmp_path)
    factory = (
        tfxio_utils.get_tf_dataset_factory_from_artifact([examples], [])
        if reader == "tfxio"
        else _four_cpu_factory
    )
    fn_args = types.SimpleNamespace(
        data_accessor=DataAccessor(
            tf_dataset_factory=factory, record_batch_factory=None, data_view_decode_fn=None
        )
    )
    schema = schema_pb2.Schema()
    feature = schema.feature.add(name="i", type=schema_pb2.INT)
    feature.presence.min_fraction = 1.0
    feature.shape.dim.add(size=1)
    parsed = datasets._parsed(fn_args, [pattern], schema)
    values = np.concatenate([batch["i"].numpy().ravel() for batch in parsed])
    np.testing.assert_array_equal(values, np.arange(FILES * PER_FILE))
