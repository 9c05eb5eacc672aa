"""The joint search space of accumulation steps, micro-batch size and learning rate.

It travels from the pipeline to the Tuner and Trainer modules through TFX's
``custom_config`` (a JSON dict), and is validated on both ends with errors that say what
is wrong and how to fix it.

Example:

```python
space = SearchSpace(steps_choices=(1, 2, 4), micro_batch_choices=(16, 32),
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

ALGORITHMS = ("bayesian", "random", "hyperband")


def _positive_int_choices(name: str, values: Any) -> tuple[int, ...]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
        raise ValueError(
            f"`{name}` must be a non-empty list of positive integers, e.g. [1, 2, 4, 8]. "
            f"Received: {name}={values!r}."
        )
    result = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"`{name}` must contain only positive integers (>= 1). "
                f"Received: {name}={list(values)!r}; {value!r} is not."
            )
        result.append(int(value))
    return tuple(sorted(set(result)))


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """What Keras Tuner searches, and how each trial is budgeted.

    Attributes:
        steps_choices: candidate ``gradient_accumulation_steps`` (k).
        micro_batch_choices: candidate micro-batch sizes (m): samples per forward pass.
        learning_rate_min, learning_rate_max: log-uniform learning-rate range.
        max_effective_batch: combinations with k * m above this are skipped as failed
            trials (``None``: no limit).
        algorithm: ``"bayesian"`` (default), ``"random"`` or ``"hyperband"``.
        max_trials: number of trials (Bayesian and random search).
        tuning_epochs: epochs per trial; an epoch is ``examples_per_epoch`` examples.
        examples_per_epoch: training examples per tuning epoch, identical for every trial
            whatever its effective batch (``None``: the size of the training split).
        seed: seed of the search and of the trial data order.
    """

    steps_choices: tuple[int, ...] = (1, 2, 4, 8)
    micro_batch_choices: tuple[int, ...] = (8, 16, 32, 64)
    learning_rate_min: float = 1e-4
    learning_rate_max: float = 1e-1
    max_effective_batch: int | None = None
    algorithm: str = "bayesian"
    max_trials: int = 10
    tuning_epochs: int = 4
    examples_per_epoch: int | None = None
    seed: int = 42

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "steps_choices", _positive_int_choices("steps_choices", self.steps_choices)
        )
        object.__setattr__(
            self,
            "micro_batch_choices",
            _positive_int_choices("micro_batch_choices", self.micro_batch_choices),
        )
        for name in ("learning_rate_min", "learning_rate_max"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"`{name}` must be a number. Received: {name}={value!r}.")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(
                    f"`{name}` must be a positive finite number. Received: {name}={value!r}."
                )
        if self.learning_rate_min >= self.learning_rate_max:
            raise ValueError(
                "The learning-rate range is empty: `learning_rate_min` must be smaller than "
                f"`learning_rate_max`. Received: learning_rate_min={self.learning_rate_min}, "
                f"learning_rate_max={self.learning_rate_max}."
            )
        if self.algorithm not in ALGORITHMS:
            raise ValueError(
                f"`algorithm` must be one of {', '.join(ALGORITHMS)}. "
                f"Received: algorithm={self.algorithm!r}."
            )
        for name in ("max_trials", "tuning_epochs", "seed"):
            value = getattr(self, name)
            minimum = 0 if name == "seed" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(
                    f"`{name}` must be an integer >= {minimum}. Received: {name}={value!r}."
                )
        for name in ("max_effective_batch", "examples_per_epoch"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ValueError(
                    f"`{name}` must be a positive integer or None. Received: {name}={value!r}."
                )
        if self.max_effective_batch is not None:
            smallest = min(self.steps_choices) * min(self.micro_batch_choices)
            if smallest > self.max_effective_batch:
                raise ValueError(
                    f"No combination fits `max_effective_batch`={self.max_effective_batch}: the "
                    f"smallest effective batch is {min(self.steps_choices)} x "
                    f"{min(self.micro_batch_choices)} = {smallest}. Raise the limit or add "
                    "smaller choices."
                )

    def to_config(self) -> dict[str, Any]:
        config = dataclasses.asdict(self)
        config["steps_choices"] = list(self.steps_choices)
        config["micro_batch_choices"] = list(self.micro_batch_choices)
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any] | None) -> SearchSpace:
        config = dict(config or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"Unknown search-space settings: {unknown}. Known: {sorted(known)}.")
        for name in ("steps_choices", "micro_batch_choices"):
            if name in config and isinstance(config[name], list):
                config[name] = tuple(config[name])
        return cls(**config)
