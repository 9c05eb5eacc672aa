"""A ``tfx-accum run`` on a Dask cluster, checked against the same run on the DirectRunner.

The Beam components' outputs must be the DirectRunner's: the statistics equal but for the
quantiles sketch's figures, which must be within its error (tests/statistics_match.py), and
the evaluation metrics and blessing equal (the CSV ExampleGen, the Tuner and the Trainer
run in the command's process either way, and ImportExampleGen's split is by each record's
hash, so the model is the same). Both workers must have
run some of the work, as the scheduler recorded it.
"""

from __future__ import annotations

from pathlib import Path

from pipeline_runs import run_cli
from statistics_match import assert_same_statistics

from bench.dask_cluster import tasks_per_worker
from tfx_accum.pipeline.evaluation import read_evaluation


def latest(output_dir: Path, component: str, artifact: str) -> str:
    """The newest ``artifact`` directory ``component`` wrote under the run's pipeline root."""
    found = sorted(
        (output_dir / "pipeline" / component / artifact).iterdir(), key=lambda p: int(p.name)
    )
    assert found, f"{component} wrote no {artifact} under {output_dir}"
    return str(found[-1])


def run_on_dask(cluster, output_dir: Path, *args: str):
    """``tfx-accum run ARGS --dask-scheduler ...``; the process and each worker's task count."""
    with tasks_per_worker(cluster.address) as counts:
        proc, seconds = run_cli(
            *args, "--dask-scheduler", cluster.address, "--output-dir", str(output_dir)
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:] + cluster.log_tails()
    return proc, counts


def assert_as_on_the_direct_runner(
    direct: Path, on_dask: Path, counts, example_gen: str = "CsvExampleGen"
) -> int:
    """The Dask run's statistics and evaluation are the DirectRunner run's, and both workers
    ran tasks. Returns the numeric features whose sketched figures were checked."""
    assert len(counts) == 2 and min(counts.values()) > 0, f"tasks per worker: {dict(counts)}"
    checked = assert_same_statistics(
        latest(direct, "StatisticsGen", "statistics"),
        latest(on_dask, "StatisticsGen", "statistics"),
        latest(direct, example_gen, "examples"),
    )
    reference = read_evaluation(latest(direct, "Evaluator", "evaluation"))
    evaluated = read_evaluation(latest(on_dask, "Evaluator", "evaluation"))
    assert reference is not None and reference.metrics, "the DirectRunner run evaluated nothing"
    assert evaluated == reference
    return checked
