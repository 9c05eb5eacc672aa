"""The ``tfx`` extra: which packages the TFX parts need, and the one line when they are missing.

``pip install tfx-accum`` installs the model alone (Keras, and a backend's extra:
``tfx_accum.backends``). The TFX Trainer and Tuner modules, the pipeline, the
``tfx-accum`` command and the Kubeflow compile need ``pip install 'tfx-accum[tfx]'``. Without
it, importing any of them raises :class:`MissingExtra` (an ``ImportError``) naming the extra,
instead of a ``ModuleNotFoundError`` for whichever of TFX's packages happened to be imported
first.
"""

from __future__ import annotations

from importlib.util import find_spec

# The top-level packages of the extra (pyproject.toml's [project.optional-dependencies] tfx)
# that the TFX parts import.
PACKAGES = ("tfx", "apache_beam", "keras_tuner", "tensorflow_data_validation", "sklearn", "yaml")
INSTALL = "pip install 'tfx-accum[tfx]'"


class MissingExtra(ImportError):
    """A TFX part of tfx-accum was imported without the ``tfx`` extra installed."""


def missing() -> list[str]:
    """The extra's packages that are not installed (without importing any of them)."""
    return [name for name in PACKAGES if find_spec(name) is None]


def require_tfx() -> None:
    """Raises :class:`MissingExtra` unless every package of the ``tfx`` extra is installed."""
    gone = missing()
    if gone:
        raise MissingExtra(
            f"tfx-accum's TFX parts (the pipeline, the CLI, the Trainer and Tuner modules) "
            f"need the tfx extra, and {', '.join(gone)} {'is' if len(gone) == 1 else 'are'} "
            f"not installed: {INSTALL} (on Python 3.10, as TFX 1.16 needs). The model alone "
            "needs a backend only: from tfx_accum import GradientAccumulationModel."
        )
