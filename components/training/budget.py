"""The training room's budget rule: how many optimizer updates the Trainer makes.

The Trainer trains the best trial's configuration on as many examples as the best trial's
model saw, so that it ends with that model and its score; without a search (or with
``--train-steps``) it makes ``train_steps`` updates and stops early on its validation split.
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class TrainerBudget:
    """How long the Trainer trains: ``updates`` optimizer updates of one global batch."""

    updates: int
    early_stopping: bool  # on the Trainer's validation split (a budget not the best trial's)
    reason: str


def trainer_budget(
    train_steps: int, trial_examples: int | None, global_batch: int, best_trials: bool
) -> TrainerBudget:
    """The budget rule: the best trial's, unless asked otherwise.

    ``best_trials`` (the default when tuning): as many examples as the best trial's model
    saw (``trial_examples``), so that the Trainer, which trains the best configuration on
    the same examples in the same order, ends with the best trial's model and score.
    Otherwise (``--train-steps`` given, or tuning off): ``train_steps`` updates, stopped
    early when the validation score stops improving.
    """
    if best_trials and trial_examples:
        updates = math.ceil(trial_examples / global_batch)
        return TrainerBudget(updates, False, "the best trial's budget")
    return TrainerBudget(
        train_steps, True, "TrainArgs.num_steps (--train-steps), with early stopping"
    )
