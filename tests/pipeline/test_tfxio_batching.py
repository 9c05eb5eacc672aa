"""TFXIO's reads batched by bytes, in this process and in Beam's worker processes.

tfx_accum.pipeline.tfxio_batching sets tfx_bsl's ``--tfxio_use_byte_size_batching``: here
a TFXIO source over 3,000 small examples gives fewer, fuller record batches with it than
without (the same examples), and a ``multi_processing`` DirectRunner started with the
local runner's arguments reports it set in its worker processes.
"""

from __future__ import annotations

import os
from pathlib import Path

import apache_beam as beam
import pytest
import tensorflow as tf
import tfxio_probe
from absl import flags
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from tfx_bsl.tfxio import tf_example_record

from tfx_accum.pipeline import tfxio_batching
from tfx_accum.pipeline.beam_args import local_beam_args

ROWS = 3000


@pytest.fixture
def setting():
    """The flag as the test leaves it: restored afterwards (absl flags are process-wide)."""
    before = getattr(flags.FLAGS, tfxio_batching.FLAG)
    yield
    setattr(flags.FLAGS, tfxio_batching.FLAG, before)


_SIZES: list[int] = []  # the in-process runner calls _record in this module


def _record(sizes: list[int]) -> None:
    _SIZES.extend(sizes)


def _batch_sizes(path: str) -> list[int]:
    _SIZES.clear()
    with beam.Pipeline(options=PipelineOptions(["--direct_running_mode=in_memory"])) as p:
        _ = (
            p
            | tf_example_record.TFExampleRecord(path).BeamSource()
            | beam.Map(lambda batch: batch.num_rows)
            | beam.combiners.ToList()
            | beam.Map(_record)
        )
    return list(_SIZES)


def test_the_flag_makes_fewer_fuller_batches_of_the_same_examples(tmp_path, setting):
    path = str(tmp_path / "examples.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(ROWS):
            feature = {"x": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
    setattr(flags.FLAGS, tfxio_batching.FLAG, False)
    assert not tfxio_probe.byte_size_batching(None)
    by_time = _batch_sizes(path)
    tfxio_batching.enable()
    assert tfxio_probe.byte_size_batching(None)
    by_bytes = _batch_sizes(path)
    assert sum(by_time) == sum(by_bytes) == ROWS
    assert len(by_bytes) < len(by_time)
    assert max(by_bytes) > 1000  # beyond the time-tuned batches' cap


@pytest.mark.e2e
def test_the_local_runners_workers_batch_by_bytes(monkeypatch):
    """Each worker process answers through tests/tfxio_probe.py (importable there through
    PYTHONPATH, which the workers inherit)."""
    tests_dir = str(Path(__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")]))
    args, _ = local_beam_args(10 * 2**30, cpus=4)
    assert "multi_processing" in args[0]
    with beam.Pipeline(options=PipelineOptions(args)) as p:
        seen = (
            p
            | beam.Create([None] * 4)
            | beam.Reshuffle()
            | beam.Map(tfxio_probe.byte_size_batching)
        )
        assert_that(seen, equal_to([True] * 4))
