"""The accumulation model: ``GradientAccumulationModel`` and what makes its step exact.

The accumulation room, the lowest layer: owns the step (``model``, ``jax_step``,
``torch_step``), the micro-batches and accumulators, the Keras adapter, the distribution
strategies and their argument checks; it imports nothing else of the project.
"""

from __future__ import annotations

__all__ = [
    "GradientAccumulationModel",
    "InexactAccumulationWarning",
    "LOSS_REDUCTIONS",
    "MultiWorkerMirroredStrategy",
]


def __getattr__(name: str):
    # Imported on first use: the model needs TensorFlow, which a light import should not start.
    if name == "MultiWorkerMirroredStrategy":
        from tfx_accum.components.accumulation.multi_worker_strategy import (
            MultiWorkerMirroredStrategy,
        )

        return MultiWorkerMirroredStrategy
    if name == "InexactAccumulationWarning":
        from tfx_accum.components.accumulation.inexact_cases import InexactAccumulationWarning

        return InexactAccumulationWarning
    if name in __all__:
        from tfx_accum.components.accumulation import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
