"""Batches by bytes in TFX's TFXIO readers (StatisticsGen, the Evaluator): fewer, fuller batches.

tfx_bsl's Beam sources group examples into Arrow record batches with Beam's
``BatchElements``, by default tuned by time between 1 and 1,000 examples
(``tfx_bsl/coders/batch_util.py``). TFDV's and TFMA's work is partly per batch and per
column: in StatisticsGen each batch lands on one of 128 hot-key fanout keys, so a table of
5,000 columns builds, pickles and merges a 5,000-feature accumulator for most batches.
tfx_bsl's own absl flag ``--tfxio_use_byte_size_batching`` makes a batch about 20 MiB, up
to 8,192 examples, fewer accumulators on a wide table (TFDV's statistics take
less time). The batches change, not the examples: the statistics and
metrics are sums over the same examples.

TFX's components take no batch size (StatisticsGen calls ``tfxio.BeamSource()`` without
one), so the flag is the way in, as tfx_bsl documents it. :func:`enable` sets it in this
process (the in-process DirectRunner); ``BEAM_PLUGIN_ARG`` of ``tfx_accum.pipeline.beam_args``
(Beam's ``--beam_plugins``, in the local runner's ``multi_processing`` arguments) makes
each worker process import this module, which enables it there. Tested with tfx-bsl 1.16.
"""

from __future__ import annotations

import sys

from absl import flags

FLAG = "tfxio_use_byte_size_batching"  # defined by tfx_bsl.coders.batch_util


def enable() -> None:
    """Sets tfx_bsl's byte-size batching in this process (absl flags parsed if not yet)."""
    from tfx_bsl.coders import batch_util  # noqa: F401 - defines the flag

    if not flags.FLAGS.is_parsed():
        flags.FLAGS(sys.argv[:1], known_only=True)  # no arguments: every flag's default
    setattr(flags.FLAGS, FLAG, True)


enable()  # on import: how a Beam worker process takes the setting (--beam_plugins)
