"""The Tuner's HyperModel and tuner classes (tfx_accum.components.search.hypermodel,
tfx_accum.components.search.search_tuners): failed trials, the effective-batch
limit, reused models."""

from __future__ import annotations

import keras_tuner
import numpy as np
import pytest
import tensorflow as tf
from tiny_data import tiny_splits

from tfx_accum.components.config.search_space import SearchSpace
from tfx_accum.components.search.hypermodel import AccumulationHyperModel
from tfx_accum.components.search.search_policy import duplicate_key
from tfx_accum.components.search.search_tuners import AccumulationOracleMixin, make_tuner


class _OutOfMemoryAbove32(AccumulationHyperModel):
    """Simulates a device where micro-batches above 32 do not fit: model.fit raises OOM."""

    def fit(self, hp, model, *args, **kwargs):
        if hp.get("micro_batch_size") <= 32:
            return super().fit(hp, model, *args, **kwargs)

        def out_of_memory(*args, **kwargs):
            raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")

        model.fit = out_of_memory  # this trial only: the model is reused by later trials
        try:
            return super().fit(hp, model, *args, **kwargs)
        finally:
            del model.fit


def _searched(tmp_path, hypermodel_class=AccumulationHyperModel, **space_options):
    """The tuner after a search of ``SearchSpace(**space_options)`` on the tiny splits' MLP,
    each trial ``tuning_epochs`` long."""
    space = SearchSpace(**space_options)
    tuner = make_tuner(space, hypermodel_class(space, tiny_splits(), "mlp"), str(tmp_path))
    tuner.search(epochs=space.tuning_epochs)
    return tuner


def _search(tmp_path, micro_choices, trials):
    return _searched(
        tmp_path,
        _OutOfMemoryAbove32,
        accumulation_steps_choices=(1, 2),
        micro_batch_choices=micro_choices,
        algorithm="random",
        max_trials=trials,
        tuning_epochs=1,
    )


