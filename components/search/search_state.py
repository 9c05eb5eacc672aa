"""The Tuner's search state on disk: written atomically, recovered when a file is damaged.

Keras Tuner keeps a search in its project directory: ``oracle.json`` (the oracle's
bookkeeping), ``<tuner id>.json`` (the tuner's own, ``{}``) and ``trial_<id>/trial.json``
for each trial, every one rewritten in place (``open(path, "w")``). A run killed while one
was being written left it cut short, and the rerun stopped with ``JSONDecodeError:
Expecting value: line 1 column 1`` on reloading it, every time.

- :func:`prepare` makes every state write atomic (written beside, then renamed:
  ``tfx_accum.atomic_files``) and, before a search is resumed, reads each
  state file. An unreadable one is set aside (renamed ``<name>.unreadable-<n>``, kept for
  a look); then ``oracle.json`` and the tuner files are set aside too, and the search is
  rebuilt from the trial files that can be read:
- :func:`readmit` gives the fresh oracle those trials back: finished ones (completed or
  failed) are not run again, one that was running runs again with its values, and a trial
  whose own file was unreadable is recorded as failed (its values are lost with it).

The Keras Tuner internals this needs (the state writer, reading a trial file, the oracle's
bookkeeping) are in tfx_accum.components.search.keras_tuner_adapter, with every other private use;
tested by ``tests/search/test_search_state.py`` on the pinned keras-tuner 1.4.8.
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
import dataclasses
import json
import os

import keras_tuner
import tensorflow as tf

from tfx_accum import console
from tfx_accum.atomic_files import gfile_write_atomic, set_aside
from tfx_accum.components.search import keras_tuner_adapter as kt_adapter


def make_writes_atomic() -> None:
    """Every Keras Tuner state file (oracle, tuner, trials) is written atomically from now:
    beside the file, then renamed in."""
    kt_adapter.write_state_atomically(gfile_write_atomic)


@dataclasses.dataclass
class Recovery:
    """What :func:`prepare` set aside, and the trials it could read back."""

    trials: dict[str, object]  # trial id -> keras_tuner Trial
    lost: list[str]  # trial ids whose trial.json was unreadable
    set_aside: list[str]  # the paths renamed


def _readable(path: str) -> bool:
    """Whether Keras Tuner can reload ``path`` (a trial's file: as a trial)."""
    try:
        if os.path.basename(path) == "trial.json":
            kt_adapter.load_trial(path)
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
    from tfx_accum.components.search import parallel_search

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
        trial = kt_adapter.load_trial(path)
        trials[trial.trial_id] = trial
    moved = [set_aside(path) for path in damaged]
    # The bookkeeping no longer matches what can be read: rebuilt from the trials.
    moved += [set_aside(path) for path in state_files if path not in damaged]
    names = ", ".join(os.path.relpath(path, project) for path in damaged)
    finished = sum(kt_adapter.is_finished(t) for t in trials.values())
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
    kt_adapter.readmit_trials(
        tuner.oracle,
        recovery.trials,
        recovery.lost,
        "its trial.json was unreadable (set aside); not run again",
    )
    tuner.save()
