"""Every run tells the truth about itself and survives interruption, with real processes.

Runs use fixed hyperparameters (``--no-tune``) where the Tuner is not the point, so that an
interrupted-and-resumed Trainer can be compared weight for weight with an uninterrupted
one: both are seeded, read the same shuffled stream, and accumulate exactly.
"""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest
from reliability_runs import (
    CANCELED,
    NO_TUNE,
    RUNNING,
    TUNED,
    Run,
    assert_same_weights,
    execution_states,
    fill,
    pushed_model,
    run_to_end,
    served_variables,
    tmpfs,
)

# Runs the pipeline or a command in subprocesses (minutes): `pytest -m "not e2e"` skips it.
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted")
    proc = run_to_end(out, NO_TUNE)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return served_variables(pushed_model(proc.stdout))


def test_killed_trainer_resumes_to_the_uninterrupted_weights(uninterrupted, tmp_path):
    out = tmp_path / "killed"
    run = Run(out, NO_TUNE)
    run.wait_for(r"^\[trainer\] \d+/160 updates \(50%\)")  # two epochs backed up by now
    # Frozen where it is: the rest of training takes about a second on this data.
    run.signal_group(signal.SIGSTOP)

    # Meanwhile a second run into the same directory is refused at once, naming the first.
    second = run_to_end(out, NO_TUNE)
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"in use by another tfx-accum run (pid {run.proc.pid}" in second.stderr
    assert second.stderr.count("\n") == 1 and "[pipeline]" not in second.stdout

    run.signal_group(signal.SIGKILL)
    run.finish()
    assert execution_states(out)["Trainer"] == RUNNING  # what a killed process leaves
    rerun = run_to_end(out, NO_TUNE)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "an earlier run was stopped during Trainer; marked canceled" in rerun.stdout
    assert "[pipeline] CsvExampleGen served from cache" in rerun.stdout
    assert re.search(r"resuming after epoch [1-4] from ", rerun.stdout), rerun.stdout
    assert_same_weights(served_variables(pushed_model(rerun.stdout)), uninterrupted)


def test_ctrl_c_in_the_trainer_exits_130_with_one_line_and_resumes(uninterrupted, tmp_path):
    out = tmp_path / "sigint-trainer"
    run = Run(out, NO_TUNE)
    run.wait_for(r"^\[trainer\] \d+/160 updates \(50%\)")
    run.signal_group(signal.SIGINT)
    code, stdout, stderr = run.finish()
    assert code == 130, stdout[-2000:] + stderr[-2000:]
    assert stdout.splitlines()[-1].startswith("[tfx-accum] interrupted: Trainer stopped")
    assert "Traceback" not in stdout + stderr
    assert execution_states(out)["Trainer"] == CANCELED  # not marked as finished

    rerun = run_to_end(out, NO_TUNE)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "resuming after epoch" in rerun.stdout
    assert_same_weights(served_variables(pushed_model(rerun.stdout)), uninterrupted)


def _stopped_in_the_trainer(tmp_path: Path, signum: signal.Signals, at: str) -> Path:
    """A run sent ``signum`` (to its process alone) at ``at`` % of the Trainer's updates: it
    stops with one line, exit 130, its execution CANCELED and its temporary files removed
    (tfx_accum.pipeline.cli.temp_dir: AutoGraph's generated sources of the Trainer's step, which its
    atexit handler would delete, are left otherwise). Returns the output directory."""
    out, user_tmp = tmp_path / signum.name.lower(), tmp_path / "tmp"
    user_tmp.mkdir()
    run = Run(out, NO_TUNE, env={"TMPDIR": str(user_tmp)})
    run.wait_for(rf"^\[trainer\] \d+/160 updates \({at}%\)")
    run.signal_process(signum)
    code, stdout, stderr = run.finish()
    assert code == 130, stdout[-2000:] + stderr[-2000:]
    last = stdout.splitlines()[-1]
    stopped = f"[tfx-accum] interrupted: Trainer stopped by {signum.name} and marked"
    assert last.startswith(stopped), last
    assert "Traceback" not in stdout + stderr
    assert execution_states(out)["Trainer"] == CANCELED
    assert sorted(p.name for p in user_tmp.iterdir()) == []
    return out


def test_sigterm_to_the_run_in_the_trainer_stops_it_as_ctrl_c_does(uninterrupted, tmp_path):
    """SIGTERM (what Kubernetes and process managers send) to the run's process alone; the
    same command then resumes from the last backup to the uninterrupted run's weights."""
    out = _stopped_in_the_trainer(tmp_path, signal.SIGTERM, "50")
    rerun = run_to_end(out, NO_TUNE)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "resuming after epoch" in rerun.stdout
    assert_same_weights(served_variables(pushed_model(rerun.stdout)), uninterrupted)


def test_sighup_to_the_run_stops_it_as_sigterm_does(tmp_path):
    """SIGHUP (the terminal closed, no nohup) killed the run at once: exit 129, no line,
    its temporary files and a RUNNING execution left. Now it is a stop request like SIGTERM
    (the resumption after it is SIGTERM's test's)."""
    _stopped_in_the_trainer(tmp_path, signal.SIGHUP, "25")


