"""``bench.tfx_floor``: TFX's per-row work, measured in parts on the records ExampleGen writes."""

from __future__ import annotations

import numpy as np
import tensorflow_data_validation as tfdv

from bench import tfx_floor

NAMES = ["f00", "f01", "f02", "label"]


def _parts(rows: int = 300):
    return tfx_floor.batches(tfx_floor.records(rows, 3))


def test_both_decoders_read_every_value_of_the_generated_table():
    parts = _parts()
    decoded = tfx_floor.decode_tfx_bsl(parts)
    parsed = tfx_floor.parse_tensorflow(parts, NAMES, "label")
    assert sum(batch.num_rows for batch in decoded) == 300
    assert tfx_floor.same_values(decoded, parsed, NAMES)
    # One changed value is seen.
    changed = [dict(tensors) for tensors in parsed]
    changed[0]["f01"] = changed[0]["f01"].numpy() + np.float32(1e-3)
    assert not tfx_floor.same_values(decoded, [_eager(t) for t in changed], NAMES)


def _eager(tensors: dict) -> dict:
    import tensorflow as tf

    return {name: tf.constant(value) for name, value in tensors.items()}


def test_the_statistics_without_beam_are_tfdvs_own(tmp_path):
    """The in-process statistics are what StatisticsGen's path (Beam, from a file) writes."""
    serialized = [record for part in _parts() for record in part]
    in_process = tfx_floor.tfdv_statistics(tfx_floor.decode_tfx_bsl([serialized]))
    tfx_floor.write_records(serialized, tmp_path / "split.gz")
    tfx_floor.statistics_gen_path(str(tmp_path / "split.gz"), tmp_path / "stats")
    through_beam = tfdv.load_stats_binary(str(tmp_path / "stats"))
    ours, theirs = in_process.datasets[0], through_beam.datasets[0]
    assert ours.num_examples == theirs.num_examples == 300
    for name in NAMES:
        mine = next(f for f in ours.features if f.path.step[0] == name).num_stats
        beam_s = next(f for f in theirs.features if f.path.step[0] == name).num_stats
        assert (mine.mean, mine.min, mine.max) == (beam_s.mean, beam_s.min, beam_s.max)


def test_both_training_reads_read_every_example(tmp_path):
    serialized = [record for part in _parts() for record in part]
    tfx_floor.write_records(serialized, tmp_path / "split.gz")
    schema = tfx_floor.schema_of(NAMES, "label")
    for project in (False, True):
        assert tfx_floor.training_read(tmp_path / "split.gz", schema, project) == 300


def test_the_report_has_a_rate_for_every_part_and_width():
    results = [
        {
            "rows": 1000,
            "columns": columns,
            "record_bytes": 10.0 * columns,
            "same_values": True,
            "cpu_s": {part: 0.5 for part in tfx_floor.PARTS},
            "rows_per_cpu_s": {part: 2000.0 for part in tfx_floor.PARTS},
        }
        for columns in (4, 64)
    ]
    text = tfx_floor.markdown(results)
    for part in tfx_floor.PARTS:
        assert f"| {part} | 2,000 | 2,000 | 500.0 | 500.0 |" in text
    assert "1.0x as fast" in text and "is 100% of StatisticsGen's path" in text
    assert "takes 1.00x the CPU of TFXIO's TensorFlowDataset" in text
