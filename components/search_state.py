"""The Tuner's search state on disk: written atomically, recovered when a file is damaged.

Keras Tuner keeps a search in its project directory: ``oracle.json`` (the oracle's
bookkeeping), ``<tuner id>.json`` (the tuner's own, ``{}``) and ``trial_<id>/trial.json``
for each trial, every one rewritten in place (``open(path, "w")``). A run killed while one
was being written left it cut short, and the rerun stopped with ``JSONDecodeError:
Expecting value: line 1 column 1`` on reloading it, every time.

- :func:`prepare` makes every state write atomic (written beside, then renamed:
  :mod:`~tfx_accum.components.atomic_files`) and, before a search is resumed, reads each
  state file. An unreadable one is set aside (renamed ``<name>.unreadable-<n>``, kept for
  a look); then ``oracle.json`` and the tuner files are set aside too, and the search is
  rebuilt from the trial files that can be read:
- :func:`readmit` gives the fresh oracle those trials back: finished ones (completed or
  failed) are not run again, one that was running runs again with its values, and a trial
  whose own file was unreadable is recorded as failed (its values are lost with it).

This is the one place that touches Keras Tuner internals for the search state, pinned to
keras-tuner 1.4.8 (``constraints.txt``) and tested by ``tests/test_search_state.py``:
``keras_tuner.src.utils.save_json`` (every state write goes through it), and the oracle's
bookkeeping that ``Oracle.reload`` restores (``trials``, ``start_order``, ``end_order``,
``_run_times``, ``_retry_queue``, ``_record_values``, ``_save_trial``).
"""

from __future__ import annotations

import dataclasses
import json
import os

import keras_tuner
import tensorflow as tf
from keras_tuner.src import utils as kt_utils
from keras_tuner.src.engine import trial as trial_module

from tfx_accum import console
from tfx_accum.components.atomic_files import gfile_write_atomic, set_aside

ORACLE_FILE = "oracle.json"
_FINISHED = (trial_module.TrialStatus.COMPLETED, trial_module.TrialStatus.FAILED)


def _atomic_save_json(path, obj):
    """``keras_tuner.src.utils.save_json``, writing beside the file and renaming it in."""
    text = json.dumps(obj)
    gfile_write_atomic(str(path), text)
    return text


def make_writes_atomic() -> None:
    """Every Keras Tuner state file (oracle, tuner, trials) is written atomically from now."""
    kt_utils.save_json = _atomic_save_json  # looked up at each call by Stateful.save


@dataclasses.dataclass
class Recovery:
    """What :func:`prepare` set aside, and the trials it could read back."""

    trials: dict[str, trial_module.Trial]
    lost: list[str]  # trial ids whose trial.json was unreadable
    set_aside: list[str]  # the paths renamed


def _readable(path: str) -> bool:
    """Whether Keras Tuner can reload ``path`` (a trial's file: as a trial)."""
    try:
        if os.path.basename(path) == "trial.json":
            trial_module.Trial.load(path)
        else:
            with tf.io.gfile.GFile(path) as handle:
                json.loads(handle.read())
        return True
    except Exception:  # noqa: BLE001 - a cut-short or garbled file
        return False


def prepare(directory: str, project_name: str, resume: bool) -> Recovery | None:
    """Makes state writes atomic; before a resumed search, sets damaged state aside.

    Returns ``None`` when there is nothing to recover (every state file reads, or the
    search is not resumed, or this process is a parallel search's worker: the chief owns
    the state). Otherwise the tuner is then made afresh in the same directory, and
    :func:`readmit` gives it the readable trials.
    """
    make_writes_atomic()
    from tfx_accum.components import parallel_search

    project = f"{directory.rstrip('/')}/{project_name}"
    if not resume or parallel_search.is_worker() or not tf.io.gfile.isdir(project):
        return None
    state_files = [f"{project}/{name}" for name in tf.io.gfile.listdir(project)]
    state_files = [f for f in state_files if f.endswith(".json")]
    trial_files = tf.io.gfile.glob(f"{project}/trial_*/trial.json")
    damaged = [f for f in [*state_files, *trial_files] if not _readable(f)]
    if not damaged:
        return None
    trials, lost = {}, []
    for path in trial_files:
        trial_id = os.path.basename(os.path.dirname(path))[len("trial_") :]
        if path in damaged:
            lost.append(trial_id)
            continue
        trial = trial_module.Trial.load(path)
        trials[trial.trial_id] = trial
    moved = [set_aside(path) for path in damaged]
    # The bookkeeping no longer matches what can be read: rebuilt from the trials.
    moved += [set_aside(path) for path in state_files if path not in damaged]
    names = ", ".join(os.path.relpath(path, project) for path in damaged)
    finished = sum(t.status in _FINISHED for t in trials.values())
    console.say(
        f"[tuner] the search state in {project} has unreadable files ({names}: a run stopped "
        f"while writing them?): set aside; the search is rebuilt from its trial files, "
        f"{finished} finished trial(s) recovered"
    )
    return Recovery(trials, lost, moved)


def readmit(tuner: keras_tuner.Tuner, recovery: Recovery | None) -> None:
    """Puts the recovered trials into the fresh ``tuner``'s oracle, then saves its state."""
    if recovery is None:
        return
    oracle = tuner.oracle
    ids = sorted({*recovery.trials, *recovery.lost}, key=int)
    for trial_id in ids:
        trial = recovery.trials.get(trial_id)
        if trial is None:
            trial = trial_module.Trial(
                oracle.hyperparameters.copy(), trial_id, trial_module.TrialStatus.FAILED
            )
            trial.message = "its trial.json was unreadable (set aside); not run again"
            oracle._save_trial(trial)
        oracle.trials[trial_id] = trial
        oracle.start_order.append(trial_id)
        if trial.status in _FINISHED:
            oracle.end_order.append(trial_id)
            oracle._run_times[trial_id] += 1
        else:  # it was running: it runs again, with its values (as Oracle.reload does)
            trial.status = trial_module.TrialStatus.RUNNING
            oracle._retry_queue.append(trial_id)
        if trial.hyperparameters.values:
            oracle.update_space(trial.hyperparameters)
            oracle._record_values(trial)
    tuner.save()
