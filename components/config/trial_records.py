"""The config room's trial-record keys: what a trial and the Tuner's decision record beside
the hyperparameters, and :class:`TunerDecision`, the Tuner's output read once.

Keras Tuner metrics and columns of trials.csv; never part of what decides the trained model.
Importing this module is cheap (no TensorFlow).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tfx_accum.components.config.hyperparameters import Hyperparameters

__all__ = ["TRIAL_RECORDED", "TunerDecision"]

# What a trial records beside its score (Keras Tuner metrics, and columns of trials.csv).
TRIAL_EXAMPLES = "examples"  # training examples the trial's score is for
TRIAL_SCORED_ON = "scored_examples"  # held-out examples the trial's score is measured on
TRIAL_SPEED = "examples_per_second"  # steady training throughput (tuner.EpochTimes)
TRIAL_PEAK_MEMORY = "peak_memory_mb"  # GPU allocator peak, or the process's peak RSS on CPU
TRIAL_REUSED_FROM = "reused_from"  # the trial whose score an exact duplicate reuses
# Added to the best hyperparameters when the Tuner picks a faster split of the best
# trial's effective batch (tfx_accum.components.search.search_policy: choose_trainer_split).
RESPLIT_FROM_TRIAL = "resplit_from_trial"
RESPLIT_FROM_SPLIT = "resplit_from_split"
RESPLIT_SPEEDUP = "resplit_speedup"
# Values a trial or the Tuner's decision records beside the hyperparameters: never part of
# what decides the trained model (tfx_accum.components.search.search_policy: duplicate_key).
TRIAL_RECORDED = (
    TRIAL_EXAMPLES,
    TRIAL_SCORED_ON,
    TRIAL_SPEED,
    TRIAL_PEAK_MEMORY,
    TRIAL_REUSED_FROM,
    RESPLIT_FROM_TRIAL,
    RESPLIT_FROM_SPLIT,
    RESPLIT_SPEEDUP,
)


@dataclasses.dataclass(frozen=True)
class TunerDecision:
    """The Tuner's output, parsed once: what the Trainer trains with, and why.

    The Tuner writes it as Keras Tuner's ``best_hyperparameters`` config (TFX's
    ``best_hyperparameters.txt``): the best trial's values, with the fastest exact split of
    its effective batch (tfx_accum.components.search.search_policy) and where that split came from.
    The Trainer and the run summary both read it through :meth:`from_config`.
    """

    hyperparameters: Hyperparameters
    values: dict[str, Any]  # every value, a model function's own hyperparameters included
    resplit_from_trial: str | None = None
    resplit_from_split: str | None = None
    resplit_speedup: float | None = None
    examples: int | None = None  # training examples the best trial's model saw in all
    scored_examples: int | None = None  # the held-out examples its score is on (None: all)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> TunerDecision:
        """From ``best_hyperparameters.txt`` (a ``HyperParameters`` config, or its values)."""
        values = dict(config.get("values", config))
        return cls(
            Hyperparameters.from_values(values),
            values,
            values.get(RESPLIT_FROM_TRIAL),
            values.get(RESPLIT_FROM_SPLIT),
            values.get(RESPLIT_SPEEDUP),
            int(values[TRIAL_EXAMPLES]) if values.get(TRIAL_EXAMPLES) else None,
            int(values[TRIAL_SCORED_ON]) if values.get(TRIAL_SCORED_ON) else None,
        )

    def describe_source(self) -> str:
        if self.resplit_from_trial is None:
            return "Tuner"
        return (
            f"Tuner; trial {self.resplit_from_trial} ran this effective batch as "
            f"{self.resplit_from_split}, this split ran {self.resplit_speedup or 0:.2f}x faster "
            "in the search and trains the same model, as accumulation is exact"
        )
