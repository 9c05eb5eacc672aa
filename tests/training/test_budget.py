"""The Trainer's budget rule (tfx_accum.components.training.budget)."""

from __future__ import annotations

from tfx_accum.components.training.budget import trainer_budget


def test_the_trainer_trains_the_best_trials_budget_unless_asked_otherwise():
    best = trainer_budget(300, trial_examples=4 * 37 * 32, global_batch=32, best_trials=True)
    assert (best.updates, best.early_stopping) == (4 * 37, False)
    asked = trainer_budget(500, trial_examples=4 * 37 * 32, global_batch=32, best_trials=False)
    assert (asked.updates, asked.early_stopping) == (500, True)
    untuned = trainer_budget(300, trial_examples=None, global_batch=32, best_trials=True)
    assert (untuned.updates, untuned.early_stopping) == (300, True)
