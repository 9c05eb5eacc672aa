"""What a person sees: the run's own lines on the console, everything else in a log file.

TensorFlow's C++ logging, Beam's worker processes, absl, Python warnings and Keras Tuner
all write to the process's standard output and error. :func:`capture` points file
descriptors 1 and 2 (and so every child process) at a log file, and :func:`say` writes the
project's own lines to the console that was there before, and to the log too, so that the
log tells the whole story in order.

Example:

```python
from tfx_accum import console

with console.capture("out/logs/run.log", verbose=False):
    console.say("[pipeline] 8 components ...")   # console and log
    noisy_library_call()                         # log only
```

Outside :func:`capture` (a Kubeflow pod, a notebook, the tests), :func:`say` prints to
standard output as usual.

The log is created fresh, never opened through a symbolic link or appended to an existing
file (the output directory may be shared), and a line that cannot be written to it (a full
disk) still reaches the console: :func:`say` never raises for the log's sake.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["LogCapture", "capture", "log_path", "say", "tail"]

_lock = threading.Lock()


class LogCapture:
    """The state of one :func:`capture`: the log file and the console it replaced."""

    def __init__(self, path: Path, console_fd: int | None, log_fd: int):
        self.path = path
        self.console_fd = console_fd  # None: verbose, nothing redirected
        self.log_fd = log_fd


_active: LogCapture | None = None


def say(message: str) -> None:
    """Prints one of the project's own lines on the console (and into the log)."""
    line = message.rstrip("\n") + "\n"
    with _lock:
        capture_ = _active
        if capture_ is None or capture_.console_fd is None:
            sys.stdout.write(line)
            sys.stdout.flush()
            if capture_ is not None:
                _to_log(capture_.log_fd, line)
            return
        with contextlib.suppress(OSError):  # the log's disk may be full
            sys.stdout.flush()  # keep the log's order: library lines written before this one
        os.write(capture_.console_fd, line.encode())
        _to_log(1, line)


def log_path() -> Path | None:
    """The log file of the active capture, if any."""
    return _active.path if _active is not None else None


def tail(lines: int = 12) -> list[str]:
    """The last non-empty lines of the active log (the cause of a failure, usually)."""
    path = log_path()
    if path is None or not path.exists():
        return []
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        handle.seek(max(0, handle.tell() - 64 * 1024))
        text = handle.read().decode(errors="replace")
    return [line for line in text.splitlines() if line.strip()][-lines:]


def _to_log(fd: int, text: str) -> None:
    with contextlib.suppress(OSError):  # a full disk: the console has the line
        os.write(fd, text.encode())


def _create_log(path: Path) -> tuple[Path, int]:
    """Creates the log fresh: ``path``, or ``<stem>-N<suffix>`` if that name is taken.

    Neither the directory nor the file is followed if it is a symbolic link, and an
    existing file is never opened (``O_EXCL``): what a log line writes lands in a file
    this run made. ``os.devnull`` is opened as it is.
    """
    if str(path) == os.devnull:
        return path, os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    from tfx_accum.atomic_files import file_mode

    path.parent.mkdir(parents=True, exist_ok=True)
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        for n in range(1000):
            name = path.name if n == 0 else f"{path.stem}-{n}{path.suffix}"
            try:
                return path.parent / name, os.open(name, flags, file_mode(), dir_fd=directory)
            except FileExistsError:
                continue
        raise FileExistsError(f"{path}: no free log file name beside it")
    finally:
        os.close(directory)


@contextlib.contextmanager
def capture(path: str | os.PathLike, verbose: bool = False) -> Iterator[LogCapture]:
    """Sends everything but :func:`say` lines to ``path`` (unless ``verbose``).

    The log is created fresh (see :func:`_create_log`: a taken name gets a ``-N``
    suffix); ``LogCapture.path`` and :func:`log_path` name the file actually written.
    With ``verbose`` the console shows everything, and ``path`` still gets a copy of the
    project's own lines. File descriptors and ``sys.stdout``/``sys.stderr`` are restored
    on exit, also after an error or Ctrl-C.
    """
    global _active
    path, log_fd = _create_log(Path(path))
    if verbose:
        _active = LogCapture(path, None, log_fd)
        try:
            yield _active
        finally:
            _active = None
            os.close(log_fd)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    old_streams = sys.stdout, sys.stderr
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        # Python-level writes follow the descriptors, line by line.
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        _retarget_logging_handlers(old_streams)
        _active = LogCapture(path, saved_out, 1)
        yield _active
    finally:
        _active = None
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        sys.stdout, sys.stderr = old_streams
        _retarget_logging_handlers((sys.stdout, sys.stderr), to_original=True)
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        for fd in (saved_out, saved_err, log_fd):
            os.close(fd)


_retargeted: list[tuple[logging.StreamHandler, object]] = []


def _retarget_logging_handlers(old_streams, to_original: bool = False) -> None:
    """Points logging handlers that hold the old console streams at the new ones.

    absl and Python logging handlers keep a reference to the ``sys.stderr`` of the time
    they were made; without this they would keep writing to the console.
    """
    if to_original:
        for handler, stream in _retargeted:
            handler.setStream(stream)
        _retargeted.clear()
        return
    handlers = list(logging.getLogger().handlers)
    for logger in list(logging.Logger.manager.loggerDict.values()):
        handlers.extend(getattr(logger, "handlers", []))
    for handler in handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream in old_streams:
            replacement = sys.stdout if handler.stream is old_streams[0] else sys.stderr
            _retargeted.append((handler, handler.setStream(replacement)))
