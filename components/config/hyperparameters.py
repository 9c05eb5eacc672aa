"""The config room's hyperparameters: the three the Tuner searches jointly and the Trainer uses.

``accumulation_steps`` is ``k``, the micro-batches per optimizer update; ``micro_batch_size``
is ``m``; their product is the effective batch. Importing this module is cheap (no
TensorFlow).

Example:

```python
hp = Hyperparameters.from_values({"accumulation_steps": 4, "micro_batch_size": 32,
                                  "learning_rate": 1e-3})
hp.effective_batch  # 128
```
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tfx_accum.components.accumulation.arguments import (
    validate_positive_float,
    validate_positive_int,
)

__all__ = ["HP_ACCUMULATION_STEPS", "HP_LEARNING_RATE", "HP_MICRO_BATCH_SIZE", "Hyperparameters"]

# The three hyperparameters the Tuner searches jointly and the Trainer uses.
HP_ACCUMULATION_STEPS = "accumulation_steps"
HP_MICRO_BATCH_SIZE = "micro_batch_size"
HP_LEARNING_RATE = "learning_rate"


@dataclasses.dataclass(frozen=True)
class Hyperparameters:
    """One trial's (or the Trainer's) accumulation steps, micro-batch and learning rate.

    The defaults are what the Trainer uses with tuning switched off.
    """

    accumulation_steps: int = 4
    micro_batch_size: int = 16
    learning_rate: float = 3e-3

    def __post_init__(self) -> None:
        for name in (HP_ACCUMULATION_STEPS, HP_MICRO_BATCH_SIZE):
            object.__setattr__(self, name, validate_positive_int(name, getattr(self, name)))
        object.__setattr__(
            self, HP_LEARNING_RATE, validate_positive_float(HP_LEARNING_RATE, self.learning_rate)
        )

    @property
    def effective_batch(self) -> int:
        return self.accumulation_steps * self.micro_batch_size

    def to_values(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> Hyperparameters:
        """From a Keras Tuner ``values`` dict (other entries, like Hyperband's, ignored)."""
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in values]
        if missing:
            raise ValueError(
                f"Hyperparameters {missing} are missing (got {sorted(values)}); the Tuner's "
                "best_hyperparameters must come from this project's tuner_fn."
            )
        return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls)})

    def describe(self) -> str:
        return (
            f"accumulation_steps={self.accumulation_steps} "
            f"micro_batch={self.micro_batch_size} lr={self.learning_rate:.3g} "
            f"(effective batch {self.effective_batch})"
        )
