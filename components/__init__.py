"""tfx-accum components: the gradient-accumulation model and the TFX Tuner and Trainer modules.

By concern, each depending only on those above it (``tests/test_layout.py`` checks it):

- ``accumulation``: :class:`GradientAccumulationModel`, its exact step and strategies;
- ``data``: the data description from TFX's artifacts, the task, ExampleGen's executor;
- ``search``: the TFX Tuner module (``search.tuner.tuner_fn``) and the joint search;
- ``training``: the TFX Trainer module (``training.trainer.run_fn``), models, export, Pusher;
- ``settings``: the names, defaults and validation of every setting, shared by all four;
- ``custom_config``: ``custom_config``, the typed contract between a pipeline and the
  Tuner and Trainer modules (:func:`module_config` checks it where the pipeline is written).

``GradientAccumulationModel`` is imported on first use, so that importing a light module
of this package (``settings``, ``search.search_space``) does not start TensorFlow.
"""

from __future__ import annotations

__all__ = [
    "GradientAccumulationModel",
    "LOSS_REDUCTIONS",
    "ModuleConfig",
    "MultiWorkerMirroredStrategy",
    "module_config",
]


def __getattr__(name: str):
    if name in ("ModuleConfig", "module_config"):  # light: no TensorFlow
        from tfx_accum.components import custom_config

        return getattr(custom_config, name)
    if name == "MultiWorkerMirroredStrategy":
        from tfx_accum.components.accumulation.keras_adapter import MultiWorkerMirroredStrategy

        return MultiWorkerMirroredStrategy
    if name in __all__:
        from tfx_accum.components.accumulation import model as accumulation

        return getattr(accumulation, name)
    raise AttributeError(f"module 'tfx_accum.components' has no attribute {name!r}")
