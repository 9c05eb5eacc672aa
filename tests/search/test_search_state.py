"""The Tuner's search state: atomic writes, and recovery from files cut short.

A real Keras Tuner (the pipeline's ``make_tuner``) in a directory of its own; trials are
created and ended through the oracle's API, so no model trains. The process tests are
``test_faults.py::test_a_search_state_cut_short_is_set_aside_and_the_search_resumes``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from reliability_runs import fill, tmpfs

from tfx_accum.components.config.search_space import SearchSpace
from tfx_accum.components.data.features import DataDescription
from tfx_accum.components.search.hypermodel import AccumulationHyperModel
from tfx_accum.components.search.search_tuners import PROJECT_NAME, make_tuner

SPACE = SearchSpace(algorithm="random", max_trials=6)
DATA = DataDescription.numeric(["a", "b"], 3)  # a multiclass task: ranked by val_accuracy


def _tuner(directory: Path, resume: bool):
    hypermodel = AccumulationHyperModel(SPACE, None, "mlp", data=DATA)
    return make_tuner(SPACE, hypermodel, str(directory), None, resume)


def _finish(tuner, score: float | None) -> str:
    """Runs a trial through the oracle as the search would; ``None`` leaves it running."""
    trial = tuner.oracle.create_trial(tuner.tuner_id)
    if score is not None:
        tuner.oracle.update_trial(trial.trial_id, {"val_accuracy": score})
        trial.status = "COMPLETED"
        tuner.oracle.end_trial(trial)
        tuner.save()
    return trial.trial_id


def test_state_writes_on_a_full_disk_leave_every_state_file_readable(tmp_path):
    with tmpfs(tmp_path / "disk", "1m") as disk:
        tuner = _tuner(disk, resume=False)
        _finish(tuner, 0.5)
        oracle_file = disk / PROJECT_NAME / "oracle.json"
        before = oracle_file.read_text()
        filler = fill(disk)
        with pytest.raises(OSError):
            _finish(tuner, 0.6)  # the new trial's file, then the oracle's, cannot be written
        for state in disk.rglob("*.json"):
            json.loads(state.read_text())  # complete (the old content), never cut short
        assert oracle_file.read_text() == before
        assert [p.name for p in disk.rglob("*.tmp")] == []  # nothing half-written left
        filler.unlink()
        assert len(_tuner(disk, resume=True).oracle.trials) == 1


@pytest.mark.parametrize("cut", ["oracle.json", "tuner0.json"])
def test_a_state_file_cut_short_is_set_aside_and_the_trials_recovered(cut, tmp_path, capsys):
    tuner = _tuner(tmp_path, resume=False)
    finished = {_finish(tuner, score): score for score in (0.5, 0.7)}
    running = _finish(tuner, None)  # the run was stopped during this trial
    values = tuner.oracle.trials[running].hyperparameters.values
    project = tmp_path / PROJECT_NAME
    text = (project / cut).read_text()
    (project / cut).write_text(text[: len(text) // 2])

    resumed = _tuner(tmp_path, resume=True)
    assert "set aside; the search is rebuilt from its trial files, 2 finished" in (
        capsys.readouterr().out
    )
    assert (project / f"{cut}.unreadable-1").read_text() == text[: len(text) // 2]
    oracle = resumed.oracle
    scores = {t.trial_id: t.score for t in oracle.trials.values() if t.status == "COMPLETED"}
    assert scores == finished
    # The interrupted trial runs again with its own values, then the search goes on.
    again = oracle.trials[_finish(resumed, 0.6)]
    assert (again.trial_id, again.hyperparameters.values) == (running, values)
    assert _finish(resumed, 0.1) == "3"
    # The rebuilt state is what the next run reloads, without setting anything aside.
    json.loads((project / "oracle.json").read_text())
    assert len(_tuner(tmp_path, resume=True).oracle.trials) == 4
    assert "unreadable" not in capsys.readouterr().out


def test_a_trial_file_cut_short_is_recorded_failed_and_not_run_again(tmp_path):
    tuner = _tuner(tmp_path, resume=False)
    ids = [_finish(tuner, score) for score in (0.5, 0.6, 0.7)]
    trial_file = tmp_path / PROJECT_NAME / f"trial_{ids[1]}" / "trial.json"
    trial_file.write_text(trial_file.read_text()[:10])

    oracle = _tuner(tmp_path, resume=True).oracle
    assert [oracle.trials[i].status for i in ids] == ["COMPLETED", "FAILED", "COMPLETED"]
    assert "unreadable" in oracle.trials[ids[1]].message
    assert oracle.create_trial("tuner0").trial_id == "3"  # no finished id is taken again


def test_keras_tuner_is_the_version_the_adapter_was_written_for():
    """The adapter touches keras-tuner internals as they are in the pinned version."""
    import keras_tuner
    from keras_tuner.src import utils

    assert keras_tuner.__version__ == "1.4.8"
    assert utils.save_json.__module__ == "tfx_accum.components.search.keras_tuner_adapter"
    constraints = Path(__file__).resolve().parents[2] / "constraints.txt"
    assert "keras-tuner==1.4.8" in constraints.read_text()


def test_a_trial_killed_as_it_was_created_runs_again(tmp_path):
    """Keras Tuner writes a new trial's file, then oracle.json: a run killed between the two
    left a trial running per its file but not ongoing per the oracle, which its reload
    counted toward max_trials and never ran (tests/pipeline/test_reliability.py's killed
    Tuner, when the kill landed there)."""
    tuner = _tuner(tmp_path, resume=False)
    _finish(tuner, 0.5)
    oracle_file = tmp_path / PROJECT_NAME / "oracle.json"
    before = oracle_file.read_text()
    orphan = _finish(tuner, None)  # created and running ...
    oracle_file.write_text(before)  # ... but the kill came before oracle.json was written
    resumed = _tuner(tmp_path, resume=True)
    again = resumed.oracle.create_trial(resumed.tuner_id)
    assert again.trial_id == orphan
    assert again.hyperparameters.values == tuner.oracle.trials[orphan].hyperparameters.values
