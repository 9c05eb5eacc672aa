"""The default pipeline (the embedded digits) on a Dask cluster of two worker processes.

The reference is the session's DirectRunner run of the same command (conftest's
``first_run``); tests/dask_runs.py says what must match. A 200,000-row table runs in
test_dask_table.py.
"""

from __future__ import annotations

import pytest
from dask_runs import assert_as_on_the_direct_runner, run_on_dask
from pipeline_runs import SMALL

from bench.dask_cluster import dask_cluster

pytestmark = pytest.mark.e2e  # a scheduler, two workers and a pipeline run (minutes)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with dask_cluster(tmp_path_factory.mktemp("dask-logs")) as running:
        yield running


def test_the_digits_on_dask_as_on_the_direct_runner(first_run, cluster, tmp_path):
    direct, _, _ = first_run
    proc, counts = run_on_dask(cluster, tmp_path / "out", *SMALL)
    assert proc.stderr == "", proc.stderr[-3000:]
    assert "[dask] every worker sees --data-root and --output-dir" in proc.stdout
    assert assert_as_on_the_direct_runner(direct, tmp_path / "out", counts) > 0
