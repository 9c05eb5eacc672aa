"""Which signals stop a run (tfx_accum.interrupts), in this process's main thread."""

from __future__ import annotations

import os
import signal

import pytest

from tfx_accum import interrupts


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_each_stop_signal_raises_keyboard_interrupt_and_is_remembered(signum):
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as from a terminal
    try:
        with interrupts.handled():
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signum)
                signal.sigtimedwait([], 0.1)  # let the handler run
            assert interrupts.requested() == signum.name
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_a_sighup_that_nohup_ignores_stays_ignored():
    """`nohup tfx-accum run ...`: the user asked the run to outlive the terminal."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with interrupts.handled():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)  # ignored: nothing raised
            assert interrupts.requested() is None
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_the_childrens_watchdog_ends_with_the_block(monkeypatch):
    """A stop request arms a watchdog that stops this process's children if the main thread
    hangs in a library's cleanup. Once the block has ended the stop was dealt with: a child
    started afterwards (by a long-lived caller, such as a test session) is left alone: a
    watchdog outliving the block would SIGTERM it, failing whatever that child was doing."""
    import subprocess
    import sys
    import time

    monkeypatch.setattr(interrupts, "CHILDREN_GRACE_SECONDS", 0.5)
    with interrupts.handled():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0.1)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(1.5)  # three times the grace
        assert child.poll() is None, f"the child was stopped: {child.returncode}"
    finally:
        child.kill()
        child.wait()
