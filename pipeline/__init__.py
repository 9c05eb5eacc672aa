"""tfx-accum pipeline: ``create_pipeline`` and its local and Kubeflow runners, and the CLI.

``pipeline.create_pipeline`` (ExampleGen through Pusher) and ``config`` (its settings) are
shared by ``local`` (LocalDagRunner, Beam sizing) and ``kubeflow`` (the KFP / Vertex compile);
``checks`` reads the user's data and settings before anything runs; ``cli`` is the
``tfx-accum`` command. The pipeline uses the components, never the other way.

Heavy TFX imports happen in the submodules, so ``import tfx_accum.pipeline`` stays cheap.
"""

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
from tfx_accum.pipeline.errors import InputError

__all__ = ["InputError", "create_pipeline"]


def create_pipeline(*args, **kwargs):
    """See :func:`tfx_accum.pipeline.pipeline.create_pipeline` (imported lazily: TFX is heavy)."""
    from tfx_accum.pipeline.pipeline import create_pipeline as _create

    return _create(*args, **kwargs)
