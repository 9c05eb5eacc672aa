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

from tfx_accum.pipeline.report import write_trials

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
        csv_path, _ = write_trials(TRIALS, disk)
        before = csv_path.read_bytes()
        filler = fill(disk)
        with pytest.raises(OSError) as error:
            write_trials([{**TRIALS[0], "score": 0.95}] * 2000, disk)
        assert error.value.errno == errno.ENOSPC
        assert error.value.filename == str(csv_path)
        assert csv_path.read_bytes() == before
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
