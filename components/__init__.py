"""tfx-accum components: the gradient-accumulation model and the TFX Tuner and Trainer modules.

Rooms in strict layers, each importing only its own and those before it (siblings, joined by
``|``, import nothing of each other); ``tests/test_layout.py`` checks the order on the whole
import graph, ``docs/architecture.md`` draws it with the pipeline's rooms:

accumulation -> base -> config -> data -> models -> search | training -> components ->
pipeline.base -> pipeline.checks -> pipeline.evaluation | pipeline.beam ->
pipeline.run_parameters -> pipeline.pipeline -> pipeline.local -> pipeline.kubeflow ->
pipeline.cli -> pipeline -> kubeflow -> tfx_accum

- ``accumulation``: :class:`GradientAccumulationModel`, its exact step and strategies; it
  imports nothing else of the project;
- ``base``: the package root's helpers (``tfx_accum.console``, ``atomic_files``, ...);
- ``config``: every setting's name, default and check, the task, the search space and
  :class:`ModuleConfig`, the typed ``custom_config`` between a pipeline and the Tuner and
  Trainer modules (:func:`module_config` checks it where the pipeline is written);
- ``data``: the data description from TFX's artifacts, ExampleGen's executor;
- ``models``: the built-in models and a user's model function, checked and compiled;
- ``search``: the TFX Tuner module (``search.tuner_module.tuner_fn``) and the joint search;
- ``training``: the TFX Trainer module (``training.trainer_module.run_fn``), export, Pusher;
- ``components``: this package's public API.

``GradientAccumulationModel`` is imported on first use, so that importing a light module
of this package (``config.settings``, ``config.search_space``) does not start TensorFlow.
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
        from tfx_accum.components.config import custom_config

        return getattr(custom_config, name)
    if name == "MultiWorkerMirroredStrategy":
        from tfx_accum.components.accumulation.multi_worker_strategy import (
            MultiWorkerMirroredStrategy,
        )

        return MultiWorkerMirroredStrategy
    if name in __all__:
        from tfx_accum.components.accumulation import model as accumulation

        return getattr(accumulation, name)
    raise AttributeError(f"module 'tfx_accum.components' has no attribute {name!r}")
