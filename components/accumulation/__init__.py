"""The accumulation model: ``GradientAccumulationModel`` and what makes its step exact.

Owns the step (``model``, ``jax_step``, ``torch_step``), the micro-batches and accumulators, the
Keras adapter and the distribution strategies; it imports nothing from the search, data or
training packages.
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
        from tfx_accum.components.accumulation.keras_adapter import MultiWorkerMirroredStrategy

        return MultiWorkerMirroredStrategy
    if name == "InexactAccumulationWarning":
        from tfx_accum.components.accumulation.inexact_cases import InexactAccumulationWarning

        return InexactAccumulationWarning
    if name in __all__:
        from tfx_accum.components.accumulation import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
