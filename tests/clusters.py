"""Clusters of local processes on the loopback address, for the multi-worker tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def run_cluster(script: Path, args: list[str], workers: int = 2, timeout: int = 600):
    """Starts ``workers`` processes of ``script`` as one TF_CONFIG cluster; returns their
    (returncode, stdout, stderr), after killing every one if any fails or hangs."""
    hosts = [f"127.0.0.1:{port}" for port in free_ports(workers)]
    procs = []
    for index in range(workers):
        env = dict(os.environ)
        env["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            results.append((proc.returncode, out, err))
            if proc.returncode != 0:
                break
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return results
