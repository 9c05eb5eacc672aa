"""Run in Beam's worker processes by tests/pipeline/test_tfxio_batching.py: whether tfx_bsl
batches TFXIO's reads by bytes there. Imports nothing of this project, so only what the
worker was started with (the ``--beam_plugins`` argument) can have set it."""

from __future__ import annotations

from tfx_bsl.coders import batch_util


def byte_size_batching(_) -> bool:
    """tfx_bsl's own batching arguments name an element size only with byte-size batching."""
    return "element_size_fn" in batch_util.GetBatchElementsKwargs(None)
