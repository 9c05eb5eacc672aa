"""Writes that a later run or a model server reads: complete or absent, never half-written.

A run that is killed, interrupted or stopped by a full disk while it writes must not leave
a file that the next run (or a model server) trusts and cannot read. So every such file is
written beside its destination under a temporary name and renamed into place when it is
complete: on a local filesystem ``rename`` replaces the destination atomically, so a
reader sees the old file or the new one. On object stores (``gs://``, through
``tf.io.gfile``) an object appears whole when its upload ends, and the rename is a copy.

Files are created with the user's umask, never world-writable (see :func:`file_mode`).
:func:`disk_full` recognises the ways libraries report a full disk (``ENOSPC``), and
:func:`raise_if_disk_full` turns one into an ``OSError`` that names the path.

Example:

```python
atomic_write_text("out/report.json", text)  # all of text, or the old file
gfile_write_atomic("gs://bucket/state.json", text)  # the same for tf.io.gfile paths
```
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "atomic_write",
    "atomic_write_text",
    "disk_full",
    "file_mode",
    "gfile_digest",
    "gfile_write_atomic",
    "raise_if_disk_full",
    "set_aside",
]

_NO_WORLD_WRITE = 0o002


def current_umask() -> int:
    """The process's umask, with world-write always masked (read without changing it)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8) | _NO_WORLD_WRITE
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no /proc: read it by setting it, and put it back at once
    os.umask(mask)
    return mask | _NO_WORLD_WRITE


def file_mode(directory: bool = False) -> int:
    """The mode a new file (or directory) gets: the user's umask, never world-writable."""
    return (0o777 if directory else 0o666) & ~current_umask()


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Calls ``write(tmp_path)`` on a temporary file beside ``path``, then renames it.

    The temporary file is removed if ``write`` fails; a full disk raises an ``OSError``
    with ``errno.ENOSPC`` that names ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        os.chmod(tmp, file_mode())  # mkstemp makes 0600; the file gets the user's umask
        write(tmp)
        os.replace(tmp, path)
    except Exception as error:
        raise_if_disk_full(error, path)
        raise
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Writes ``text`` to ``path``: all of it, or the file as it was."""
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def gfile_write_atomic(path: str, data: str | bytes) -> None:
    """:func:`atomic_write_text` for any ``tf.io.gfile`` path (local or ``gs://``)."""
    if "://" not in path:
        if isinstance(data, str):
            atomic_write_text(path, data)
        else:
            atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))
        return
    import tensorflow as tf

    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        with tf.io.gfile.GFile(tmp, "wb" if isinstance(data, bytes) else "w") as handle:
            handle.write(data)
        tf.io.gfile.rename(tmp, path, overwrite=True)
    except Exception as error:
        with contextlib.suppress(Exception):
            tf.io.gfile.remove(tmp)
        raise_if_disk_full(error, path)
        raise


def set_aside(path: str, reason: str = "unreadable") -> str:
    """Renames ``path`` to ``<path>.<reason>-<n>`` (kept for a look, never read again)."""
    import tensorflow as tf

    for n in range(1, 1000):
        target = f"{path}.{reason}-{n}"
        if not tf.io.gfile.exists(target):
            tf.io.gfile.rename(path, target)
            return target
    raise FileExistsError(f"{path}: too many set-aside copies beside it")


# How a full disk shows: errno 28 (OSError, h5py's "errno = 28"), the C library's text,
# SQLite's SQLITE_FULL, TensorFlow's file errors (RESOURCE_EXHAUSTED with the text).
_DISK_FULL = re.compile(
    r"No space left on device|errno\s*=\s*28\b|\[Errno 28\]|database or disk is full|ENOSPC",
    re.IGNORECASE,
)


def disk_full(error: BaseException) -> bool:
    """Whether ``error`` (not its causes) says the disk is full."""
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return True
    return bool(_DISK_FULL.search(str(error)))


def raise_if_disk_full(error: BaseException, path: str | os.PathLike) -> None:
    """Raises ``OSError(ENOSPC, ..., path)`` from ``error`` if it is a full disk."""
    if isinstance(error, OSError) and error.errno == errno.ENOSPC and error.filename:
        raise error
    if disk_full(error):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from error


def gfile_digest(path: str) -> tuple[int, str]:
    """The size and SHA-256 (hex) of a local or ``gs://`` file, read in 1 MiB chunks: what
    tells a complete file from a damaged one (training backups, ExampleGen outputs)."""
    import tensorflow as tf

    digest, size = hashlib.sha256(), 0
    with tf.io.gfile.GFile(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()
