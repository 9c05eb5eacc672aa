"""tfx-accum pipeline: ``create_pipeline`` and its local and Kubeflow runners.

Heavy TFX imports happen in the submodules, so ``import pipeline`` stays cheap.
"""

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
from tfx_accum.pipeline.errors import InputError

__all__ = ["InputError", "create_pipeline"]


def create_pipeline(*args, **kwargs):
    """See :func:`pipeline.pipeline.create_pipeline` (imported lazily: TFX is heavy)."""
    from tfx_accum.pipeline.pipeline import create_pipeline as _create

    return _create(*args, **kwargs)
