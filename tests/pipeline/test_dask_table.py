"""A 200,000-row table, and TFRecords, on a Dask cluster of two worker processes, against the
DirectRunner.

The same command runs twice on the same CSV (10 numeric columns and a 10-class label, from
bench.csv_tables, as bench.distributed's table): on the DirectRunner (the default sizing
picks its mode) and with ``--dask-scheduler``; tests/dask_runs.py says what must match. No
tuning and few Trainer updates: the Beam components are what is compared, and the CSV
ExampleGen writes several files per split, so both workers read.
"""

from __future__ import annotations

import pytest
from dask_runs import assert_as_on_the_direct_runner, run_on_dask
from pipeline_runs import run_cli

from bench.csv_tables import write_csv
from bench.dask_cluster import dask_cluster

pytestmark = pytest.mark.e2e  # a scheduler, two workers and two pipeline runs (minutes)

ROWS, COLUMNS = 200_000, 10
ARGS = ("--no-tune", "--train-steps", "100")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with dask_cluster(tmp_path_factory.mktemp("dask-logs")) as running:
        yield running


def test_a_200k_row_table_on_dask_as_on_the_direct_runner(cluster, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_csv(data / "table.csv", ROWS, COLUMNS)
    common = ("--data-root", str(data), *ARGS)
    direct, _ = run_cli(*common, "--output-dir", str(tmp_path / "direct"))
    assert direct.returncode == 0, direct.stdout[-3000:] + direct.stderr[-3000:]
    proc, counts = run_on_dask(cluster, tmp_path / "dask", *common)
    assert "StatisticsGen done" in proc.stdout and "Evaluator done" in proc.stdout
    assert assert_as_on_the_direct_runner(tmp_path / "direct", tmp_path / "dask", counts) == (
        2 * 2 * (COLUMNS + 1)  # each split's columns and label, in both runs
    )


def test_tfrecords_on_dask_as_on_the_direct_runner(cluster, tmp_path):
    """ImportExampleGen (a Beam pipeline of TFX's: read, split, write) on the cluster too:
    the embedded digit images, TFRecords of tf.Examples."""
    common = ("--embedded", "digit-images", "--no-tune", "--train-steps", "20")
    direct, _ = run_cli(*common, "--allow-unblessed", "--output-dir", str(tmp_path / "direct"))
    assert direct.returncode == 0, direct.stdout[-3000:] + direct.stderr[-3000:]
    proc, counts = run_on_dask(cluster, tmp_path / "dask", *common, "--allow-unblessed")
    assert "ImportExampleGen done" in proc.stdout
    checked = assert_as_on_the_direct_runner(
        tmp_path / "direct", tmp_path / "dask", counts, example_gen="ImportExampleGen"
    )
    assert checked > 0
