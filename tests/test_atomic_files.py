"""Writes that a later run reads are complete or absent, and a full disk names the file.

On a small tmpfs filled to the last byte: the run's reports (``trials.csv``) keep their
earlier content, nothing half-written is left beside them, and the error is an ``ENOSPC``
``OSError`` naming the report (what ``tfx-accum run`` prints as its one line).
"""

from __future__ import annotations

import errno
import stat

import pytest
from reliability_runs import fill, tmpfs

from tfx_accum.pipeline.cli.report import write_trials

TRIALS = [
    {
        "trial_id": "0",
        "score": 0.9,
        "accumulation_steps": 2,
        "micro_batch_size": 16,
        "learning_rate": 1e-3,
    }
]


def test_a_report_written_on_a_full_disk_keeps_the_earlier_one(tmp_path):
    with tmpfs(tmp_path / "disk", "4m") as disk:
        reports = write_trials(TRIALS, disk)
        before = [path.read_bytes() for path in reports]
        filler = fill(disk)
        with pytest.raises(OSError) as error:
            write_trials([{**TRIALS[0], "score": 0.95}] * 2000, disk)
        assert error.value.errno == errno.ENOSPC
        assert error.value.filename in {str(path) for path in reports}
        assert [path.read_bytes() for path in reports] == before
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "trials.csv", "trials.png"]
        filler.unlink()


def test_reports_get_the_users_umask_but_never_world_write(tmp_path):
    import os

    previous = os.umask(0)
    try:
        csv_path, png_path = write_trials(TRIALS, tmp_path)
    finally:
        os.umask(previous)
    for path in (csv_path, png_path):
        mode = path.stat().st_mode
        assert mode & stat.S_IWGRP and not mode & stat.S_IWOTH, oct(mode)


def test_the_same_trials_leave_the_reports_untouched_and_new_ones_rewrite_both(tmp_path):
    """A cached re-run reports the same trials: nothing is redrawn. The PNG is written
    before the CSV, so a CSV from the same trials means a PNG drawn from them."""
    csv_path, png_path = write_trials(TRIALS, tmp_path)
    stamps = [p.stat().st_mtime_ns for p in (csv_path, png_path)]
    png_path.write_bytes(b"drawn from these trials")  # what a redraw would overwrite
    write_trials(TRIALS, tmp_path)
    assert png_path.read_bytes() == b"drawn from these trials"
    assert csv_path.stat().st_mtime_ns == stamps[0]
    write_trials([{**TRIALS[0], "score": 0.95}], tmp_path)
    assert png_path.read_bytes().startswith(b"\x89PNG")
    assert "0.95" in csv_path.read_text()
