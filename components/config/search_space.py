"""The joint search space of accumulation steps, micro-batch size and learning rate.

It travels from the pipeline to the Tuner and Trainer modules through TFX's
``custom_config`` (a JSON dict), and is validated on both ends with errors that say what
is wrong and how to fix it.

Example:

```python
space = SearchSpace(accumulation_steps_choices=(1, 2, 4), micro_batch_choices=(16, 32),
                    learning_rate_min=1e-3, learning_rate_max=1e-1)
custom_config = {"search_space": space.to_config()}
SearchSpace.from_config(custom_config["search_space"])  # validates again
```
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from tfx_accum.components.accumulation.arguments import (
    validate_positive_float,
    validate_positive_int,
)
from tfx_accum.components.config.hyperparameters import (
    HP_ACCUMULATION_STEPS,
    HP_LEARNING_RATE,
    HP_MICRO_BATCH_SIZE,
)
from tfx_accum.components.config.setting_words import closest_hint

ALGORITHMS = ("bayesian", "random", "hyperband")
DEFAULT_MAX_TRIAL_EXAMPLES = 200_000  # a trial's examples in all, when not given


def exceeds_effective_batch_limit(k: int, m: int, limit: int | None) -> bool:
    """The one rule of ``max_effective_batch``: ``k x m`` above it is not trained."""
    return limit is not None and k * m > limit


def fitting_splits(
    accumulation_steps_choices: Sequence[int], micro_batch_choices: Sequence[int], limit: int | None
) -> list[tuple[int, int]]:
    """Every ``(k, m)`` of the choices within ``limit``; ``ValueError`` when none is."""
    fits = [
        (k, m)
        for k in accumulation_steps_choices
        for m in micro_batch_choices
        if not exceeds_effective_batch_limit(k, m, limit)
    ]
    if not fits:
        raise ValueError(f"No accumulation steps x micro-batch combination fits {limit}.")
    return fits


def within_effective_batch_limit(
    values: dict[str, Any],
    accumulation_steps_choices: Sequence[int],
    micro_batch_choices: Sequence[int],
    limit: int | None,
) -> dict[str, Any]:
    """``values`` with ``k x m`` within ``limit``.

    A proposal above the limit becomes the nearest one that fits: the same micro-batch with
    the largest accumulation step count that fits, else the largest effective batch that
    fits. The learning rate and every other value are kept. Raises ``ValueError`` when no
    combination fits (``SearchSpace`` refuses such a space up front).
    """
    k, m = values.get(HP_ACCUMULATION_STEPS), values.get(HP_MICRO_BATCH_SIZE)
    if k is None or m is None or not exceeds_effective_batch_limit(k, m, limit):
        return values
    fits = fitting_splits(accumulation_steps_choices, micro_batch_choices, limit)
    k, m = max(fits, key=lambda pair: (pair[1] == m, pair[0] * pair[1], pair[1]))
    return {**values, HP_ACCUMULATION_STEPS: k, HP_MICRO_BATCH_SIZE: m}


@dataclasses.dataclass(frozen=True)
class TrialBudget:
    """What every trial trains on: ``epochs`` epochs of ``examples_per_epoch`` examples;
    ``uncapped``: the examples whole epochs would have been, when the cap applies."""

    examples_per_epoch: int
    epochs: int
    uncapped: int | None
    ranking_examples: int | None = None  # held-out examples that score a trial (None: all)
    validation_examples: int = 0  # held-out examples there are

    @property
    def examples(self) -> int:
        return self.examples_per_epoch * self.epochs

    def describe_cap(self) -> str | None:
        """One line when the cap applies, saying so and how to train whole epochs."""
        if self.uncapped is None and self.ranking_examples is None:
            return None
        trains = (
            f"each trial trains on {self.examples:,} examples ({self.epochs} x "
            f"{self.examples_per_epoch:,}), not the {self.uncapped:,} of {self.epochs} whole "
            "epochs"
            if self.uncapped is not None
            else f"each trial trains on {self.epochs} whole epochs"
        )
        ranks = (
            f" and is scored on the first {self.ranking_examples:,} of the "
            f"{self.validation_examples:,} held-out examples"
            if self.ranking_examples is not None
            else ""
        )
        return (
            f"[tuner] {trains}{ranks}: the same seeded subsample for every trial, which "
            "ranks the configurations at a fraction of the cost; the Trainer trains the best "
            "for as many (--train-steps for more). Whole epochs and every held-out example: "
            "--trial-examples 0, or --tuning-epochs N given"
        )


def _positive_int_choices(name: str, values: Any) -> tuple[int, ...]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
        raise ValueError(
            f"`{name}` must be a non-empty list of positive integers, e.g. [1, 2, 4, 8]. "
            f"Received: {name}={values!r}."
        )
    result = []
    for value in values:
        try:
            result.append(validate_positive_int(name, value))
        except (TypeError, ValueError):
            raise ValueError(
                f"`{name}` must contain only positive integers (>= 1). "
                f"Received: {name}={list(values)!r}; {value!r} is not."
            ) from None
    return tuple(sorted(set(result)))


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """What Keras Tuner searches, and how each trial is budgeted.

    Attributes:
        accumulation_steps_choices: candidate accumulation steps (k): micro-batches per
            optimizer update.
        micro_batch_choices: candidate micro-batch sizes (m): samples per forward pass.
        learning_rate_min, learning_rate_max: log-uniform learning-rate range.
        learning_rate_step: the factor between neighbouring learning rates the search may
            propose (``learning_rate_min * step**i``); ``None``: any value in the range.
            A grid lets two trials share a learning rate, and so be exact duplicates.
        max_effective_batch: combinations with k * m above this are never proposed
            (``None``: no limit).
        max_micro_batch: micro-batch choices above this are dropped before the search
            (``None``: all; on a GPU the memory probe also drops what does not fit).
        distinct_trials: random and Bayesian search propose only models no trial trains
            yet (another effective batch or learning rate): ``max_trials`` trials train
            ``max_trials`` distinct models (fewer when the space has fewer). Hyperband
            runs configurations again on purpose.
        start_at_centre: the first trial of a random or Bayesian search trains the middle
            of the space (``search_policy.centre_configuration``: the middle effective
            batch and learning rate), not a random draw; later trials are the
            algorithm's.
        reuse_exact_duplicates: a trial with the effective batch, learning rate and data
            order of a finished trial trains the same model (accumulation is exact): it
            reuses that trial's score and only measures its own speed and memory (with
            ``distinct_trials``, only Hyperband proposes such trials).
        algorithm: ``"bayesian"`` (default), ``"random"`` or ``"hyperband"``.
        max_trials: number of trials (Bayesian and random search).
        tuning_epochs: epochs per trial; an epoch is ``examples_per_epoch`` examples.
        examples_per_epoch: training examples per tuning epoch, identical for every trial
            whatever its effective batch (``None``: the size of the training split, within
            ``max_trial_examples``). Given, it is the budget: no cap applies.
        max_trial_examples: the cap on a trial's examples in all epochs when
            ``examples_per_epoch`` is not given (``None``: whole epochs). Trials only rank
            configurations: on a large training split, whole epochs would cost more than
            training the final model several times. Capped, every trial sees the same
            first examples of the same seeded shuffle (see :meth:`trial_budget`).
        seed: seed of the search and of the trial data order.
    """

    accumulation_steps_choices: tuple[int, ...] = (1, 2, 4, 8)
    micro_batch_choices: tuple[int, ...] = (8, 16, 32, 64)
    learning_rate_min: float = 1e-4
    learning_rate_max: float = 1e-1
    learning_rate_step: float | None = 10**0.25
    max_effective_batch: int | None = None
    max_micro_batch: int | None = None
    distinct_trials: bool = True
    start_at_centre: bool = True
    reuse_exact_duplicates: bool = True
    algorithm: str = "bayesian"
    max_trials: int = 8
    tuning_epochs: int = 4
    examples_per_epoch: int | None = None
    max_trial_examples: int | None = DEFAULT_MAX_TRIAL_EXAMPLES
    seed: int = 42

    def __post_init__(self) -> None:
        for name in _CHOICES:
            object.__setattr__(self, name, _positive_int_choices(name, getattr(self, name)))
        for name in ("learning_rate_min", "learning_rate_max"):
            validate_positive_float(name, getattr(self, name))
        if self.learning_rate_min >= self.learning_rate_max:
            raise ValueError(
                "The learning-rate range is empty: `learning_rate_min` must be smaller than "
                f"`learning_rate_max`. Received: learning_rate_min={self.learning_rate_min}, "
                f"learning_rate_max={self.learning_rate_max}."
            )
        if self.learning_rate_step is not None and (
            isinstance(self.learning_rate_step, bool)
            or not isinstance(self.learning_rate_step, int | float)
            or self.learning_rate_step <= 1
        ):
            raise ValueError(
                "`learning_rate_step` must be a factor > 1 (e.g. 1.78 for four values per "
                f"decade) or None. Received: learning_rate_step={self.learning_rate_step!r}."
            )
        for name in ("distinct_trials", "start_at_centre", "reuse_exact_duplicates"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"`{name}` must be true or false. Received: {getattr(self, name)!r}."
                )
        if self.algorithm not in ALGORITHMS:
            raise ValueError(
                f"`algorithm` must be one of {', '.join(ALGORITHMS)}. "
                f"Received: algorithm={self.algorithm!r}."
            )
        for name in ("max_trials", "tuning_epochs"):
            _as_value_error(validate_positive_int, name, getattr(self, name))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"`seed` must be an integer >= 0. Received: seed={self.seed!r}.")
        for name in (
            "max_effective_batch",
            "max_micro_batch",
            "examples_per_epoch",
            "max_trial_examples",
        ):
            if getattr(self, name) is not None:
                _as_value_error(validate_positive_int, name, getattr(self, name))
        if self.max_micro_batch is not None:
            kept = tuple(m for m in self.micro_batch_choices if m <= self.max_micro_batch)
            if not kept:
                raise ValueError(
                    f"No micro-batch choice fits `max_micro_batch`={self.max_micro_batch}: the "
                    f"smallest is {min(self.micro_batch_choices)}. Raise the limit or add "
                    "smaller choices."
                )
            object.__setattr__(self, "micro_batch_choices", kept)
        k, m = min(self.accumulation_steps_choices), min(self.micro_batch_choices)
        if exceeds_effective_batch_limit(k, m, self.max_effective_batch):
            raise ValueError(
                f"No combination fits `max_effective_batch`={self.max_effective_batch}: the "
                f"smallest effective batch is {k} x {m} = {k * m}. Raise the limit or add "
                "smaller choices."
            )

    @property
    def largest_effective_batch(self) -> int:
        """The largest ``k * m`` a trial may train at (within ``max_effective_batch``)."""
        largest = max(self.accumulation_steps_choices) * max(self.micro_batch_choices)
        return min(largest, self.max_effective_batch or largest)

    def trial_budget(self, training_examples: int, validation_examples: int = 0) -> TrialBudget:
        """A trial's examples per epoch on a training split of ``training_examples``, and
        the held-out examples that score it (of ``validation_examples``).

        With the cap on, a trial is also scored on at most a quarter of
        ``max_trial_examples`` held-out examples (50,000 by default): scoring every epoch
        on a fifth of a 2M-row split cost a trial more than its training did.
        """
        ranking = None
        if self.max_trial_examples is not None:
            most = max(1, self.max_trial_examples // 4)
            ranking = most if validation_examples > most else None
        if self.examples_per_epoch is not None:
            return TrialBudget(
                self.examples_per_epoch, self.tuning_epochs, None, ranking, validation_examples
            )
        whole = self.tuning_epochs * training_examples
        if self.max_trial_examples is None or whole <= self.max_trial_examples:
            return TrialBudget(
                training_examples, self.tuning_epochs, None, ranking, validation_examples
            )
        per_epoch = max(1, math.ceil(self.max_trial_examples / self.tuning_epochs))
        return TrialBudget(per_epoch, self.tuning_epochs, whole, ranking, validation_examples)

    def declare(self, hp) -> tuple[int, int, float]:
        """Declares the three hyperparameters in ``hp`` (a ``keras_tuner.HyperParameters``);
        returns their values for this trial: ``(k, m, learning_rate)``.

        The one declaration of the search space: the Tuner's HyperModel calls it.
        """
        k = hp.Choice(HP_ACCUMULATION_STEPS, list(self.accumulation_steps_choices), ordered=True)
        m = hp.Choice(HP_MICRO_BATCH_SIZE, list(self.micro_batch_choices), ordered=True)
        return k, m, self.declare_learning_rate(hp)

    def declare_learning_rate(self, hp) -> float:
        """Declares the learning rate alone in ``hp`` (log-spaced steps); returns its value."""
        return hp.Float(
            HP_LEARNING_RATE,
            self.learning_rate_min,
            self.learning_rate_max,
            step=self.learning_rate_step,
            sampling="log",
        )

    def within_limit(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` moved within ``max_effective_batch`` (see ``search_policy``)."""
        return within_effective_batch_limit(
            values,
            self.accumulation_steps_choices,
            self.micro_batch_choices,
            self.max_effective_batch,
        )

    def with_micro_batches(self, choices: Sequence[int]) -> SearchSpace:
        """This space with only ``choices`` as micro-batch sizes (after the memory probe)."""
        return dataclasses.replace(self, micro_batch_choices=tuple(choices))

    def to_config(self) -> dict[str, Any]:
        config = dataclasses.asdict(self)
        for name in _CHOICES:
            config[name] = list(getattr(self, name))
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any] | None) -> SearchSpace:
        config = dict(config or {})
        known = {f.name for f in dataclasses.fields(cls)}
        for key in config:
            if key not in known:
                raise ValueError(
                    f"custom_config['search_space'] key {key!r} is not a search-space setting: "
                    f"{closest_hint(key, known)}the settings are {', '.join(sorted(known))}."
                )
        for name in _CHOICES:
            if name in config and isinstance(config[name], list):
                config[name] = tuple(config[name])
        return cls(**config)


_CHOICES = ("accumulation_steps_choices", "micro_batch_choices")


def _as_value_error(check, name: str, value: Any) -> Any:
    try:
        return check(name, value)
    except TypeError as error:
        raise ValueError(str(error)) from None
