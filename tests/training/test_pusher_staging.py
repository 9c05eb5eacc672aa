"""The Pusher's staging directory left by a killed push is removed by the next push:
SIGKILL runs no cleanup, and ``serving_model/.incoming-<id>/`` stayed forever."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from pushes import push

from tfx_accum.components.training.pusher import (
    STAGING_PREFIX,
    STALE_SECONDS,
    _staging_name,
    remove_abandoned_staging,
)


@pytest.mark.e2e
def test_a_killed_pushs_staging_is_removed_and_a_live_ones_kept(tmp_path):
    base = tmp_path / "serving"
    base.mkdir()
    # A real process that stages a copy and is killed with SIGKILL in the middle.
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys, time\n"
            "from tfx_accum.components.training.pusher import _staging_name\n"
            f"path = os.path.join({str(base)!r}, _staging_name(), '1')\n"
            "os.makedirs(path)\n"
            "open(os.path.join(path, 'variables.data'), 'wb').write(b'x' * 1000)\n"
            "print(path, flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    killed = os.path.dirname(child.stdout.readline().strip())
    child.send_signal(signal.SIGKILL)
    child.wait()
    live = base / _staging_name()  # this process's own: still pushing
    live.mkdir()
    foreign = base / f"{STAGING_PREFIX}elsewhere-123-abc"  # another machine's, recent
    foreign.mkdir()
    version = base / "1700000000"  # a published version is never touched
    version.mkdir()

    assert remove_abandoned_staging(str(base)) == [killed]
    assert sorted(p.name for p in base.iterdir()) == sorted([live.name, foreign.name, version.name])
    # Another machine's staging, a day old: abandoned too.
    old = time.time() - STALE_SECONDS - 60
    os.utime(foreign, (old, old))
    assert remove_abandoned_staging(str(base)) == [str(foreign)]
    assert live.name.startswith(f"{STAGING_PREFIX}{socket.gethostname().replace('-', '_')}-")


def test_the_pushers_executor_clears_a_killed_pushs_staging(tmp_path):
    """The clean-up runs in every push, also one that pushes nothing (not blessed)."""
    base = tmp_path / "serving"
    killed = base / f"{STAGING_PREFIX}{socket.gethostname().replace('-', '_')}-999999999-abc"
    (killed / "1").mkdir(parents=True)
    pushed = push(tmp_path, base, model=None, blessed=False)
    assert not pushed.get_int_custom_property("pushed")
    assert not killed.exists()
