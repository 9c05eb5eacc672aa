"""The output directory: checked before anything runs, and one run at a time.

Two runs writing into one ``--output-dir`` would report each other's results as their own
(the same ML Metadata store, the same trial files). :func:`claim` takes an exclusive
``flock`` on ``<output>/.tfx-accum.lock`` for the whole run: a second run is refused at
once, naming the first; the kernel releases the lock when a run ends, also when it
crashes or is killed, so a lock is never left stuck.

The directory may be shared (``/tmp/...``, a team's scratch disk), so nothing in it is
trusted blindly: the lock file is opened with ``O_NOFOLLOW`` and must be a regular file of
its own (a symbolic or hard link planted there is refused, never written through), the
logs directory must not be a symbolic link, and while a run holds the directory the
process's umask also masks world-write (files get the user's umask, never ``o+w``).

Example:

```python
with claim(Path("tfx_accum_output")):
    ...  # this process is the only run writing there
```
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import sqlite3
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tfx_accum.pipeline.checks.paths import DERIVED_BYTES, check_path
from tfx_accum.pipeline.errors import InputError

LOCK_NAME = ".tfx-accum.lock"
METADATA_NAME = "metadata.sqlite"
LOGS_NAME = "logs"


def check(output_dir: Path, data_root: str | None = None, force: bool = False) -> None:
    """One-line errors for an output directory that cannot be used, before anything is
    written: a missing one is not created here (:func:`claim` does, once the data is
    checked too), only its nearest existing parent is checked for write access.

    Also refused: a path the stack cannot use (a control or glob character, a name or path
    too long: ``tfx_accum.pipeline.checks.paths``); an output directory inside (or equal to)
    ``data_root``, whose files the next run would read as data; and, unless ``force``, a
    directory that holds files but no tfx-accum run's lock (someone else's files).
    """
    check_path("--output-dir", str(output_dir), derived=DERIVED_BYTES)
    if data_root is not None:
        check_path("--data-root", data_root)
        root = Path(data_root).resolve()
        if output_dir == root or root in output_dir.parents:
            raise InputError(
                f"--output-dir {str(output_dir)!r} is inside --data-root {str(root)!r}: the "
                "run's files would be read as data by the next run; choose an output "
                "directory outside the data root."
            )
    if output_dir.exists() and not output_dir.is_dir():
        raise InputError(
            f"--output-dir {str(output_dir)!r} is a file, not a directory; "
            "pass a directory (it is created if missing)."
        )
    if not output_dir.exists():
        parent = next(p for p in output_dir.parents if p.exists())
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise InputError(
                f"--output-dir {str(output_dir)!r} cannot be written (it does not exist, and "
                f"{parent} is not a writable directory to create it in); choose a writable "
                "directory."
            )
        return
    try:
        fd, probe = tempfile.mkstemp(dir=output_dir, prefix=".write-test-")
        os.close(fd)
        os.remove(probe)
    except OSError as error:
        raise InputError(
            f"--output-dir {str(output_dir)!r} cannot be written ({error.strerror}); "
            "choose a writable directory."
        ) from None
    metadata = output_dir / METADATA_NAME
    if metadata.exists():
        try:
            with contextlib.closing(
                sqlite3.connect(f"file:{metadata}?mode=rw", uri=True, timeout=1)
            ) as connection:
                connection.execute("PRAGMA schema_version").fetchone()
        except sqlite3.Error as error:
            raise InputError(
                f"The metadata store {str(metadata)!r} cannot be opened ({error}); move it "
                "away to start afresh (the cache is lost), or use another --output-dir."
            ) from None
    for name in (LOCK_NAME, LOGS_NAME):
        if (output_dir / name).is_symlink():
            raise InputError(
                f"{str(output_dir / name)!r} is a symbolic link (to "
                f"{os.readlink(output_dir / name)!r}); tfx-accum never writes through one. "
                "Remove it, or use an --output-dir that only you can write to."
            )
    if not force and output_dir.is_dir() and not (output_dir / LOCK_NAME).exists():
        held = _holding(output_dir)
        if held:
            shown = ", ".join(held[:4])
            raise InputError(
                f"--output-dir {str(output_dir)!r} holds files ({shown}, ...) but is no "
                "tfx-accum output: choose a new or empty directory, or pass --force to write "
                "there anyway."
            )


def _holding(directory: Path) -> list[str]:
    """The entries of ``directory`` that hold something: files, and directories that are not
    empty (an empty one, such as a mount point made for ``serving_model``, loses nothing)."""
    held = []
    for entry in sorted(directory.iterdir()):
        if entry.is_dir() and not entry.is_symlink() and not any(entry.iterdir()):
            continue
        held.append(entry.name)
    return held


@contextlib.contextmanager
def no_world_write() -> Iterator[None]:
    """The process's umask also masks world-write in this block (the user's umask else)."""
    umask = os.umask(0o022)
    os.umask(umask | 0o002)
    try:
        yield
    finally:
        os.umask(umask)


@contextlib.contextmanager
def claim(output_dir: Path) -> Iterator[None]:
    """Holds the output directory for this process; refuses if another run holds it.

    While it is held, nothing the run creates is world-writable (:func:`no_world_write`).
    """
    try:
        with no_world_write():
            output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(
            f"--output-dir {str(output_dir)!r} cannot be created ({error.strerror}); "
            "choose a writable directory."
        ) from None
    path = output_dir / LOCK_NAME
    fd = _open_lock(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(path)
            raise InputError(
                f"--output-dir {str(output_dir)!r} is in use by another tfx-accum run "
                f"({holder}); wait for it to finish, or use another --output-dir."
            ) from None
        os.ftruncate(fd, 0)
        info = {"pid": os.getpid(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        info["command"] = " ".join(sys.argv[:1] + sys.argv[1:8])
        with contextlib.suppress(OSError):  # who holds it is a courtesy (a full disk)
            os.write(fd, json.dumps(info).encode())
        with no_world_write():
            yield
    finally:
        os.close(fd)  # releases the lock


def _open_lock(path: Path) -> int:
    """The lock file, opened without following a link; a planted file is refused."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as error:
        why = "it is a symbolic link" if error.errno == errno.ELOOP else error.strerror
        raise InputError(
            f"The lock file {str(path)!r} cannot be opened ({why}). Remove it, or use an "
            "--output-dir that only you can write to."
        ) from None
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "is not a regular file"
    elif info.st_nlink != 1:
        problem = f"has {info.st_nlink} hard links (another file shares it)"
    if problem:
        os.close(fd)
        raise InputError(
            f"The lock file {str(path)!r} {problem}; tfx-accum never writes into it. Remove "
            "it, or use an --output-dir that only you can write to."
        )
    return fd


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "process unknown"
    return f"pid {info.get('pid')}, started {info.get('started')}"
