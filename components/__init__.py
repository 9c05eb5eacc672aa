"""tfx-accum components: the gradient-accumulation model and the TFX Tuner and Trainer modules.

By concern, each depending only on those above it (``tests/test_layout.py`` checks it):

- ``accumulation``: :class:`GradientAccumulationModel`, its exact step and strategies;
- ``data``: the data description from TFX's artifacts, the task, ExampleGen's executor;
- ``search``: the TFX Tuner module (``search.tuner.tuner_fn``) and the joint search;
- ``training``: the TFX Trainer module (``training.trainer.run_fn``), models, export, Pusher;
- ``settings``: the names, defaults and validation of every setting, shared by all four.

``GradientAccumulationModel`` is imported on first use, so that importing a light module
of this package (``settings``, ``search.search_space``) does not start TensorFlow.
"""

from __future__ import annotations

__all__ = ["GradientAccumulationModel", "LOSS_REDUCTIONS", "MultiWorkerMirroredStrategy"]


def __getattr__(name: str):
    if name == "MultiWorkerMirroredStrategy":
        from tfx_accum.components.accumulation.keras_adapter import MultiWorkerMirroredStrategy

        return MultiWorkerMirroredStrategy
    if name in __all__:
        from tfx_accum.components.accumulation import model as accumulation

        return getattr(accumulation, name)
    raise AttributeError(f"module 'tfx_accum.components' has no attribute {name!r}")