def test_out_of_memory_trials_are_failed_and_the_search_goes_on(tmp_path, capsys):
    tuner = _search(tmp_path, (8, 64), trials=6)
    trials = list(tuner.oracle.trials.values())
    failed = [t for t in trials if t.status == "FAILED"]
    done = [t for t in trials if t.status == "COMPLETED"]
    assert failed and done
    assert all(t.hyperparameters.get("micro_batch_size") == 64 for t in failed)
    assert all(t.hyperparameters.get("micro_batch_size") == 8 for t in done)
    assert "out of memory with micro-batch 64" in failed[0].message
    best = tuner.get_best_hyperparameters()[0].values
    # The Tuner's decision: the best trial's values and its budget, nothing it measured.
    assert set(best) == {"accumulation_steps", "micro_batch_size", "learning_rate", "examples"}
    batch = 8 * best["accumulation_steps"]
    assert best["examples"] == -(-96 // batch) * batch  # 1 epoch of 96 rows in whole batches
    out = capsys.readouterr().out
    assert "[tuner] trial" in out and "[FAILED]" in out and "[COMPLETED]" in out


def test_search_fails_only_when_every_trial_fails(tmp_path):
    with pytest.raises(RuntimeError, match="All 2 tuning trials failed"):
        _search(tmp_path, (64,), trials=2)


@pytest.mark.parametrize("algorithm", ["random", "bayesian", "hyperband"])
def test_max_effective_batch_shapes_the_proposals(algorithm, tmp_path):
    """Combinations above the limit are never proposed, so no trial fails for it."""
    tuner = _searched(
        tmp_path,
        accumulation_steps_choices=(1, 4),
        micro_batch_choices=(8, 16),
        algorithm=algorithm,
        max_trials=5,
        tuning_epochs=2,
        max_effective_batch=16,
    )
    trials = list(tuner.oracle.trials.values())
    assert trials
    for trial in trials:
        values = trial.hyperparameters.values
        assert values["accumulation_steps"] * values["micro_batch_size"] <= 16, values
        assert trial.status == "COMPLETED", (trial.status, trial.message)
    # TFX ranks the trials with get_best_trials(oracle.max_trials), None for Hyperband.
    assert len(tuner.oracle.get_best_trials(tuner.oracle.max_trials)) == len(trials)


@pytest.mark.parametrize("algorithm", ["random", "bayesian"])
def test_a_search_starts_at_the_middle_of_the_space(algorithm, tmp_path):
    """The first trial trains the middle effective batch (64 of 8..512, as 1 x 64) and the
    learning rate in the middle of the log range (1e-4..1e-1: 10**-2.5, on the grid);
    the second is the algorithm's own, another model."""
    tuner = _searched(tmp_path, algorithm=algorithm, max_trials=2, tuning_epochs=1)
    first, second = (tuner.oracle.trials[i].hyperparameters.values for i in ("0", "1"))
    assert (first["accumulation_steps"], first["micro_batch_size"]) == (1, 64)
    assert first["learning_rate"] == pytest.approx(10**-2.5)
    assert duplicate_key(second) != duplicate_key(first)
    off = _searched(
        tmp_path / "off",
        algorithm=algorithm,
        max_trials=1,
        tuning_epochs=1,
        start_at_centre=False,
    )
    drawn = off.oracle.trials["0"].hyperparameters.values
    assert duplicate_key(drawn) != duplicate_key(first)  # the seeded draw (seed 42)


def test_a_reused_trial_model_trains_like_a_fresh_one():
    """Every trial reuses one traced model, reset to the same initial state and given the
    trial's k: a trial after another k trains what a fresh model trains."""
    space = SearchSpace(accumulation_steps_choices=(2, 4), micro_batch_choices=(8, 16))

    def hp(micro, lr, k=2):
        values = keras_tuner.HyperParameters()
        values.Fixed("accumulation_steps", k)
        values.Fixed("micro_batch_size", micro)
        values.Fixed("learning_rate", lr)
        return values

    def train(hypermodel, values):
        model = hypermodel.build(values)
        hypermodel.fit(values, model, epochs=2)
        return [w.copy() for w in model.get_weights()], int(model.optimizer.iterations)

    reused = AccumulationHyperModel(space, tiny_splits(), "mlp")
    train(reused, hp(16, 0.05, k=4))
    second, updates = train(reused, hp(8, 0.01))
    assert len(reused._models) == 1  # one model for every k
    assert reused.trace_count == 1  # and one traced step
    fresh, fresh_updates = train(AccumulationHyperModel(space, tiny_splits(), "mlp"), hp(8, 0.01))
    assert updates == fresh_updates == 2 * 6  # 96 rows at effective batch 2 x 8 = 16
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(second, fresh)) < 1e-6


def test_the_default_search_trains_8_distinct_models_with_one_traced_step(tmp_path):
    """The default space (k 1-8, m 8-64, a log range of learning rates), 8 trials: 8
    distinct models (no trial repeats another's effective batch and learning rate), and
    the training step is traced once (counted, not timed), the timing of the best
    effective batch's other splits included."""
    space = SearchSpace(tuning_epochs=1)
    hypermodel = AccumulationHyperModel(space, tiny_splits(), "mlp")
    tuner = make_tuner(space, hypermodel, str(tmp_path))
    tuner.search(epochs=1)
    trials = list(make_tuner(space, hypermodel, str(tmp_path), resume=True).oracle.trials.values())
    assert len(trials) == space.max_trials == 8
    assert all(t.status == "COMPLETED" for t in trials)
    assert len({duplicate_key(t.hyperparameters.values) for t in trials}) == 8
    best = tuner.oracle.get_best_trials(1)[0].hyperparameters.values
    effective = best["accumulation_steps"] * best["micro_batch_size"]
    timed = {(r.split, r.trial_id) for r in tuner.trial_records() if r.speed}
    splits_in_space = {
        (k, m)
        for k in space.accumulation_steps_choices
        for m in space.micro_batch_choices
        if k * m == effective
    }
    assert splits_in_space <= {split for split, _ in timed}  # every split of the best timed
    splits = {
        (t.hyperparameters.get("accumulation_steps"), t.hyperparameters.get("micro_batch_size"))
        for t in trials
    }
    assert len({k for k, _ in splits}) > 1 and len({m for _, m in splits}) > 1
    assert hypermodel.trace_count == 1


