"""A parallel-search worker process: ``python -m tfx_accum.components.search.tuner_worker SPEC``.

Started by :func:`tfx_accum.components.search.parallel_search.run_workers` with Keras Tuner's
distributed-mode variables set. First it ties its life to the chief's (it exits when the
chief is gone); then it rebuilds the chief's ``FnArgs`` from the JSON spec (the examples
are ``tf.Example`` records, read through the same TFXIO factory TFX's ``DataAccessor``
uses), builds the same tuner, and runs trials from the chief's oracle, its requests
carrying the search's token, until it is told to stop.
"""

from __future__ import annotations

import json
import logging
import sys
from types import SimpleNamespace


def _fn_args(spec: dict) -> SimpleNamespace:
    """The chief's ``FnArgs`` fields the tuner reads, with a ``tf.Example`` data accessor.

    Built from tfx-bsl directly, as TFX's ``DataAccessor`` for ``FORMAT_TF_EXAMPLE`` does
    (``tfxio_utils.make_tfxio``): importing TFX itself would add seconds to every worker's
    start.
    """
    from tfx_bsl.public import tfxio

    def tf_dataset_factory(file_pattern, options, schema):
        return tfxio.TFExampleRecord(
            file_pattern=file_pattern, schema=schema, telemetry_descriptors=["Tuner"]
        ).TensorFlowDataset(options)

    return SimpleNamespace(
        **spec, data_accessor=SimpleNamespace(tf_dataset_factory=tf_dataset_factory)
    )


def main(argv: list[str]) -> int:
    from tfx_accum.components.search import parallel_search

    parallel_search.die_with_chief()  # before the slow imports: a dead chief ends us at once
    logging.getLogger("keras_tuner").setLevel(logging.WARNING)
    from tfx_accum.components.search.tuner_module import worker_tuner

    with open(argv[1]) as handle:
        spec = json.load(handle)
    tuner, fit_kwargs = worker_tuner(_fn_args(spec["fn_args"]), spec)
    if tuner is not None:  # None: a memory probe, already answered
        parallel_search.authenticate(tuner)
        tuner.search(**fit_kwargs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
