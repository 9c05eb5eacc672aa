"""tfx-accum: exact gradient accumulation for Keras 3 ``model.fit``, tuned and trained by TFX.

Installed packages:

- ``tfx_accum.components``: :class:`GradientAccumulationModel`, the TFX Trainer module
  (``tfx_accum.components.trainer.run_fn``) and Tuner module
  (``tfx_accum.components.tuner.tuner_fn``);
- ``tfx_accum.pipeline``: ``create_pipeline``, the local runner, the Kubeflow compile and the
  ``tfx-accum`` command line;
- ``tfx_accum.kubeflow``: the node-pool profiles (package data).

``import tfx_accum`` is cheap: TensorFlow is imported only when the model is first used.
"""

from __future__ import annotations

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("tfx-accum")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["GradientAccumulationModel", "__version__"]


def __getattr__(name: str):
    if name == "GradientAccumulationModel":
        from tfx_accum.components.accumulation import GradientAccumulationModel

        return GradientAccumulationModel
    raise AttributeError(f"module 'tfx_accum' has no attribute {name!r}")
