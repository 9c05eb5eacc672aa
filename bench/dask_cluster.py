"""A Dask cluster of real processes on 127.0.0.1: a scheduler and workers, as a user starts them.

Shared by the tests (tests/pipeline/test_dask_*.py) and ``bench.distributed``.

``dask scheduler --host 127.0.0.1 --port P --no-dashboard`` and ``dask worker
tcp://127.0.0.1:P --nthreads 1`` (each in a process group of its own, since a worker's nanny
starts the worker as its child), ended when the ``with`` block ends, whatever happened in it.
Their output goes to log files beside each other, named in a failing test's message.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

START_TIMEOUT = 120  # s: two workers importing distributed on a loaded 2-core machine


@dataclasses.dataclass(frozen=True)
class DaskCluster:
    address: str
    logs: Path

    def log_tails(self, lines: int = 40) -> str:
        parts = []
        for log in sorted(self.logs.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(parts)


@contextlib.contextmanager
def dask_cluster(
    logs: Path, workers: int = 2, wrap: dict[int, list[str]] | None = None
) -> Iterator[DaskCluster]:
    """A scheduler and ``workers`` single-threaded workers on free ports of 127.0.0.1;
    ``wrap``: a command that runs worker ``i``'s command (as its last arguments)."""
    wrap = wrap or {}
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    dask = [sys.executable, "-m", "dask"]
    commands = {
        "scheduler": [*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port)],
        **{
            f"worker-{i}": [
                *wrap.get(i, []),
                *dask,
                *("worker", address, "--nthreads", "1", "--name", f"worker-{i}"),
            ]
            for i in range(workers)
        },
    }
    processes: list[subprocess.Popen] = []
    try:
        for name, command in commands.items():
            with open(logs / f"{name}.log", "wb") as log:
                processes.append(
                    subprocess.Popen(
                        [*command, "--no-dashboard"],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                    )
                )
        cluster = DaskCluster(address, logs)
        _wait_for_workers(cluster, workers, processes)
        yield cluster
    finally:
        end_processes(processes)


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for_workers(cluster: DaskCluster, count: int, processes) -> None:
    import distributed

    deadline = time.monotonic() + START_TIMEOUT
    while True:
        ended = [p.args for p in processes if p.poll() is not None]
        if ended:
            raise RuntimeError(f"{ended} ended at start:\n{cluster.log_tails()}")
        try:
            with distributed.Client(cluster.address, timeout=5) as client:
                client.wait_for_workers(count, timeout=max(1, deadline - time.monotonic()))
                return
        except (OSError, TimeoutError):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"no {count} workers at {cluster.address} within {START_TIMEOUT} s:\n"
                    + cluster.log_tails()
                ) from None
            time.sleep(0.5)


def end_processes(processes: list[subprocess.Popen]) -> None:
    """SIGTERM to each process group (workers first), then SIGKILL to what is left."""
    for process in reversed(processes):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for process in reversed(processes):
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def tasks_per_worker(address: str) -> Iterator[collections.Counter]:
    """The tasks each worker ran while the block ran, as the scheduler recorded them
    (its task stream: every task that finished, with the worker that ran it)."""
    import distributed

    counts: collections.Counter = collections.Counter()
    with distributed.Client(address, timeout=30) as client:
        with distributed.get_task_stream(client) as stream:
            yield counts
        counts.update(record["worker"] for record in stream.data)
