"""Stop requests (SIGINT, SIGTERM, SIGHUP) honoured the same way in every component.

``tfx-accum run`` stops with one line and exit code 130 when it is asked to: Ctrl-C,
``kill -INT PID``, or ``kill PID`` (SIGTERM, which Kubernetes and process managers send
before they kill). Python alone does not make that dependable:

- SIGTERM kills the process at once, leaving the running execution RUNNING;
- a process started with SIGINT ignored (a background job of a non-interactive shell, some
  process managers) never sees Ctrl-C at all;
- libraries catch the ``KeyboardInterrupt`` on its way: Beam wraps one raised inside a
  transform in a ``RuntimeError``, Keras Tuner records a trial that raised as failed and
  starts the next one.

Inside :func:`handled` both signals raise ``KeyboardInterrupt`` in the main thread *and*
are remembered: :func:`requested` says that one came, whatever became of the exception
(the command line then reports a stop, not a failure).
:func:`stop_children` ends the processes this one started (Beam's workers, a parallel
search's workers) when the run stops, and a few seconds after a stop request in any case
(a library's cleanup may wait for its workers forever).

Example:

```python
with interrupts.handled():
    try:
        run_pipeline()
    except Exception:
        if interrupts.requested():  # a wrapped KeyboardInterrupt: still a stop request
            ...
```
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator

__all__ = ["handled", "ignore_further", "requested", "stop_children"]

# SIGHUP: the terminal closed. Python's default kills the process at once (exit 129, the
# temporary files and a RUNNING execution left); handled as SIGTERM, unless the run was
# started with it ignored (``nohup``), which is kept.
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# After a stop request, the run's child processes are stopped after this long even if the
# main thread is still inside a library's cleanup: Beam's DirectRunner, interrupted while
# its worker processes start, joins a thread that waits for them forever.
CHILDREN_GRACE_SECONDS = 5.0
_received: list[int] = []
# The watchdog started by the first stop request; cancelled when :func:`handled` ends, so it
# never stops processes started after the stop was dealt with (a long-lived caller's).
_watchdogs: list[threading.Timer] = []


def _handler(signum, frame) -> None:
    if not _received:
        watchdog = threading.Timer(CHILDREN_GRACE_SECONDS, stop_children)
        watchdog.daemon = True
        watchdog.start()
        _watchdogs.append(watchdog)
    _received.append(signum)
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise ``KeyboardInterrupt`` and are remembered, in this
    block (a SIGHUP that ``nohup`` ignores stays ignored).

    Outside the main thread (where Python cannot install handlers) it changes nothing.
    The previous handlers are restored when the block ends.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    previous = {
        signum: signal.signal(signum, _handler)
        for signum in SIGNALS
        if not (signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN)
    }
    try:
        yield
    finally:
        while _watchdogs:
            _watchdogs.pop().cancel()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def ignore_further() -> None:
    """Ignores the stop signals until :func:`handled` ends (while a stop is reported)."""
    if threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            signal.signal(signum, signal.SIG_IGN)


def requested() -> str | None:
    """The name of the first stop signal received in :func:`handled` (None: none came)."""
    return signal.Signals(_received[0]).name if _received else None


def _children_of() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(pid: int | None = None) -> list[int]:
    """The processes started by ``pid`` (this process) and by those, from /proc (Linux)."""
    if not os.path.isdir("/proc"):
        return []
    tree, found, todo = _children_of(), [], [pid or os.getpid()]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stop_children(timeout: float = 5.0) -> list[int]:
    """Sends SIGTERM to this process's descendants, then SIGKILL to those still there.

    Returns the pids that were signalled. Processes that are already gone are skipped.
    """
    pids = descendants()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        for pid in list(alive):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reap our own children
            if not os.path.exists(f"/proc/{pid}") or _zombie(pid):
                alive.remove(pid)
        time.sleep(0.05)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return pids


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
