"""``tfx-accum run --dask-scheduler``: a cluster that cannot do the run is refused with one line.

Exit 2 before any component runs, for: no scheduler at the address, a scheduler with no
workers, a worker with another tfx-accum than this process's, a worker that does not see
``--output-dir``, and one that does not see ``--data-root``. The storage cases run a real
worker in a mount namespace of its own (``unshare --mount``, as root) where a directory of
this machine is hidden under an empty tmpfs: for that worker the directory is another file
system, as a path on another machine would be. The version case runs a real worker whose
``PYTHONPATH`` holds another tfx-accum's installed metadata, found before this
environment's, as on a machine where another release is installed.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import time

import distributed
import pytest
from clusters import free_ports

from bench.dask_cluster import dask_cluster, end_processes
from tfx_accum.pipeline.cli.parser import main

pytestmark = pytest.mark.e2e  # starts schedulers and workers (processes)

DATA = "x0,x1,label\n" + "".join(f"{i % 7},{i % 5},{i % 2}\n" for i in range(300))


def _refused(capsys, out, *args) -> str:
    code = main(["run", "--output-dir", str(out), "--no-tune", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1, err
    # No component ran: nothing of the pipeline's under the output directory.
    assert not (out / "pipeline").exists() and not (out / "metadata.sqlite").exists()
    return err


def test_no_scheduler_at_the_address(tmp_path, capsys):
    (port,) = free_ports(1)
    err = _refused(capsys, tmp_path / "out", "--dask-scheduler", f"tcp://127.0.0.1:{port}")
    assert "no Dask scheduler answered" in err
    assert not (tmp_path / "out").exists()


def test_a_scheduler_without_workers(tmp_path, capsys):
    (port,) = free_ports(1)
    command = [sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1"]
    scheduler = subprocess.Popen(
        [*command, "--port", str(port), "--no-dashboard"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # until it listens
            err = _refused(capsys, tmp_path / "out", "--dask-scheduler", f"127.0.0.1:{port}")
            if "has no workers" in err or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert "has no workers: start them with `dask worker" in err
    finally:
        end_processes([scheduler])


def test_a_worker_with_another_tfx_accum(tmp_path, capsys):
    """The second of two workers finds tfx-accum 0.0.1's metadata (a ``dist-info`` folder,
    as pip installs it) first on its path: the run is refused, naming that worker and both
    versions."""
    shadow = tmp_path / "other-release"
    info = shadow / "tfx_accum-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tfx-accum\nVersion: 0.0.1\n")
    path = os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))
    ours = importlib.metadata.version("tfx-accum")
    assert ours != "0.0.1"
    # Started elsewhere than here: this checkout's own metadata (the editable install's
    # egg-info folder) would come first on a path that starts with the working directory.
    other = ["env", "-C", str(tmp_path), f"PYTHONPATH={path}"]
    with dask_cluster(tmp_path / "logs", workers=2, wrap={1: other}) as c:
        with distributed.Client(c.address, timeout=30) as client:
            workers = client.scheduler_info(n_workers=-1)["workers"]
        (worker,) = [address for address, info in workers.items() if info["name"] == "worker-1"]
        err = _refused(capsys, tmp_path / "out", "--dask-scheduler", c.address)
    assert (
        f"--dask-scheduler {c.address}: worker {worker} has tfx-accum 0.0.1, this process "
        f"{ours}; the workers need the same environment" in err
    ), err


@pytest.fixture(scope="module")
def hidden_cluster(tmp_path_factory):
    """Two workers; the second sees an empty file system at ``hidden``."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed to give a worker a file system of its own")
    hidden = tmp_path_factory.mktemp("hidden")
    mask = ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
    script = f'mount -t tmpfs tmpfs "{hidden}" && exec "$0" "$@"'
    with dask_cluster(
        tmp_path_factory.mktemp("dask-logs"), workers=2, wrap={1: [*mask, script]}
    ) as cluster:
        yield cluster, hidden


def test_an_output_directory_a_worker_does_not_see(tmp_path, capsys, hidden_cluster):
    cluster, hidden = hidden_cluster
    out = hidden / "out"
    err = _refused(capsys, out, "--dask-scheduler", cluster.address)
    assert f"--output-dir {out} is not storage every Dask worker sees: worker " in err
    assert "cannot read the probe file" in err
    assert not list(out.glob(".dask-probe-*"))  # the probe is removed


def test_a_data_root_a_worker_does_not_see(tmp_path, capsys, hidden_cluster):
    cluster, hidden = hidden_cluster
    data = hidden / "data"
    data.mkdir()
    (data / "table.csv").write_text(DATA)
    out = tmp_path / "out"
    err = _refused(capsys, out, "--data-root", str(data), "--dask-scheduler", cluster.address)
    assert f"--data-root {data} is not storage every Dask worker sees: worker " in err
    assert f"does not find {data / 'table.csv'}" in err
    assert not list(out.glob(".dask-probe-*"))