@pytest.mark.parametrize("algorithm", ["random", "hyperband"])
def test_trials_write_checkpoints_only_where_hyperband_reads_them(algorithm, tmp_path):
    """Random and Bayesian trials train without Keras Tuner's best-epoch checkpoint (TFX's
    Tuner never loads a trial's model); Hyperband's continued trials start from one."""
    tuner = _searched(
        tmp_path,
        accumulation_steps_choices=(1, 2),
        micro_batch_choices=(8, 16),
        algorithm=algorithm,
        max_trials=3,
        tuning_epochs=2,
    )
    completed = [t for t in tuner.oracle.trials.values() if t.status == "COMPLETED"]
    assert completed and all(t.score is not None for t in completed)
    checkpoints = list(tmp_path.rglob("checkpoint*.h5"))
    assert bool(checkpoints) == (algorithm == "hyperband"), checkpoints


def test_an_identical_trial_reuses_score_speed_and_memory_without_training(tmp_path):
    """Bayesian optimization may propose a finished point again: the same k, m and
    learning rate train the same model at the same speed, so nothing runs."""
    tuner = _searched(
        tmp_path,
        accumulation_steps_choices=(2,),
        micro_batch_choices=(8,),
        max_trials=1,
        tuning_epochs=1,
    )
    hypermodel = tuner.hypermodel
    (source,) = tuner.oracle.trials.values()

    def no_training(*args, **kwargs):
        raise AssertionError("an identical trial was trained or measured")

    hypermodel.fit = hypermodel.measure_speed = no_training
    again = keras_tuner.engine.trial.Trial(source.hyperparameters.copy(), trial_id="1")
    result = tuner.run_trial(again)
    assert result[hypermodel.objective] == source.score
    for name in ("examples_per_second", "peak_memory_mb", "examples"):
        assert result[name] == source.metrics.get_last_value(name)
    assert result["reused_from"] == float(int(source.trial_id))


class _Repeats(keras_tuner.Oracle):
    """An algorithm that proposes the same configuration every time."""

    def populate_space(self, trial_id):
        return {"status": "RUNNING", "values": self.hyperparameters.values | _SAME}


_SAME = {"accumulation_steps": 1, "micro_batch_size": 8, "learning_rate": 0.01}


class _RepeatingOracle(AccumulationOracleMixin, _Repeats):
    num_initial_points = 1  # Bayesian-like: one random draw, then the algorithm's own


def _proposals(tmp_path, distinct: bool, max_trials: int) -> list:
    space = SearchSpace(
        accumulation_steps_choices=(1, 2),
        micro_batch_choices=(8, 16),
        learning_rate_min=1e-3,
        learning_rate_max=1e-1,
        learning_rate_step=10,
        algorithm="bayesian",
        max_trials=max_trials,
        distinct_trials=distinct,
        start_at_centre=False,  # every proposal the algorithm's (the start: its own test)
    )
    oracle = _RepeatingOracle(
        objective=keras_tuner.Objective("val_accuracy", "max"), max_trials=max_trials, space=space
    )
    oracle._set_project_dir(str(tmp_path), "p")
    space.declare(oracle.hyperparameters)
    proposed = []
    while (trial := oracle.create_trial("tuner0")).status == "RUNNING":
        proposed.append(dict(trial.hyperparameters.values))
        oracle.update_trial(trial.trial_id, {"val_accuracy": 0.5})
        trial.status = "COMPLETED"
        oracle.end_trial(trial)
    return proposed


