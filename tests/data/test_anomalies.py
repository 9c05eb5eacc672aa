"""ExampleValidator's anomalies reach the run's summary, one line each: they were
recorded in ``SchemaDiff.pb`` and never said."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tfx_accum.pipeline.cli.report import RunSummary, read_anomalies
from tfx_accum.pipeline.cli.summary import summary_lines


def _anomalies_artifact(directory, values: dict[str, np.ndarray]):
    """What ExampleValidator writes for a schema giving ``a`` the range [0, 0.1]: TFDV's own
    validation of the data's statistics, one ``Split-<name>/SchemaDiff.pb`` per split."""
    import tensorflow_data_validation as tfdv
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = schema_pb2.Schema()
    feature = schema.feature.add(name="a", type=schema_pb2.FLOAT)
    feature.float_domain.min, feature.float_domain.max = 0.0, 0.1
    schema.feature.add(name="label", type=schema_pb2.INT)
    for split, column in values.items():
        frame = pd.DataFrame({"a": column, "label": np.arange(len(column)) % 2})
        stats = tfdv.generate_statistics_from_dataframe(frame)
        anomalies = tfdv.validate_statistics(stats, schema)
        path = directory / f"Split-{split}" / "SchemaDiff.pb"
        path.parent.mkdir(parents=True)
        path.write_bytes(anomalies.SerializeToString())
    return directory


def test_each_anomaly_is_one_line_of_the_summary(tmp_path):
    rng = np.random.default_rng(0)
    artifact = _anomalies_artifact(
        tmp_path, {"train": rng.uniform(0, 1, 50), "eval": rng.uniform(0, 0.1, 20)}
    )
    found = read_anomalies(str(artifact))
    assert [(split, feature) for split, feature, _ in found] == [("train", "a")]
    assert "out-of-range" in found[0][2].lower()
    summary = RunSummary("run", None, None, None, None, [], anomalies=found)
    lines = summary_lines(summary, _blessing(), "trials: none", 1.0)
    assert "data anomalies: 1 (ExampleValidator, against the schema):" in lines
    assert f"  a: {found[0][2]} (train split)" in lines


def test_clean_data_says_none_and_no_validator_says_nothing(tmp_path):
    artifact = _anomalies_artifact(tmp_path, {"train": np.full(20, 0.05)})
    assert read_anomalies(str(artifact)) == []
    clean = RunSummary("run", None, None, None, None, [], anomalies=[])
    assert "data anomalies: none (ExampleValidator, against the schema)" in summary_lines(
        clean, _blessing(), "trials: none", 1.0
    )
    absent = RunSummary("run", None, None, None, None, [])
    assert not any("anomalies" in line for line in summary_lines(absent, _blessing(), "", 1.0))


def _blessing():
    from tfx_accum.components.config import tasks
    from tfx_accum.components.config.blessing import Blessing

    return Blessing.for_task(tasks.MULTICLASS)


def _run_with_a_narrow_schema(tmp_path, *extra: str):
    """The command on data up to 1.0 with a --schema that gives `a` the range [0, 0.1]."""
    from reliability_runs import NO_TUNE, run_to_end

    data = tmp_path / "data"
    data.mkdir(parents=True)
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0, 1, 300), rng.uniform(0, 1, 300)
    rows = "".join(f"{x:.4f},{y:.4f},{int(x + y > 1)}\n" for x, y in zip(a, b))
    (data / "d.csv").write_text("a,b,label\n" + rows)
    schema = tmp_path / "schema.pbtxt"
    schema.write_text(
        'feature { name: "a" type: FLOAT float_domain { min: 0.0 max: 0.1 } }\n'
        'feature { name: "b" type: FLOAT }\n'
        'feature { name: "label" type: INT }\n'
    )
    args = ["--data-root", str(data), "--schema", str(schema), *NO_TUNE, *extra]
    return run_to_end(tmp_path / "out", args)


@pytest.mark.e2e
def test_a_run_lists_the_anomalies_and_with_fail_on_anomalies_stops_before_training(tmp_path):
    from reliability_runs import execution_states

    listed = _run_with_a_narrow_schema(tmp_path / "listed")
    assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-3000:]
    lines = listed.stdout.splitlines()
    assert "data anomalies: 2 (ExampleValidator, against the schema):" in lines
    assert any(line.startswith("  a: ") and line.endswith("(train split)") for line in lines)

    stopped = _run_with_a_narrow_schema(tmp_path / "stopped", "--fail-on-anomalies")
    assert stopped.returncode == 2, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    (line,) = [x for x in stopped.stdout.splitlines() if x.startswith("tfx-accum run: error:")]
    assert "data anomalies (ExampleValidator, against the schema): a: " in line
    assert "the Trainer did not start, as --fail-on-anomalies asks" in line
    states = execution_states(tmp_path / "stopped" / "out")
    assert states.get("Trainer") != 3 and "Pusher" not in states  # 3: COMPLETE
    assert "pushed to:" not in stopped.stdout
