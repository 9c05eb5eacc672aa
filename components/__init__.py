"""tfx-accum components: the gradient-accumulation model, TFX Trainer and Tuner modules."""

from components.accumulation import LOSS_REDUCTIONS, GradientAccumulationModel

__all__ = ["GradientAccumulationModel", "LOSS_REDUCTIONS"]