def test_a_repeated_proposal_does_not_spend_a_trial(tmp_path):
    """An algorithm that repeats itself still trains max_trials distinct models, then stops
    when the space has none left; with distinct_trials off, the repeats are its trials."""
    proposed = _proposals(tmp_path / "distinct", True, max_trials=5)
    assert _SAME in proposed[:2]  # the algorithm's own proposal, once
    assert len({duplicate_key(v) for v in proposed}) == len(proposed) == 5
    every = _proposals(tmp_path / "all", True, max_trials=20)
    assert len({duplicate_key(v) for v in every}) == len(every) == 3 * 3  # 3 batches x 3 rates
    repeats = _proposals(tmp_path / "repeats", False, max_trials=3)
    assert repeats == [_SAME] * 3


def test_capped_trials_train_the_same_subsample_and_the_search_ranks_on_it(tmp_path):
    """96 training rows x 2 epochs above a cap of 100 examples: every trial trains on 2 x 50
    examples (whole batches), the same first examples of the same seeded stream."""
    space = SearchSpace(
        accumulation_steps_choices=(1, 2),
        micro_batch_choices=(8,),
        learning_rate_step=10,
        algorithm="random",
        max_trials=3,
        tuning_epochs=2,
        max_trial_examples=100,
    )
    hypermodel = AccumulationHyperModel(space, tiny_splits(), "mlp")
    tuner = make_tuner(space, hypermodel, str(tmp_path))
    tuner.search(epochs=space.tuning_epochs)
    for trial in tuner.oracle.trials.values():
        values = trial.hyperparameters.values
        batch = values["accumulation_steps"] * values["micro_batch_size"]
        steps = -(-50 // batch)
        assert trial.metrics.get_last_value("examples") == 2 * steps * batch < 2 * 96


def test_capped_trials_are_scored_on_the_same_first_held_out_examples():
    """With the cap on, a trial is scored on at most a quarter of max_trial_examples
    held-out examples: here 25 of the 96."""
    import dataclasses

    space = SearchSpace(tuning_epochs=1, max_trial_examples=100)
    splits = dataclasses.replace(tiny_splits(), validation_size=96)
    hypermodel = AccumulationHyperModel(space, splits, "mlp")
    hp = keras_tuner.HyperParameters()
    hp.values = {"accumulation_steps": 1, "micro_batch_size": 8, "learning_rate": 0.01}
    model = hypermodel.build(hp)
    seen = []

    def recording_fit(*args, validation_data=None, **kwargs):
        seen.append(sum(int(x[next(iter(x))].shape[0]) for x, _ in validation_data))
        raise keras_tuner.errors.FailedTrialError("recorded")

    model.fit = recording_fit
    with pytest.raises(keras_tuner.errors.FailedTrialError, match="recorded"):
        hypermodel.fit(hp, model)
    del model.fit
    assert seen == [25]


def test_a_trials_score_records_the_held_out_examples_it_is_on(tmp_path):
    """With a capped budget the trials are scored on the first held-out examples; each
    trial records how many (the Trainer validates the best trial's model on as many)."""
    import dataclasses

    from tfx_accum.components.config.trial_records import TRIAL_SCORED_ON

    space = SearchSpace(
        accumulation_steps_choices=(1,),
        micro_batch_choices=(8,),
        algorithm="random",
        max_trials=1,
        tuning_epochs=1,
        max_trial_examples=160,  # scored on 40 of the 96 held-out examples
    )
    splits = dataclasses.replace(tiny_splits(), validation_size=96)
    tuner = make_tuner(space, AccumulationHyperModel(space, splits, "mlp"), str(tmp_path))
    tuner.search(epochs=1)
    (trial,) = tuner.oracle.trials.values()
    assert trial.metrics.get_last_value(TRIAL_SCORED_ON) == 40
    assert tuner.get_best_hyperparameters()[0].values[TRIAL_SCORED_ON] == 40
