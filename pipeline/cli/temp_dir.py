"""One temporary directory per command, removed when the command ends.

The libraries a run uses leave temporary files behind:

- TensorFlow's AutoGraph writes the source of each function it converts to a file
  (``__autograph_generated_file*.py``) and deletes it in an ``atexit`` handler, which the
  command's prompt exit skips (:func:`tfx_accum.pipeline.cli.parser.entry` ends with ``os._exit``;
  the interpreter's teardown is slow);
- Beam's portable runner leaves three empty directories per pipeline, however it exits.

A default run left 21 files and 9 directories in ``/tmp``, every run, thousands in a day.
While a command runs, ``TMPDIR`` (read by child processes: the search's workers, Beam's)
and :data:`tempfile.tempdir` (this process, whoever asked first) name one fresh directory
inside the user's temporary directory, and the directory is removed when the command ends,
however it ends short of SIGKILL, which leaves that one directory.

Example::

    with command_temp_dir():
        code = main(argv)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

PREFIX = "tfx-accum-"


@contextlib.contextmanager
def command_temp_dir() -> Iterator[str]:
    """Points every temporary file of the command at one directory; removes it at the end.

    Yields the directory. Where it cannot be made (a full or read-only temporary
    directory), the command runs with the temporary directory as it was: tidiness never
    stops a run.
    """
    parent = tempfile.gettempdir()
    try:
        path = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
    except OSError:
        yield parent
        return
    saved_env, saved_tempdir = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = tempfile.tempdir = path
    try:
        yield path
    finally:
        tempfile.tempdir = saved_tempdir
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env
        shutil.rmtree(path, ignore_errors=True)
