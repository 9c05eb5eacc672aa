"""tfx-accum: exact gradient accumulation for Keras 3 ``model.fit``, tuned and trained by TFX.

Installed packages:

- ``tfx_accum.components``: :class:`GradientAccumulationModel`, the TFX Trainer module
  (``tfx_accum.components.training.trainer_module.run_fn``) and Tuner module
  (``tfx_accum.components.search.tuner_module.tuner_fn``);
- ``tfx_accum.pipeline``: ``create_pipeline``, the local runner, the Kubeflow compile and the
  ``tfx-accum`` command line;
- ``tfx_accum.kubeflow``: the node-pool profiles (package data).

``pip install tfx-accum`` installs the model alone (Keras and numpy), beside the Keras backend
of your choice or with it as an extra, ``'tfx-accum[tensorflow]'`` or ``'tfx-accum[jax]'``
(``tfx_accum.backends``); ``pip install 'tfx-accum[tfx]'`` adds TensorFlow and what
``tfx_accum.pipeline`` and the TFX Trainer and Tuner modules need (``tfx_accum.extras``).

``import tfx_accum`` is cheap: the backend is imported only when the model is first used, and
the model is registered with Keras (for ``keras.saving.load_model``) as soon as Keras is
imported (``tfx_accum.keras_registration``).
"""

from __future__ import annotations

import os as _os
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("tfx-accum")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

from tfx_accum.keras_registration import register_with_keras as _register_with_keras

# In a checkout, this folder holds the root package alone: components/, pipeline/ and
# kubeflow/ stand beside it and are mapped into the package by pyproject.toml's
# package-dir. Python puts the working directory first on sys.path, so from the repository
# root this folder is the one imported, whatever is installed; the checkout's root joins
# the package's path so that its subpackages are found there too (installed, the parent
# folder is site-packages, which holds no pyproject.toml, and nothing changes).
_checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_checkout, "pyproject.toml")) and _os.path.isfile(
    _os.path.join(_checkout, "components", "__init__.py")
):
    __path__.append(_checkout)

__all__ = ["GradientAccumulationModel", "MultiWorkerMirroredStrategy", "__version__"]

_register_with_keras()


def __getattr__(name: str):
    if name == "GradientAccumulationModel":
        from tfx_accum.components.accumulation.model import GradientAccumulationModel

        return GradientAccumulationModel
    if name == "MultiWorkerMirroredStrategy":  # TensorFlow's, made to work with Keras 3's fit
        from tfx_accum.components.accumulation.multi_worker_strategy import (
            MultiWorkerMirroredStrategy,
        )

        return MultiWorkerMirroredStrategy
    raise AttributeError(f"module 'tfx_accum' has no attribute {name!r}")
