"""The Tuner's and Trainer's data: the description from TFX's artifacts, and the splits.

:func:`describe_data` makes the data description (components/features.py) from the
schema and StatisticsGen's statistics, which the Tuner and Trainer components receive as
an input (components/tfx_components.py puts its location in ``custom_config``).

:func:`read_splits` reads the examples through ``fn_args.data_accessor`` (TFX's TFXIO
reader, parsing by the schema) and preprocesses them with the Keras layers that are
exported with the model. TFX batches datasets at one fixed size; tuning batch sizes needs
per-trial batching (tfx #3591), so the splits are unbatched and each trial or training run
batches them at its own effective batch.

The Tuner and Trainer never read ExampleGen's eval split: the Evaluator blesses on it. Both
hold out every ``VALIDATION_EVERY``-th example of the training split as their own
validation split: the Tuner ranks trials on it, and the Trainer, which trains the best
trial's configuration on the same examples, reports the same score on it.

A split whose parsed values exceed ``CACHE_BYTES`` is streamed: every epoch reads the
examples from ExampleGen's files again (the shuffle buffer is the only thing held), so
memory does not grow with the data. A smaller split is cached, parsed, in blocks of
``_READ_BATCH`` examples: re-parsing small data every epoch would cost more than holding it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import tensorflow as tf
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from tfx_accum import console
from tfx_accum.components.features import (
    DataDescription,
    Preprocessor,
    dense_raw,
    describe,
    say_near_constant,
)
from tfx_accum.components.settings import ModelSettings, is_model_function
from tfx_accum.components.statistics import SplitStatistics

_READ_BATCH = 256
CACHE_BYTES = 64 * 2**20  # a split up to this many bytes of float32 values is cached
VALIDATION_EVERY = 5  # every 5th training example is held out for validation (20 %)
STATISTICS_KEY = "statistics"  # custom_config: the ExampleStatistics artifact's URI


def load_schema(schema_path: str) -> schema_pb2.Schema:
    # As tfx.utils.parse_pbtxt_file, without importing TFX (seconds, in every worker process).
    with tf.io.gfile.GFile(schema_path) as handle:
        return text_format.Parse(handle.read(), schema_pb2.Schema())


@dataclasses.dataclass
class Splits:
    """Unbatched ``(model inputs, label)`` datasets: the training examples the model fits,
    the validation examples held out of the training split, and what the inputs are."""

    train: tf.data.Dataset
    validation: tf.data.Dataset
    data: DataDescription
    train_size: int
    preprocessor: Preprocessor
    validation_size: int = 0


def statistics_uri(fn_args) -> str:
    uri = (fn_args.custom_config or {}).get(STATISTICS_KEY)
    if not uri:
        raise ValueError(
            "The Tuner and Trainer need StatisticsGen's statistics: use tfx_accum's Tuner and "
            "Trainer components (tfx_accum.components.tfx_components), which take them as "
            "the `statistics` input."
        )
    return uri


def _pruned(schema: schema_pb2.Schema, names: set[str]) -> schema_pb2.Schema:
    """The schema of only ``names`` (TFXIO parses every feature of the schema it gets)."""
    pruned = schema_pb2.Schema()
    pruned.CopyFrom(schema)
    del pruned.feature[:]
    pruned.feature.extend(f for f in schema.feature if f.name in names)
    return pruned


def _parsed(fn_args, files: list[str], schema: schema_pb2.Schema) -> tf.data.Dataset:
    """``fn_args.data_accessor``'s batches of parsed examples, in file order, once."""
    from tfx_bsl.public import tfxio

    options = tfxio.TensorFlowDatasetOptions(
        batch_size=_READ_BATCH, shuffle=False, num_epochs=1, drop_final_batch=False
    )
    return fn_args.data_accessor.tf_dataset_factory(files, options, schema)


def _sample(fn_args, schema: schema_pb2.Schema) -> dict[str, list[bytes]]:
    """The first examples' BYTES values (images are told from text by them)."""
    names = {f.name for f in schema.feature if f.type == schema_pb2.BYTES}
    if not names:
        return {}
    sample: dict[str, list[bytes]] = {}
    for batch in _parsed(fn_args, list(fn_args.train_files), _pruned(schema, names)).take(1):
        for name in names:
            column = batch[name]
            values = column.values if isinstance(column, tf.SparseTensor) else column
            sample[name] = [v for v in tf.reshape(values, [-1]).numpy().tolist() if v]
    return sample


