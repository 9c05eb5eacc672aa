"""How a run that did not finish says so: interrupted, out of disk space, a component failed.

What ``tfx-accum run`` prints and returns when the pipeline stops early lives here, so the
CLI's handlers are a line each and never fail themselves (the disk may be full, the
metadata store unwritable):

- **interrupted** (SIGINT, SIGTERM or SIGHUP, also when a library wrapped the ``KeyboardInterrupt``
  in an error of its own, see ``tfx_accum.interrupts``): the processes the run started
  are stopped, this run's execution that was running (or that failed because of the
  interrupt) is marked CANCELED, one line, exit code 130;
- **data anomalies** with ``--fail-on-anomalies`` (tfx_accum.components.data.anomalies): one line
naming
  them, exit code 2, before anything was trained;
- **a full disk**: one line naming ``ENOSPC`` and the path that could not be written, exit
  code 1; the next run with free space resumes (nothing half-written is trusted);
- **anything else**: the error, the last lines of the log and the log's path, exit code 1.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator
from pathlib import Path

from tfx_accum import console, interrupts
from tfx_accum.atomic_files import disk_full
from tfx_accum.components.data.anomalies import AnomaliesFound
from tfx_accum.pipeline.config import EXIT_BAD_INPUT

EXIT_FAILED, EXIT_INTERRUPTED = 1, 130


def interrupted(metadata: str, run_started: str, current: str | None) -> int:
    """Stops the run's child processes, marks what was stopped CANCELED, says so: 130.

    ``current``: the component that was running, if known (used when the metadata store
    cannot be read or written).
    """
    interrupts.ignore_further()  # a second Ctrl-C must not cut this report short
    interrupts.stop_children()
    signal_name = interrupts.requested()
    by = f" by {signal_name}" if signal_name and signal_name != "SIGINT" else ""
    marked, stopped = "and marked canceled", []
    if Path(metadata).exists():
        from tfx_accum.pipeline.cli.report import mark_unfinished_as_canceled

        try:
            stopped = mark_unfinished_as_canceled(metadata, run_started, include_failed=True)
        except Exception as error:  # noqa: BLE001 - a full disk, a locked store
            marked = f"(not marked canceled: {type(error).__name__}; the next run does it)"
    where = ", ".join(stopped) or current or "the run"
    console.say(
        f"[tfx-accum] interrupted: {where} stopped{by} {marked}; the next run resumes from "
        "the cache (the Trainer from its last backup)."
    )
    return EXIT_INTERRUPTED


def failed(error: BaseException, log: Path | None, output_dir: Path) -> int:
    """One line for a full disk (exit code 1) and for data anomalies that stopped the run
    (``--fail-on-anomalies``: exit code 2, bad input); else the error and the log's last
    lines: exit code 1."""
    found = next((e for e in _chain(error) if isinstance(e, AnomaliesFound)), None)
    if found is not None:
        console.say(f"tfx-accum run: error: {found}")
        return EXIT_BAD_INPUT
    full = disk_full_path(error, output_dir)
    if full is not None:
        console.say(
            f"tfx-accum run: error: no space left on device (ENOSPC) writing {full}; free "
            "some space and run the same command again (finished components come from the "
            "cache, the Trainer resumes from its last backup)."
        )
        return EXIT_FAILED
    cause = console.tail(8)
    console.say(f"tfx-accum run: error: {type(error).__name__}: {error}".strip())
    if cause:
        console.say("last lines of the log:")
        for line in cause:
            console.say(f"  {line[:200]}")
    console.say(f"full log: {log}")
    return EXIT_FAILED


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and the errors it was raised from or while handling, outermost first."""
    seen: set[int] = set()
    todo = [error]
    while todo:
        current = todo.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [current.__cause__, current.__context__]


# Where libraries put the file in their message: h5py ("filename = '...'"), TensorFlow's
# file errors ("PATH; No space left on device").
_PATHS = (re.compile(r"filename = '([^']+)'"), re.compile(r"(/[^\s;']+); No space left"))


def disk_full_path(error: BaseException, output_dir: Path) -> str | None:
    """The path a full disk kept from being written, if ``error`` (or a cause) is one.

    A failure on a full disk usually surfaces as a later one (TFX then fails to record the
    failure in ML Metadata: "database or disk is full"), so the chain is searched for the
    first error that names its file; failing that, the metadata store or the output
    directory is named.
    """
    found = [e for e in _chain(error) if disk_full(e)]
    if not found:
        return None
    for candidate in found:
        if isinstance(candidate, OSError) and candidate.errno == errno.ENOSPC:
            if candidate.filename:
                return str(candidate.filename)
        for pattern in _PATHS:
            if match := pattern.search(str(candidate)):
                return match.group(1)
    if any("database or disk is full" in str(e) for e in found):
        return str(output_dir / "metadata.sqlite")
    return f"{output_dir} (the output directory)"
