"""Faults with real processes: a full disk during the push, a corrupted cache,
stop signals to the run's process alone (Beam's workers, a run started in the background),
a search state cut short, and an output directory that others can write to.

Each test runs ``tfx-accum run`` as a user would (``reliability_runs.Run``), with fixed
hyperparameters or a two-trial search so that the faults, not the training, take the time.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import time
from pathlib import Path

import pytest
from reliability_runs import (
    CANCELED,
    NO_TUNE,
    TUNED,
    Run,
    execution_states,
    pushed_model,
    run_to_end,
    served_variables,
    tmpfs,
)

# Runs the pipeline or a command in subprocesses (minutes): `pytest -m "not e2e"` skips it.
pytestmark = pytest.mark.e2e

ENOSPC_LINE = re.compile(r"tfx-accum run: error: no space left on device \(ENOSPC\) writing (\S+);")


def _trainer_model(out: Path) -> Path:
    (model,) = (out / "pipeline" / "Trainer" / "model").glob("*/Format-Serving")
    return model


# ---------------------------------------------------------------- a full disk during the push


def test_a_full_disk_during_the_push_leaves_no_partial_model_and_the_rerun_pushes(tmp_path):
    """``serving_model/`` on a tmpfs smaller than the model: the copy fails part-way."""
    out = tmp_path / "out"
    with tmpfs(out / "serving_model", "512k") as serving:
        proc = run_to_end(out, NO_TUNE)
        assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-3000:]
        last = proc.stdout.splitlines()[-1]
        written = ENOSPC_LINE.match(last)
        assert written and written.group(1).startswith(str(serving)), proc.stdout[-2000:]
        # Nothing a model server watching the directory could load half of, nothing left.
        assert sorted(serving.iterdir()) == []
    # Unmounted: serving_model/ is a directory with room. Only the Pusher runs again.
    rerun = run_to_end(out, NO_TUNE)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "[pipeline] Trainer served from cache" in rerun.stdout
    pushed = pushed_model(rerun.stdout)
    assert pushed.parent == out / "serving_model" and pushed.name.isdigit()
    assert sorted(p.name for p in (out / "serving_model").iterdir()) == [pushed.name]
    trained = served_variables(_trainer_model(out))
    for a, b in zip(served_variables(pushed), trained, strict=True):
        assert (a == b).all()


# ------------------------------------------------- a corrupted cache; a directory others share


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """One run with the umask 000 (a user who allows everyone everything)."""
    out = tmp_path_factory.mktemp("cache") / "out"
    proc = run_to_end(out, NO_TUNE, umask=0)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc.stdout


def test_nothing_the_run_writes_is_world_writable_even_with_umask_000(first_run):
    out, _ = first_run
    writable = [
        str(p.relative_to(out))
        for p in [out, *out.rglob("*")]
        if not p.is_symlink() and p.stat().st_mode & stat.S_IWOTH
    ]
    assert writable == []
    # The user's umask still applies otherwise: group-writable, as 000 asks (where the
    # writer does not fix a mode of its own, as TensorFlow's 0755 directories).
    assert (out / "logs").stat().st_mode & stat.S_IWGRP


def test_a_corrupted_cached_example_file_makes_example_gen_run_again(first_run):
    out, first = first_run
    (examples,) = (out / "pipeline" / "CsvExampleGen" / "examples").glob("*/Split-train/*.gz")
    data = examples.read_bytes()
    examples.write_bytes(data[: len(data) // 2])  # cut in half between two runs

    rerun = run_to_end(out, NO_TUNE)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert f"CsvExampleGen's cached output differs from what it wrote: {examples} has" in (
        rerun.stdout
    )
    assert "[pipeline] CsvExampleGen done" in rerun.stdout
    assert "served from cache" not in rerun.stdout  # everything after it ran again too
    assert "blessed: yes" in rerun.stdout
    accuracy = re.compile(r"^evaluation accuracy: .*$", re.M)
    assert accuracy.search(rerun.stdout).group(0) == accuracy.search(first).group(0)


# ------------------------------------------------------ stop signals to the run's process alone

BEAM_WORKERS = [
    "--beam-pipeline-args",
    "--direct_running_mode=multi_processing --direct_num_workers=2",
]


def test_sigterm_while_beam_workers_run_stops_them_and_the_run(tmp_path):
    out = tmp_path / "out"
    run = Run(out, [*NO_TUNE, *BEAM_WORKERS])
    # StatisticsGen: CsvExampleGen's executor (tfx_accum.components.data.csv_examples) reads with
    # pyarrow and starts no Beam workers; TFDV's statistics run on Beam's.
    run.wait_for(r"^\[pipeline\] StatisticsGen running")
    deadline = time.monotonic() + 300
    while not any("sdk_worker_main" in c for c in run.group_commands()):
        assert run.proc.poll() is None and time.monotonic() < deadline, "no Beam worker started"
        time.sleep(0.1)
    run.signal_process(signal.SIGTERM)  # the run's process only, not its workers
    code, stdout, stderr = run.finish()
    assert code == 130, stdout[-3000:] + stderr[-3000:]
    last = stdout.splitlines()[-1]
    assert last.startswith("[tfx-accum] interrupted: StatisticsGen stopped by SIGTERM"), last
    assert "Traceback" not in stdout + stderr
    assert execution_states(out)["StatisticsGen"] == CANCELED
    assert run.group_left() == []  # no Beam worker outlives the run


# The search's Evaluator never blesses (threshold 1.0): --allow-unblessed then says so.
SEARCH = [*TUNED[:-2], "--accuracy-threshold", "1.0", "--allow-unblessed"]


@pytest.fixture(scope="module")
def interrupted_search(tmp_path_factory):
    """SIGINT to a run started as a shell starts a background job (SIGINT ignored), after
    its first trial."""
    out = tmp_path_factory.mktemp("search") / "out"
    run = Run(out, SEARCH, sigint_ignored=True)
    run.wait_for(r"^\[tuner\] trial 0: ")
    run.signal_process(signal.SIGINT)
    code, stdout, stderr = run.finish()
    return out, code, stdout, stderr, execution_states(out)


def test_sigint_to_a_run_started_in_the_background_stops_the_tuner(interrupted_search):
    _, code, stdout, stderr, states = interrupted_search
    assert code == 130, stdout[-3000:] + stderr[-3000:]
    assert stdout.splitlines()[-1].startswith("[tfx-accum] interrupted: Tuner stopped and marked")
    assert "Traceback" not in stdout + stderr
    assert states["Tuner"] == CANCELED


@pytest.fixture(scope="module")
def resumed_search(interrupted_search):
    """The search state cut short as a kill during its writing left it, then a rerun."""
    out = interrupted_search[0]
    (project,) = (out / "pipeline" / "_search").glob("search-*/tfx_accum")
    (project / "tuner0.json").write_text("")
    oracle = (project / "oracle.json").read_text()
    (project / "oracle.json").write_text(oracle[: len(oracle) // 2])
    return project, run_to_end(out, SEARCH)


def test_a_search_state_cut_short_is_set_aside_and_the_search_resumes(resumed_search):
    project, rerun = resumed_search
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert f"[tuner] the search state in {project} has unreadable files" in rerun.stdout
    assert (project / "oracle.json.unreadable-1").exists()
    assert (project / "tuner0.json.unreadable-1").exists()
    assert "1 trial(s) already finished are not run again" in rerun.stdout
    ran = re.findall(r"^\[tuner\] trial (\d+): ", rerun.stdout, re.M)
    assert ran == ["1"], rerun.stdout  # trial 0 finished before the interrupt
    assert re.search(r"^best trial: ", rerun.stdout, re.M)


def test_allow_unblessed_says_that_the_run_exits_0(resumed_search):
    _, rerun = resumed_search
    assert rerun.returncode == 0
    (line,) = [line for line in rerun.stdout.splitlines() if line.startswith("blessed: no")]
    assert line.endswith("not pushed; exit code 0 as --allow-unblessed asks (else 3)"), line


# ------------------------------------------------------------------------- wide data sets


def test_a_wide_data_set_gets_a_line_before_the_pipeline_starts(tmp_path):
    data = tmp_path / "wide"
    data.mkdir()
    columns = [f"c{i}" for i in range(1000)]
    rows = [",".join(str((r * 7 + i) % 10) for i in range(1000)) + f",{r % 2}" for r in range(30)]
    (data / "wide.csv").write_text("\n".join([",".join([*columns, "label"]), *rows]) + "\n")
    run = Run(
        tmp_path / "out",
        ["--data-root", str(data), "--no-tune", "--accumulation-steps", "1"]
        + ["--micro-batch-size", "4"],
    )
    line = run.wait_for(r"^\[data\] warning: 1,000 feature columns")
    run.signal_group(signal.SIGKILL)
    run.finish()
    assert "StatisticsGen" in line and "--features" in line
    assert not any(line.startswith("[pipeline]") for line in run.lines)  # before it starts


def test_a_batch_larger_than_the_training_split_is_refused_with_the_numbers(tmp_path):
    out = tmp_path / "out"
    proc = run_to_end(out, ["--no-tune", "--accumulation-steps", "1", "--micro-batch-size", "1500"])
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("tfx-accum run: error: ")
    for number in ("1,500", "1,198", "1,797"):  # the batch, the training split, the rows
        assert number in proc.stderr, proc.stderr
    assert "[pipeline]" not in proc.stdout
    assert not os.path.exists(out / "metadata.sqlite")
