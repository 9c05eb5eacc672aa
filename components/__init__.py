"""tfx-accum components: the gradient-accumulation model, TFX Trainer and Tuner modules."""

from components.accumulation import GradientAccumulationModel, validate_accumulation_steps

__all__ = ["GradientAccumulationModel", "validate_accumulation_steps"]
