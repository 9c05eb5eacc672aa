"""``--dask-scheduler``: what it expands to, and the mistakes refused before any cluster is asked.

The checks that need a cluster (an unreachable scheduler, one without workers, storage the
workers do not share) are in test_dask_checks.py; the runs, in test_dask_e2e.py.
"""

from __future__ import annotations

import pytest
import yaml
from test_kubeflow import compile_argv

from tfx_accum.pipeline.cli.parser import main
from tfx_accum.pipeline.local.dask_cluster import dask_beam_args, scheduler_address
from tfx_accum.pipeline.local.dask_runner import RUNNER, DaskRunner

BEAM_COMPONENTS = ("CsvExampleGen", "StatisticsGen", "Evaluator")


def test_the_runner_is_named_by_its_import_path():
    assert f"{DaskRunner.__module__}.{DaskRunner.__qualname__}" == RUNNER


def test_the_option_expands_to_the_runner_and_its_scheduler():
    assert dask_beam_args("10.0.0.5:8786", ["--dask_npartitions=8"]) == [
        f"--runner={RUNNER}",
        "--dask_client_address=tcp://10.0.0.5:8786",
        "--dask_connection_timeout=10",
        "--dask_npartitions=8",
    ]
    assert scheduler_address("tcp://[::1]:8786") == "tcp://[::1]:8786"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--dask-scheduler", "http://host:8786"], "is not a scheduler address"),
        (["--dask-scheduler", "tcp://host:99999"], "is not a scheduler address"),
        (
            ["--dask-scheduler", "tcp://host:8786", "--beam-pipeline-args=--runner=Direct"],
            "give one or the other",
        ),
    ],
)
def test_a_wrong_option_is_one_line_and_exit_2_before_anything(tmp_path, capsys, extra, message):
    out = tmp_path / "out"
    assert main(["run", "--output-dir", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not out.exists()


def test_the_compile_points_the_beam_components_at_the_scheduler(tmp_path):
    """The data components' pods run their Beam pipelines on the cluster; the others take no
    Beam arguments at all."""
    spec = tmp_path / "spec.yaml"
    address = "tcp://dask-scheduler.dask.svc:8786"
    assert main(compile_argv("cpu", spec, "--dask-scheduler", address)) == 0
    pipeline_spec = next(yaml.safe_load_all(spec.read_text()))
    executors = pipeline_spec["deploymentSpec"]["executors"]
    for name, executor in executors.items():
        args = executor["container"].get("args", [])
        if name.removesuffix("_executor") in BEAM_COMPONENTS:
            assert f"--runner={RUNNER}" in args and f"--dask_client_address={address}" in args
        assert not any("direct_running_mode" in a or "direct_num_workers" in a for a in args)
    assert {f"{c}_executor" for c in BEAM_COMPONENTS} <= set(executors)