def test_a_full_disk_while_training_is_one_line_and_the_next_run_resumes(uninterrupted, tmp_path):
    """The disk fills during training (the output directory on a small tmpfs, filled while
    the run is stopped after its first epoch's backup): the run ends with one line naming
    ENOSPC and the file, and once there is space again the same command resumes from the
    last complete backup to the uninterrupted run's weights."""
    with tmpfs(tmp_path / "disk", "64m") as disk:
        out = disk / "out"
        run = Run(out, NO_TUNE)
        run.wait_for(r"^\[trainer\] \d+/160 updates \(25%\)")  # epoch 1 is backed up
        run.signal_group(signal.SIGSTOP)
        filler = fill(disk)
        run.signal_group(signal.SIGCONT)
        code, stdout, stderr = run.finish()
        assert code == 1, stdout[-3000:] + stderr[-3000:]
        assert "Traceback" not in stdout + stderr, stdout[-3000:] + stderr[-3000:]
        last = stdout.splitlines()[-1]
        written = re.fullmatch(
            r"tfx-accum run: error: no space left on device \(ENOSPC\) writing (\S+); .*", last
        )
        assert written and written.group(1).startswith(str(out)), stdout[-2000:]
        assert [line for line in stdout.splitlines() if "error" in line] == [last]

        filler.unlink()
        rerun = run_to_end(out, NO_TUNE)
        assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
        assert re.search(r"resuming after epoch [1-4] from ", rerun.stdout), rerun.stdout
        assert_same_weights(served_variables(pushed_model(rerun.stdout)), uninterrupted)


def test_ctrl_c_in_the_tuner_then_rerun_and_no_tune_reports_its_own_run(tmp_path):
    out = tmp_path / "sigint-tuner"
    run = Run(out, TUNED)
    run.wait_for(r"^\[tuner\] .* search over")
    run.signal_group(signal.SIGINT)
    code, stdout, stderr = run.finish()
    assert code == 130, stdout[-2000:] + stderr[-2000:]
    assert stdout.splitlines()[-1].startswith("[tfx-accum] interrupted: Tuner stopped")
    assert "Traceback" not in stdout + stderr
    assert execution_states(out)["Tuner"] == CANCELED

    rerun = run_to_end(out, TUNED)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "[pipeline] StatisticsGen served from cache" in rerun.stdout
    assert "[pipeline] Tuner done" in rerun.stdout
    tuned_best = re.search(r"best trial: (.*)", rerun.stdout).group(1)
    trials_csv = (out / "trials.csv").read_bytes()

    # --no-tune into the directory of a tuned run: the summary is this run's, and the
    # earlier trial files are left alone and said to be earlier ones.
    plain = run_to_end(out, NO_TUNE)
    assert plain.returncode == 0, plain.stdout[-3000:] + plain.stderr[-3000:]
    assert "tuning: off" in plain.stdout and tuned_best not in plain.stdout
    assert "best trial" not in plain.stdout
    assert "trials.csv and trials.png are from an earlier run" in plain.stdout
    assert "accumulation_steps=2 micro_batch=16 lr=0.003" in plain.stdout
    assert (out / "trials.csv").read_bytes() == trials_csv


@pytest.fixture
def read_only_dir(tmp_path):
    path = tmp_path / "ro"
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(path)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here (needs root)")
    yield path
    subprocess.run(["umount", str(path)], check=True)


def _bad_output_dir(case: str, tmp_path: Path, read_only: Path | None) -> tuple[Path, str]:
    if case == "read-only":
        return read_only / "out", "cannot be written"
    if case == "a file":
        path = tmp_path / "afile"
        path.write_text("x")
        return path, "is a file, not a directory"
    out = tmp_path / "corrupt"
    out.mkdir()
    (out / "metadata.sqlite").write_bytes(b"this is not a database" * 100)
    return out, "metadata store"


@pytest.mark.parametrize("case", ["read-only", "a file", "corrupt metadata"])
def test_output_dir_problems_are_one_line_errors(case, tmp_path, request, capsys):
    from tfx_accum.pipeline.cli.parser import main

    read_only = request.getfixturevalue("read_only_dir") if case == "read-only" else None
    out, message = _bad_output_dir(case, tmp_path, read_only)
    before = sorted(p.name for p in out.parent.rglob("*"))
    assert main(["run", "--output-dir", str(out), "--no-tune"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert err.startswith("tfx-accum run: error: ")
    assert sorted(p.name for p in out.parent.rglob("*")) == before  # nothing written


RANDOM_SEARCH = [
    "--algorithm",
    "random",
    "--max-trials",
    "4",
    "--tuning-epochs",
    "1",
    "--train-steps",
    "30",
    "--accumulation-steps-choices",
    "1,2",
    "--micro-batch-choices",
    "16,32",
    "--accuracy-threshold",
    "0.5",
]


def test_killed_tuner_resumes_its_search_without_rerunning_finished_trials(tmp_path):
    whole = run_to_end(tmp_path / "whole", RANDOM_SEARCH)
    assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-3000:]

    out = tmp_path / "killed"
    run = Run(out, RANDOM_SEARCH)
    run.wait_for(r"^\[tuner\] trial 1: ")  # two trials finished (and saved)
    run.signal_group(signal.SIGKILL)  # a short trial may finish before the signal lands
    run.finish()
    rerun = run_to_end(out, RANDOM_SEARCH)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    done = int(re.search(r"(\d+) trial\(s\) already finished are not run again", rerun.stdout)[1])
    assert 2 <= done < 4, rerun.stdout
    ran = re.findall(r"^\[tuner\] trial (\d+): ", rerun.stdout, re.M)
    assert sorted(ran) == [str(i) for i in range(done, 4)], rerun.stdout
    # Trials are seeded and accumulation is exact: the resumed search finds the same best
    # model, its effective batch and learning rate. (Its split is the one timed fastest
    # after the search, which two runs may time differently: the same model either way.)
    best = re.compile(r"^best trial: .*learning_rate=(\S+) effective_batch=(\d+)$", re.M)
    assert best.search(rerun.stdout).groups() == best.search(whole.stdout).groups()
