"""tfx-accum components: the gradient-accumulation model, TFX Trainer and Tuner modules.

``GradientAccumulationModel`` is imported on first use, so that importing a light module
of this package (``settings``, ``search_space``) does not start TensorFlow.
"""

from __future__ import annotations

__all__ = ["GradientAccumulationModel", "LOSS_REDUCTIONS", "MultiWorkerMirroredStrategy"]


def __getattr__(name: str):
    if name == "MultiWorkerMirroredStrategy":
        from tfx_accum.components.keras_adapter import MultiWorkerMirroredStrategy

        return MultiWorkerMirroredStrategy
    if name in __all__:
        from tfx_accum.components import accumulation

        return getattr(accumulation, name)
    raise AttributeError(f"module 'tfx_accum.components' has no attribute {name!r}")