def describe_data(fn_args, settings: ModelSettings, component: str) -> DataDescription:
    """The model's inputs, label and task, from the schema and the statistics.

    A model function's model gets only the inputs it declares (components/custom_model.py):
    the description is narrowed to them, so they alone are read, preprocessed and served.
    ``component`` (``tuner``, ``trainer``) prefixes the lines it prints.
    """
    schema = load_schema(fn_args.schema_path)
    uri = statistics_uri(fn_args)
    train = SplitStatistics.load(uri, "train")
    try:
        evaluation = SplitStatistics.load(uri, "eval")
    except ValueError:
        evaluation = None
    data = describe(schema, train, settings, evaluation, _sample(fn_args, schema))
    if settings.task is None:  # nobody decided it before (the command line's check does)
        console.say(f"[{component}] task: {data.task} ({data.task_reason}; --task to choose)")
    say_near_constant(data, component)
    if is_model_function(settings.model):
        from tfx_accum.components.custom_model import narrow_to_declared

        data = narrow_to_declared(settings.model, data, component)
    return data


def validation_examples(data: DataDescription) -> int:
    """Examples held out of the training split for validation (every 5th)."""
    return data.rows // VALIDATION_EVERY


def training_examples(data: DataDescription) -> int:
    """Examples of the training split the model fits (the rest)."""
    return data.rows - validation_examples(data)


def read_splits(fn_args, data: DataDescription) -> Splits:
    """The training and validation examples of ``fn_args.train_files``, preprocessed."""
    schema = _pruned(load_schema(fn_args.schema_path), {*data.keys, data.label_key})
    preprocessor = Preprocessor(data)
    count, validation_size = data.rows, validation_examples(data)
    if training_examples(data) < 1 or validation_size < 1:
        raise ValueError(
            f"The training split has {count} examples: too few to hold out a validation "
            f"split (every {VALIDATION_EVERY}th example) and train on the rest."
        )

    def preprocess(batch):
        raw = dense_raw(batch, data, with_label=True)
        label = preprocessor.encode_label(raw.pop(data.label_key))
        return preprocessor(raw), label

    blocks = _parsed(fn_args, list(fn_args.train_files), schema).map(
        preprocess, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    if count * data.values_per_example * 4 <= CACHE_BYTES:
        blocks = blocks.cache()
    examples = blocks.unbatch().enumerate()

    def part(keep_validation: bool) -> tf.data.Dataset:
        held = examples.filter(
            lambda i, _: tf.equal(i % VALIDATION_EVERY == VALIDATION_EVERY - 1, keep_validation)
        )
        return held.map(lambda _, example: example)

    return Splits(
        part(False), part(True), data, training_examples(data), preprocessor, validation_size
    )


def batched(
    dataset: tf.data.Dataset,
    batch_size: int,
    shuffle_seed: int | None,
    repeat: bool = True,
    drop_remainder: bool = False,
) -> tf.data.Dataset:
    """Shuffles (optionally), repeats and batches an unbatched split."""
    if shuffle_seed is not None:
        dataset = dataset.shuffle(4096, seed=shuffle_seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    return dataset.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)


def location_for_inputs(root: str, prefix: str, fn_args, **inputs: Any) -> str:
    """``<root>/<prefix>-<hash>``: one folder per set of inputs, stable across executions.

    TFX gives every execution a new working directory; state that a retry or rerun of the
    same inputs must find again (the Trainer's backup, the Tuner's search) lives here,
    keyed by the examples, the schema and ``inputs`` (JSON-serialisable settings).
    """
    key = json.dumps(
        {
            "train": sorted(fn_args.train_files),
            "eval": sorted(fn_args.eval_files),
            "schema": fn_args.schema_path,
            **inputs,
        },
        sort_keys=True,
    )
    return f"{root.rstrip('/')}/{prefix}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
