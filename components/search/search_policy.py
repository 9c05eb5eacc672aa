"""The search's exactness-aware policy, as plain functions over hyperparameter values.

Accumulation is exact, so the split of an effective batch ``B = k x m`` into ``k``
micro-batches of ``m`` changes memory and speed, never the trained model. The search uses
that fact in three places, all decided here (no TensorFlow, no Keras Tuner: unit-tested in
milliseconds, used by the Tuner's oracle and tuner classes and by the Trainer):

- :func:`duplicate_key`: two trials with the same key train the same model, so a trial
  whose key a finished trial has reuses its score (:func:`finished_duplicate`);
- :func:`choose_trainer_split`: among the trials that train the best trial's model, the
  fastest measured split goes to the Trainer;
- ``search_space.within_effective_batch_limit`` (the space's rule): a proposal above
``max_effective_batch`` becomes
  the nearest combination that fits;
- :func:`untried_configuration`: what the search proposes when its algorithm repeats a
  configuration already trained (a trial spent on a repeat would train nothing new);
- :func:`other_splits`: the splits of the best effective batch that no trial timed, timed
  after the search so that the Trainer gets the fastest;
- :func:`centre_configuration`: the first trial of a random or Bayesian search, the
  middle of the space (effective batch and learning rate), not a random draw.

And the budget rule: every trial sees the same number of training examples
(:func:`steps_per_epoch`), whatever its effective batch.

Example:

```python
records = [TrialRecord("0", "COMPLETED", 0.9, {"accumulation_steps": 4,
           "micro_batch_size": 8, "learning_rate": 1e-3}, speed=500.0), ...]
choice = choose_trainer_split(records)
choice.values  # the best trial's values with the fastest split of its effective batch
```
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any

from tfx_accum.components.config.hyperparameters import (
    HP_ACCUMULATION_STEPS,
    HP_LEARNING_RATE,
    HP_MICRO_BATCH_SIZE,
)
from tfx_accum.components.config.search_space import exceeds_effective_batch_limit, fitting_splits
from tfx_accum.components.config.trial_records import (
    RESPLIT_FROM_SPLIT,
    RESPLIT_FROM_TRIAL,
    RESPLIT_SPEEDUP,
    TRIAL_EXAMPLES,
    TRIAL_RECORDED,
    TRIAL_SCORED_ON,
)

COMPLETED = "COMPLETED"  # Keras Tuner's TrialStatus.COMPLETED


@dataclasses.dataclass(frozen=True)
class TrialRecord:
    """What the policy needs of one trial (built from a Keras Tuner trial by the tuner)."""

    trial_id: str
    status: str
    score: float | None
    values: dict[str, Any]
    speed: float | None = None  # training examples per second
    reused_from: str | None = None  # the trial whose score this one reused
    examples: float | None = None  # training examples the trial's model saw in all
    scored_examples: float | None = None  # held-out examples its score is on

    @property
    def scored(self) -> bool:
        return self.status == COMPLETED and self.score is not None

    @property
    def split(self) -> tuple[Any, Any]:
        return self.values.get(HP_ACCUMULATION_STEPS), self.values.get(HP_MICRO_BATCH_SIZE)


def duplicate_key(values: dict[str, Any]) -> tuple:
    """What determines the model a trial trains, given exact accumulation.

    Two trials with the same effective batch ``k x m``, learning rate and every other value
    (Hyperband's epochs, a model function's own), in one search (same initial weights and
    data order), train the same model: the split between ``k`` and ``m`` changes memory and
    speed only. What a trial records beside its values (speed, memory, ...) is left out.
    """
    k, m = values.get(HP_ACCUMULATION_STEPS), values.get(HP_MICRO_BATCH_SIZE)
    rest = tuple(
        sorted(
            (name, round(value, 12) if isinstance(value, float) else value)
            for name, value in values.items()
            if name not in (HP_ACCUMULATION_STEPS, HP_MICRO_BATCH_SIZE)
            and name not in TRIAL_RECORDED
        )
    )
    return (k * m if k and m else None, rest)


def finished_duplicate(
    trial_id: str, values: dict[str, Any], finished: Iterable[TrialRecord]
) -> TrialRecord | None:
    """A scored trial other than ``trial_id`` that trains the same model, or None."""
    key = duplicate_key(values)
    for record in finished:
        if record.trial_id != trial_id and record.scored and duplicate_key(record.values) == key:
            return record
    return None


@dataclasses.dataclass(frozen=True)
class TrainerChoice:
    """The best trial, and the values the Trainer gets (its fastest exact split)."""

    best: TrialRecord
    fastest: TrialRecord
    best_split_speed: float | None = None  # the best trial's split's, where it was timed

    @property
    def resplit(self) -> bool:
        return self.fastest.split != self.best.split

    @property
    def speedup(self) -> float:
        own = self.best_split_speed or self.best.speed or 0.0
        return (self.fastest.speed or 0.0) / max(own, 1e-9)

    @property
    def values(self) -> dict[str, Any]:
        """The best trial's values, with the fastest split (and where it came from) and the
        examples its model saw (the Trainer's default budget)."""
        values = dict(self.best.values)
        if self.best.examples is not None:
            values[TRIAL_EXAMPLES] = int(self.best.examples)
        if self.best.scored_examples is not None:
            values[TRIAL_SCORED_ON] = int(self.best.scored_examples)
        if self.resplit:
            k, m = self.best.split
            values[HP_ACCUMULATION_STEPS], values[HP_MICRO_BATCH_SIZE] = self.fastest.split
            values[RESPLIT_FROM_TRIAL] = self.best.trial_id
            values[RESPLIT_FROM_SPLIT] = f"{k} x {m}"
            values[RESPLIT_SPEEDUP] = round(self.speedup, 3)
        return values


def choose_trainer_split(
    records: Iterable[TrialRecord], direction: str = "max"
) -> TrainerChoice | None:
    """The best trial and the fastest trial that trains the same model; None if none scored.

    ``direction``: ``"max"`` when a higher score is better (accuracy), ``"min"`` (loss).

    The fastest has the best trial's :func:`duplicate_key` (same effective batch and
    learning rate) and the highest measured examples/s, so it is feasible (it ran) and,
    because accumulation is exact, trains the same weights faster. Ties on the score: a
    trial that was trained beats one that reused its score, then the earlier trial.
    """
    scored = [r for r in records if r.scored]
    if not scored:
        return None
    sign = 1.0 if direction == "max" else -1.0
    best = max(scored, key=lambda r: (sign * r.score, r.reused_from is None, -int(r.trial_id)))
    key = duplicate_key(best.values)
    same = [r for r in scored if duplicate_key(r.values) == key]
    fastest = max(same, key=lambda r: (r.speed or 0.0, r is best))
    own = max((r.speed or 0.0 for r in same if r.split == best.split), default=0.0)
    return TrainerChoice(best, fastest, own or None)


def other_splits(
    k: int,
    m: int,
    accumulation_steps_choices: Sequence[int],
    micro_batch_choices: Sequence[int],
    timed: Iterable[tuple[int, int]] = (),
) -> list[tuple[int, int]]:
    """The splits ``(k', m')`` of the effective batch ``k x m`` in the space, ``(k, m)`` and
    those in ``timed`` left out, largest micro-batch first (usually the fastest)."""
    skip = {(k, m), *timed}
    return sorted(
        (
            (kk, mm)
            for kk in accumulation_steps_choices
            for mm in micro_batch_choices
            if kk * mm == k * m and (kk, mm) not in skip
        ),
        key=lambda split: -split[1],
    )


def untried_configuration(
    proposal: dict[str, Any],
    tried: Iterable[dict[str, Any]],
    accumulation_steps_choices: Sequence[int],
    micro_batch_choices: Sequence[int],
    learning_rates: Sequence[float],
    limit: int | None,
    rng,
) -> dict[str, Any] | None:
    """``proposal`` with ``k``, ``m`` and the learning rate replaced by a configuration no
    trial in ``tried`` trains (another :func:`duplicate_key`), or None when none is left.

    The untried models (effective batch, learning rate) are equally likely, then their
    splits; ``rng`` is a seeded ``random.Random`` (the search stays reproducible). Every
    other value (a model function's own) is the proposal's.
    """
    taken = {duplicate_key(values) for values in tried}
    by_model: dict[tuple, list[dict[str, Any]]] = {}
    for k in accumulation_steps_choices:
        for m in micro_batch_choices:
            if exceeds_effective_batch_limit(k, m, limit):
                continue
            for lr in learning_rates:
                values = {
                    **proposal,
                    HP_ACCUMULATION_STEPS: k,
                    HP_MICRO_BATCH_SIZE: m,
                    HP_LEARNING_RATE: lr,
                }
                key = duplicate_key(values)
                if key not in taken:
                    by_model.setdefault(key, []).append(values)
    if not by_model:
        return None
    splits = by_model[rng.choice(sorted(by_model, key=repr))]
    return rng.choice(splits)


def centre_configuration(
    proposal: dict[str, Any],
    accumulation_steps_choices: Sequence[int],
    micro_batch_choices: Sequence[int],
    limit: int | None,
    learning_rate: float,
) -> dict[str, Any]:
    """``proposal`` with ``k`` and ``m`` at the middle effective batch, and ``learning_rate``
    (the middle of its range, as the caller's hyperparameter places it).

    The middle effective batch is the ``k x m`` (within ``limit``) nearest, in log scale,
    to the geometric mean of the smallest and the largest (the smaller on a tie), split with
    the largest micro-batch (the fewest accumulation steps, usually the fastest). Ax
    (Meta's adaptive experimentation platform) starts the same way by default
    (``initialize_with_center``): a first trial away from the space's edges, where a random
    draw often lands on a learning rate too small or too large for the effective batch and
    the budget. Every other value (a model function's own) is the proposal's.
    """
    splits = fitting_splits(accumulation_steps_choices, micro_batch_choices, limit)
    batches = sorted({k * m for k, m in splits})
    ends = batches[0] * batches[-1]  # b is as far from the middle as ends / b: a tie
    batch = min(batches, key=lambda b: (round(abs(math.log(b * b / ends)), 12), b))
    k, m = min((split for split in splits if split[0] * split[1] == batch), key=lambda s: s[0])
    return {
        **proposal,
        HP_ACCUMULATION_STEPS: k,
        HP_MICRO_BATCH_SIZE: m,
        HP_LEARNING_RATE: learning_rate,
    }


def steps_per_epoch(examples: int, global_batch: int) -> int:
    """The budget rule: an epoch of ``examples`` examples, rounded up to whole batches."""
    return math.ceil(examples / global_batch)
