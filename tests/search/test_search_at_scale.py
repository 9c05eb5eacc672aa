"""The search at scale: parallel trials in the TFX Tuner component, exact-duplicate reuse,
the fastest exact re-split, and the micro-batch memory probe."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import keras_tuner
import numpy as np
import pytest
import tensorflow as tf
from tiny_data import tiny_splits as _tiny_splits

from bench.tuner_component import run_tuner_component as run_tuner_component_on
from tfx_accum.components.config.search_space import SearchSpace
from tfx_accum.components.search.hypermodel import AccumulationHyperModel
from tfx_accum.components.search.micro_batch_probe import fitting_micro_batches
from tfx_accum.components.search.search_tuners import make_tuner

# Runs the pipeline or a command in subprocesses (minutes): `pytest -m "not e2e"` skips it.
pytestmark = pytest.mark.e2e

# A space whose trials differ clearly (learning rates a decade apart), so that the best
# trial does not depend on float noise between processes.
PARALLEL_SPACE = SearchSpace(
    accumulation_steps_choices=(1, 2),
    micro_batch_choices=(16, 32),
    learning_rate_min=1e-4,
    learning_rate_max=1e-1,
    learning_rate_step=10,
    algorithm="random",
    max_trials=4,
    tuning_epochs=1,
)


def run_tuner_component(first_run, work_dir: Path, parallel: int, space=PARALLEL_SPACE):
    result = run_tuner_component_on(first_run[0], work_dir, space, parallel_trials=parallel)
    return result.best, result.rows, result.trials


def _model(values: dict) -> tuple:
    """What decides the trained model: effective batch and learning rate."""
    return values["accumulation_steps"] * values["micro_batch_size"], values["learning_rate"]


def test_two_workers_run_every_trial_once_and_find_the_serial_best(first_run, tmp_path):
    serial_best, serial_rows, _ = run_tuner_component(first_run, tmp_path / "serial", 1)
    start = time.monotonic()
    best, rows, trials = run_tuner_component(first_run, tmp_path / "parallel", 2)
    assert time.monotonic() - start < 300  # a hang guard (a stuck chief), not a speed check
    assert len(trials) == PARALLEL_SPACE.max_trials
    assert all(t["status"] == "COMPLETED" for t in trials), [t["message"] for t in trials]
    assert len({t["trial_id"] for t in trials}) == len(trials)  # none twice
    # The oracle proposes the same trials in either mode, and each trains the same model.
    by_id = {r["trial_id"]: r for r in serial_rows}
    assert {r["trial_id"] for r in rows} == set(by_id)
    for row in rows:
        twin = by_id[row["trial_id"]]
        assert _model(row) == _model(twin)
        assert row["score"] == pytest.approx(twin["score"], abs=2e-3)
        assert row["examples_per_second"] > 0 and row["examples"] > 0
    assert _model(best) == _model(serial_best)


def _worker_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            status = (entry / "status").read_text()
        except OSError:
            continue
        parent = next(line for line in status.splitlines() if line.startswith("PPid:"))
        if b"tuner_worker" in cmdline and int(parent.split()[1]) == os.getpid():
            pids.append(int(entry.name))
    return pids


def test_a_worker_that_dies_fails_only_its_trial(first_run, tmp_path):
    """SIGKILL one worker while it trains: its trial fails, the search completes."""
    killed: list[int] = []

    def kill_a_training_worker():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not killed:
            running = list((tmp_path / "search").glob("*/*/trial_*/trial.json"))
            pids = _worker_pids()
            if running and len(pids) == 2:
                time.sleep(1.0)  # both workers are into their first trials
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_a_training_worker)
    killer.start()
    _, rows, trials = run_tuner_component(first_run, tmp_path, 2)
    killer.join()
    assert killed
    failed = [t for t in trials if t["status"] == "FAILED"]
    assert len(failed) == 1 and "died" in failed[0]["message"], [t["status"] for t in trials]
    assert len(trials) == PARALLEL_SPACE.max_trials
    assert len(rows) == PARALLEL_SPACE.max_trials - 1  # every other trial has a score


def _duplicate_prone_space(**overrides) -> SearchSpace:
    return SearchSpace(
        **{
            "accumulation_steps_choices": (1, 2, 4),
            "micro_batch_choices": (8, 16, 32),
            "learning_rate_min": 0.01,
            "learning_rate_max": 0.1,
            "learning_rate_step": 10,
            "algorithm": "random",
            "max_trials": 8,
            "tuning_epochs": 2,
            # Proposals may repeat a model (the reuse below); by default they never do.
            "distinct_trials": False,
            **overrides,
        }
    )


def _search(space: SearchSpace, directory: Path):
    tuner = make_tuner(space, AccumulationHyperModel(space, _tiny_splits(), "mlp"), str(directory))
    tuner.search(epochs=space.tuning_epochs)
    return tuner, list(tuner.oracle.trials.values())


def _metric(trial, name):
    return trial.metrics.get_last_value(name) if trial.metrics.exists(name) else None


def test_exact_duplicates_reuse_the_score_they_would_have_retrained(tmp_path):
    """Same effective batch and learning rate: the score is reused, and retraining gives it."""
    _, reused_trials = _search(_duplicate_prone_space(), tmp_path / "reuse")
    _, retrained = _search(
        _duplicate_prone_space(reuse_exact_duplicates=False), tmp_path / "retrain"
    )
    reused = [t for t in reused_trials if _metric(t, "reused_from") is not None]
    assert reused  # 8 trials over 5 effective batches x 2 learning rates
    by_id = {t.trial_id: t for t in reused_trials}
    for trial in reused:
        source = by_id[f"{int(_metric(trial, 'reused_from'))}"]
        assert _model(source.hyperparameters.values) == _model(trial.hyperparameters.values)
        assert (
            source.hyperparameters.values["micro_batch_size"]
            != trial.hyperparameters.values["micro_batch_size"]
        )
        assert trial.score == source.score
        assert _metric(trial, "examples_per_second") > 0
        # The same trial retrained (same proposals: the oracle is seeded) scores the same.
        twin = next(t for t in retrained if t.trial_id == trial.trial_id)
        assert twin.hyperparameters.values == trial.hyperparameters.values
        assert twin.score == pytest.approx(trial.score, abs=1e-6)
        assert _metric(twin, "reused_from") is None


def test_the_best_hyperparameters_are_the_fastest_split_and_it_trains_the_same_weights(
    tmp_path,
):
    tuner, trials = _search(_duplicate_prone_space(), tmp_path)
    best = tuner.get_best_hyperparameters()[0].values
    ranked = sorted((t for t in trials if t.status == "COMPLETED"), key=lambda t: -t.score)
    same_model = [t for t in ranked if _model(t.hyperparameters.values) == _model(best)]
    assert same_model[0].score == ranked[0].score
    # Every split of the best effective batch is timed: by a trial, or after the search.
    timed = [r for r in tuner.trial_records() if r.speed and _model(r.values) == _model(best)]
    assert {r.split for r in timed} == {
        (k, m) for k in (1, 2, 4) for m in (8, 16, 32) if k * m == _model(best)[0]
    }
    fastest = max(timed, key=lambda r: r.speed)
    assert (best["accumulation_steps"], best["micro_batch_size"]) == fastest.split

    # The re-split trains the same weights as another split of the effective batch.
    space = _duplicate_prone_space()
    hypermodel = AccumulationHyperModel(space, _tiny_splits(), "mlp")

    def train(k, m):
        hp = keras_tuner.HyperParameters()
        hp.values = {"accumulation_steps": k, "micro_batch_size": m, "learning_rate": 0.05}
        model = hypermodel.build(hp)
        hypermodel.fit(hp, model, epochs=3)
        return [w.copy() for w in model.get_weights()]

    one, other = train(4, 8), train(1, 32)
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(one, other)) < 1e-5
    different = train(2, 8)  # another effective batch: another model
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(one, different)) > 1e-3


def test_micro_batches_that_do_not_fit_are_dropped_before_the_search(tmp_path):
    def simulated_device(limit):
        def try_step(micro):
            if micro > limit:
                raise tf.errors.ResourceExhaustedError(None, None, f"OOM at {micro}")

        return try_step

    assert fitting_micro_batches((8, 16, 32, 64), simulated_device(16)) == ((8, 16), (32, 64))
    assert fitting_micro_batches((8, 16), simulated_device(1000)) == ((8, 16), ())
    with pytest.raises(ValueError, match="smallest micro-batch choice \\(8\\)"):
        fitting_micro_batches((8, 16), simulated_device(4))

    # Through the hypermodel: the real step runs, the device limit is simulated.
    space = _duplicate_prone_space(max_trials=6)
    hypermodel = AccumulationHyperModel(space, _tiny_splits(), "mlp")
    real_step = hypermodel._one_step

    def limited(micro):
        simulated_device(16)(micro)
        real_step(micro)

    assert hypermodel.probe_micro_batches(limited) == (32,)
    tuner = make_tuner(hypermodel.space, hypermodel, str(tmp_path))
    tuner.search(epochs=1)
    proposed = {t.hyperparameters.values["micro_batch_size"] for t in tuner.oracle.trials.values()}
    assert proposed and proposed <= {8, 16}
    assert all(t.status == "COMPLETED" for t in tuner.oracle.trials.values())


def test_max_micro_batch_caps_the_choices_on_any_device():
    assert SearchSpace(
        micro_batch_choices=(8, 16, 32, 64), max_micro_batch=20
    ).micro_batch_choices == (8, 16)
    with pytest.raises(ValueError, match="No micro-batch choice fits `max_micro_batch`=4"):
        SearchSpace(micro_batch_choices=(8, 16), max_micro_batch=4)
