"""What the Tuner holds in memory, read the way TFX's *stock* Tuner reads it, in one process.

``write_examples`` writes a split in ExampleGen's layout (``Split-train``, ``Split-eval``,
gzipped ``tf.Example`` records) and its schema. Run as a script, in a fresh process (what
tests/search/test_split_counts_fresh.py does, several times):

- ``tuner ROOT MODEL WORKDIR``: TFX's own Tuner executor code (``tfx.components.tuner.executor
  .search``: ``fn_args`` from ``get_common_fn_args``, whose ``data_accessor`` is TFX's TFXIO
  factory), with tfx-accum's ``tuner_fn`` and ``MODEL`` (``mlp`` or a model function), one
  trial; prints the counts the trials were given.
- ``partial ROOT READS``: the split read by ``read_splits`` through the same accessor, then
  ``READS`` reads of one held-out example each (what the first trial's ``evaluate`` of one
  batch makes), then the parts held as a search holds them; prints their counts.

Both print one JSON line prefixed ``COUNTS``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

KEYS = [f"f{i}" for i in range(8)]
LABEL = "label"


def write_examples(root: Path, rows: int, eval_rows: int = 200) -> None:
    """``root/Split-{train,eval}`` (ExampleGen's layout) and ``root/schema/schema.pbtxt``."""
    import tensorflow as tf
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    rng = np.random.default_rng(0)
    for split, count in (("train", rows), ("eval", eval_rows)):
        folder = root / f"Split-{split}"
        folder.mkdir(parents=True)
        path = str(folder / "data_tfrecord-00000-of-00001.gz")
        with tf.io.TFRecordWriter(path, "GZIP") as writer:
            for _ in range(count):
                x = rng.normal(size=len(KEYS))
                feature = {
                    k: tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
                    for k, v in zip(KEYS, x)
                }
                label = int(x[0] + x[1] > 0)
                feature[LABEL] = tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
    schema = schema_pb2.Schema()
    for name, kind in [*((k, schema_pb2.FLOAT) for k in KEYS), (LABEL, schema_pb2.INT)]:
        feature = schema.feature.add(name=name, type=kind)
        feature.shape.dim.add(size=1)
        feature.presence.min_fraction = 1.0
    (root / "schema").mkdir()
    (root / "schema" / "schema.pbtxt").write_text(text_format.MessageToString(schema))


def artifacts(root: Path) -> dict:
    """The stock Tuner's ``input_dict``: the examples and the schema."""
    from tfx.types import standard_artifacts, standard_component_specs

    examples = standard_artifacts.Examples()
    examples.uri = str(root)
    examples.split_names = '["train", "eval"]'
    schema = standard_artifacts.Schema()
    schema.uri = str(root / "schema")
    return {
        standard_component_specs.EXAMPLES_KEY: [examples],
        standard_component_specs.SCHEMA_KEY: [schema],
    }


SEARCH_SPACE = {
    "accumulation_steps_choices": [1],
    "micro_batch_choices": [64],
    "learning_rate_min": 1e-2,
    "learning_rate_max": 2e-2,
    "max_trials": 1,
    "tuning_epochs": 1,
    "algorithm": "random",
}


def exec_properties(model: str) -> dict:
    from tfx.types import standard_component_specs as keys

    return {
        "tuner_fn": "tfx_accum.components.search.tuner_module.tuner_fn",
        keys.TRAIN_ARGS_KEY: '{"num_steps": 10}',
        keys.EVAL_ARGS_KEY: '{"num_steps": 5}',
        keys.CUSTOM_CONFIG_KEY: json.dumps(
            {"label_key": LABEL, "model": model, "search_space": SEARCH_SPACE}
        ),
    }


def stock_tuner(root: Path, model: str, working_dir: str) -> dict:
    from tfx.components.tuner import executor

    tuner = executor.search(
        artifacts(root), exec_properties(model), working_dir, print_tuning_summary=False
    )
    # what every trial was given (tfx_accum.components.search.hypermodel)
    held = tuner.hypermodel._held
    return {
        "held": [h.count for h in held],
        "given": [int(h.dataset.cardinality()) for h in held],
        "train_size": tuner.hypermodel.splits.train_size,
        "validation_size": tuner.hypermodel.splits.validation_size,
    }


def partial_reads(root: Path, reads: int) -> dict:
    import dataclasses

    import tensorflow as tf
    from tfx.components.trainer import fn_args_utils

    from tfx_accum.components.data.datasets import held_parts, read_splits
    from tfx_accum.components.data.features import DataDescription

    fn_args = fn_args_utils.get_common_fn_args(artifacts(root), exec_properties("mlp"))
    files = [str(p) for p in (root / "Split-train").iterdir()]
    rows = int(tf.data.TFRecordDataset(files, "GZIP").reduce(0, lambda n, _: n + 1))
    data = dataclasses.replace(DataDescription.numeric(KEYS, 2, label_key=LABEL), rows=rows)
    splits = read_splits(fn_args, data)
    for _ in range(reads):
        list(splits.validation.take(1).batch(64))
    train, held_out = held_parts(splits, splits.train_size, splits.validation_size)
    return {
        "held": [train.count, held_out.count],
        "given": [int(train.dataset.cardinality()), int(held_out.dataset.cardinality())],
        "train_size": splits.train_size,
        "validation_size": splits.validation_size,
    }


if __name__ == "__main__":
    mode, root = sys.argv[1], Path(sys.argv[2])
    if mode == "tuner":
        counts = stock_tuner(root, sys.argv[3], sys.argv[4])
    else:
        counts = partial_reads(root, int(sys.argv[3]))
    print("COUNTS " + json.dumps(counts), flush=True)
