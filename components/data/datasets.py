"""The Tuner's and Trainer's data: the description from TFX's artifacts, and the splits.

:func:`describe_data` makes the data description (tfx_accum.components.data.features) from the
schema and StatisticsGen's statistics, which the Tuner and Trainer components receive as
an input (tfx_accum.components.data.component_inputs puts its location in ``custom_config``).

:func:`read_splits` reads the examples through ``fn_args.data_accessor`` (TFX's TFXIO
reader, parsing by the schema) and preprocesses them with the Keras layers that are
exported with the model. TFX batches datasets at one fixed size; tuning batch sizes needs
per-trial batching (https://github.com/tensorflow/tfx/issues/3591), so the splits are unbatched and
each trial or training run batches them at its own effective batch.

The Tuner and Trainer never read ExampleGen's eval split: the Evaluator blesses on it. Both
hold out every ``VALIDATION_EVERY``-th example of the training split as their own
validation split: the Tuner ranks trials on it, and the Trainer, which trains the best
trial's configuration on the same examples, reports the same score on it.

A split whose parsed values exceed ``CACHE_BYTES`` is streamed: every epoch reads the
examples from ExampleGen's files again (the shuffle buffer is the only thing held), so
memory does not grow with the data. A smaller split is read to its end once and held,
preprocessed, in blocks of ``_READ_BATCH`` examples (:func:`_read_whole`): re-parsing small
data every epoch would cost more than holding it. Whatever is held is the count read, and
that count is checked against the statistics' (:class:`SplitCountError`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from tfx_accum import console
from tfx_accum.components.accumulation.distributed_input import same_stream_for_every_iterator
from tfx_accum.components.config.setting_words import CUSTOM_CONFIG
from tfx_accum.components.data.features import (
    DataDescription,
    Preprocessor,
    describe,
    say_near_constant,
)
from tfx_accum.components.data.raw_features import dense_raw
from tfx_accum.components.data.statistics import SplitStatistics
from tfx_accum.components.data.tfxio_parsing import matched_files, parsed_batches
from tfx_accum.components.data.transform import transform_output_path, transformed_schema

if TYPE_CHECKING:
    from tfx_accum.components.config.custom_config import ModuleConfig

_READ_BATCH = 256
CACHE_BYTES = 64 * 2**20  # a split up to this many bytes of float32 values is cached
# The first examples of a stream that is read again and again (a search's trials, the
# Trainer's prefix of a large split) are held in memory up to this many bytes.
MEMORY_BYTES = 256 * 2**20
SHUFFLE_BUFFER = 4096  # examples the training stream shuffles among (``batched``)
VALIDATION_EVERY = 5  # every 5th training example is held out for validation (20 %)


class SplitCountError(RuntimeError):
    """Examples read or held are not the count they should be: nothing is trained on part
    of a split, and no line reports a count that was not read."""


def load_schema(schema_path: str) -> schema_pb2.Schema:
    # As tfx.utils.parse_pbtxt_file, without importing TFX (seconds, in every worker process).
    with tf.io.gfile.GFile(schema_path) as handle:
        return text_format.Parse(handle.read(), schema_pb2.Schema())


def examples_schema(fn_args) -> schema_pb2.Schema:
    """The schema the examples are parsed by: Transform's transformed schema where the
    component has a ``transform_graph`` (tfx_accum.components.data.transform), else ``schema``'s."""
    path = transform_output_path(fn_args)
    return transformed_schema(path) if path else load_schema(fn_args.schema_path)


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
    # The split's preprocessed batches in order, before the hold-out: what
    # :func:`held_parts` reads both parts' prefixes from in one pass.
    blocks: tf.data.Dataset | None = None


def split_statistics(
    fn_args, schema: schema_pb2.Schema, component: str, uri: str | None = None
) -> tuple[SplitStatistics, SplitStatistics | None]:
    """The training and eval splits' statistics: StatisticsGen's where the component hands
    them over (tfx_accum's Tuner and Trainer: their ``uri``), else computed by TFDV over the
    examples.

    TFX's stock Tuner and Trainer take no statistics; the module then computes the same
    statistics itself, over the examples it is given, and says so in one line.
    """
    transformed = transform_output_path(fn_args) is not None
    if uri and not transformed:
        train = SplitStatistics.load(uri, "train")
        try:
            evaluation = SplitStatistics.load(uri, "eval")
        except ValueError:
            evaluation = None
        return train, evaluation
    start = time.monotonic()
    splits = {"train": list(fn_args.train_files)}
    eval_files = list(getattr(fn_args, "eval_files", None) or [])
    if eval_files:
        splits["eval"] = eval_files
    computed = SplitStatistics.compute(splits, schema)  # one Beam pipeline for both
    train, evaluation = computed["train"], computed.get("eval")
    name = component.capitalize()
    why = (
        "StatisticsGen's describe the raw examples, the model gets Transform's"
        if transformed
        else f"TFX's stock {name} hands over no StatisticsGen output (tfx_accum's {name} "
        "takes it as its `statistics` input)"
    )
    kind = "transformed examples" if transformed else "examples"
    console.say(
        f"[{component}] statistics: computed by TFDV over the {kind} "
        f"({train.num_examples:,} training rows, {time.monotonic() - start:.1f} s): {why}"
    )
    return train, evaluation


def _pruned(schema: schema_pb2.Schema, names: set[str]) -> schema_pb2.Schema:
    """The schema of only ``names`` (TFXIO parses every feature of the schema it gets)."""
    pruned = schema_pb2.Schema()
    pruned.CopyFrom(schema)
    del pruned.feature[:]
    pruned.feature.extend(f for f in schema.feature if f.name in names)
    return pruned


def _parsed(fn_args, files: list[str], schema: schema_pb2.Schema) -> tf.data.Dataset:
    """``fn_args.data_accessor``'s batches of parsed examples, once, one file after another.

    TFXIO interleaves a pattern's files one record at a time, ``reader_num_threads`` files
    at once; left at AUTOTUNE that is ceil(CPUs / 2) (TensorFlow's rule): the order would
    depend on the machine (one file at a time on 2 CPUs, two on 4), and a Trainer pod with
    other CPUs than the Tuner's would not train the best trial's model. One reader thread
    reads the files one after another, in name order, on every machine
    (tests/data/test_parsed_order.py). One dataset over all the files, not one per file:
    each would build the parsing of every feature again. The same batches are read without
    TFXIO's per-record handoff between threads where a probe of the schema shows they are
    the same (tfx_accum.components.data.tfxio_parsing; bench.tfx_floor measures both).
    """
    from tfx_bsl.public import tfxio

    options = tfxio.TensorFlowDatasetOptions(
        batch_size=_READ_BATCH,
        shuffle=False,
        num_epochs=1,
        drop_final_batch=False,
        reader_num_threads=1,
    )
    factory = fn_args.data_accessor.tf_dataset_factory
    return parsed_batches(factory, files, matched_files(files), schema, options)


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


def describe_data(fn_args, config: ModuleConfig, component: str) -> DataDescription:
    """The model's inputs, label and task, from the schema and the statistics.

    A model function's model gets only the inputs it declares: ``models.custom_model``'s
    ``model_data`` narrows this description to them, so they alone are read, preprocessed
    and served.
    ``config``: the module's ``custom_config``; ``component`` prefixes the lines it prints.
    """
    settings = config.model_settings
    schema = examples_schema(fn_args)
    train, evaluation = split_statistics(fn_args, schema, component, config.statistics)
    data = describe(
        schema,
        train,
        settings,
        evaluation,
        _sample(fn_args, schema),
        transformed=transform_output_path(fn_args) is not None,
    )
    if settings.task is None:  # nobody decided it before (the command line's check does)
        console.say(
            f"[{component}] task: {data.task} ({data.task_reason}; "
            f"{CUSTOM_CONFIG.name('task')} to choose)"
        )
    say_near_constant(data, component)
    return data


def validation_examples(data: DataDescription) -> int:
    """Examples held out of the training split for validation (every 5th)."""
    return data.rows // VALIDATION_EVERY


def training_examples(data: DataDescription) -> int:
    """Examples of the training split the model fits (the rest)."""
    return data.rows - validation_examples(data)


def read_splits(fn_args, data: DataDescription) -> Splits:
    """The training and validation examples of ``fn_args.train_files``, preprocessed."""
    schema = _pruned(examples_schema(fn_args), {*data.keys, data.label_key})
    preprocessor = Preprocessor(data)
    count, validation_size = data.rows, validation_examples(data)
    if training_examples(data) < 1 or validation_size < 1:
        raise ValueError(
            f"The training split has {count} examples: too few to hold out a validation "
            f"split (every {VALIDATION_EVERY}th example) and train on the rest."
        )

    # Plain TensorFlow, no Python control flow on tensors: autograph's conversion of the
    # whole call tree (Keras preprocessing layers included) cost seconds in every process.
    @tf.autograph.experimental.do_not_convert
    def preprocess(batch):
        raw = dense_raw(batch, data, with_label=True)
        label = preprocessor.encode_label(raw.pop(data.label_key))
        return preprocessor(raw), label

    blocks = _parsed(fn_args, list(fn_args.train_files), schema).map(
        preprocess, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    if count * data.values_per_example * 4 <= CACHE_BYTES:
        blocks = _read_whole(blocks, count)
    return Splits(
        held_out_part(blocks, held_out=False),
        held_out_part(blocks, held_out=True),
        data,
        training_examples(data),
        preprocessor,
        validation_size,
        blocks=blocks,
    )


def _read_whole(blocks: tf.data.Dataset, expected: int) -> tf.data.Dataset:
    """``blocks`` read once to their end and held as tensors, in the same blocks; their
    example count must be ``expected`` (the statistics' count of the split).

    Not ``Dataset.cache()``: TensorFlow finalises an in-memory cache when its input reports
    the end, and an input below a consumer that stops early (a ``take`` under a parallel
    map, Keras's ``evaluate`` of one batch) can report the end when that consumer's reader
    is cancelled: the cache is then final with the examples read so far, and every later
    read of the split gets only those (tests/data/test_split_counts.py: a few partial reads
    of a cached split cut it to its first block). Read here to the end, in one pass, the
    count is known and checked before anything trains on it.
    """
    parts = [tf.nest.map_structure(lambda t: t.numpy(), block) for block in blocks]
    read = sum(len(tf.nest.flatten(part)[0]) for part in parts)
    if read != expected:
        raise SplitCountError(
            f"Read {read:,} examples of the training split where its statistics count "
            f"{expected:,}: the examples changed after the statistics were computed, or the "
            "read was cut short. Nothing is trained on part of the split; run the pipeline "
            "again from ExampleGen (without its cache)."
        )
    joined = tf.nest.map_structure(lambda *arrays: np.concatenate(arrays), *parts)
    return tf.data.Dataset.from_tensor_slices(joined).batch(_READ_BATCH)


def _checked_count(held: int, asked: int, what: str) -> int:
    """``held`` (examples held in memory), which must be ``asked``."""
    if held != asked:
        raise SplitCountError(
            f"Held {held:,} {what} examples in memory where {asked:,} were asked for: the "
            "split ended early. Nothing is trained or scored on fewer examples than reported."
        )
    return held


def held_out_part(blocks: tf.data.Dataset, held_out: bool) -> tf.data.Dataset:
    """The examples of ``blocks`` (batches of the split, in order) that are held out for
    validation (every ``VALIDATION_EVERY``-th of the split), or the others, one by one.

    Chosen a block at a time (the blocks numbered by a running count, so that any block
    sizes hold): per example, enumerating and filtering the split cost the Trainer's stream
    more than its parsing (tests/data/test_held_in_memory.py: the same examples in the
    same order as a filter of the numbered examples).
    """

    @tf.autograph.experimental.do_not_convert
    def number(start, block):
        size = tf.shape(tf.nest.flatten(block)[0], out_type=tf.int64)[0]
        return start + size, (start, block)

    @tf.autograph.experimental.do_not_convert
    def chosen(start, block):
        size = tf.shape(tf.nest.flatten(block)[0], out_type=tf.int64)[0]
        index = start + tf.range(size, dtype=tf.int64)
        keep = tf.equal(index % VALIDATION_EVERY == VALIDATION_EVERY - 1, held_out)
        return tf.nest.map_structure(lambda t: tf.boolean_mask(t, keep), block)

    return blocks.scan(np.int64(0), number).map(chosen).unbatch()


def stream_reads(examples: int) -> int:
    """Examples a shuffled stream (:func:`batched`) reads to yield its first ``examples``:
    they and the shuffle buffer's. A stream over only these yields the same first
    ``examples`` as one over the whole split (the buffer is full for every draw)."""
    return examples + SHUFFLE_BUFFER


@dataclasses.dataclass
class HeldInMemory:
    """The first ``count`` examples of a split, read once and held as tensors.

    A search reads the same prefix of the training stream and the same held-out examples
    in every trial and every epoch; parsing them from ExampleGen's files each time costs a
    trial many times its training on a large table.
    Holding them changes nothing that is read: the same examples in the same order.
    """

    dataset: tf.data.Dataset
    count: int
    nbytes: int

    @classmethod
    def first(cls, dataset: tf.data.Dataset, count: int, what: str = "") -> HeldInMemory:
        """The first ``count`` examples of ``dataset``, which must have that many."""
        tensors = dataset.take(count).batch(max(1, count)).get_single_element()
        held = tf.nest.map_structure(lambda t: t.numpy(), tensors)
        nbytes = sum(a.nbytes for a in tf.nest.flatten(held))
        count = _checked_count(len(tf.nest.flatten(held)[0]), count, what or "the split's")
        return cls(tf.data.Dataset.from_tensor_slices(held), count, nbytes)


def held_parts(splits: Splits, train: int, validation: int) -> tuple[HeldInMemory, HeldInMemory]:
    """``HeldInMemory.first(splits.train, train)`` and ``.first(splits.validation,
    validation)``, from one pass over the split's first examples, held out with numpy.

    One pass in batches, not two reads that each go through the split's first examples one
    example at a time (``unbatch``, ``filter``), whose cost grows with the examples held.
    """
    every = VALIDATION_EVERY

    def index(count: int, held_out: bool) -> int:  # the split's index of a part's example
        return count * every + every - 1 if held_out else count + count // (every - 1)

    needed = (
        max(index(train - 1, False), index(validation - 1, True)) + 1 if train or validation else 0
    )
    blocks, rows = [], 0
    for block in splits.blocks or ():
        if rows >= needed:
            break
        blocks.append(tf.nest.map_structure(lambda t: t.numpy(), block))
        rows += len(tf.nest.flatten(blocks[-1])[0])
    joined = tf.nest.map_structure(lambda *parts: np.concatenate(parts)[:needed], *blocks)
    held_out = np.arange(min(rows, needed)) % every == every - 1

    def held(mask: np.ndarray, count: int, what: str) -> HeldInMemory:
        part = tf.nest.map_structure(lambda a: a[mask][:count], joined)
        flat = tf.nest.flatten(part)
        return HeldInMemory(
            tf.data.Dataset.from_tensor_slices(part),
            _checked_count(len(flat[0]), count, what),
            sum(a.nbytes for a in flat),
        )

    return held(~held_out, train, "training"), held(held_out, validation, "held-out")


def fits_in_memory(count: int, data: DataDescription) -> bool:
    """Whether ``count`` preprocessed examples fit :data:`MEMORY_BYTES` (float32 values)."""
    return count * data.values_per_example * 4 <= MEMORY_BYTES


def batched(
    dataset: tf.data.Dataset,
    batch_size: int,
    shuffle_seed: int | None,
    repeat: bool = True,
    drop_remainder: bool = False,
) -> tf.data.Dataset:
    """Shuffles (optionally), repeats and batches an unbatched split.

    The batch dimension is left unknown (unless ``drop_remainder``: TPUs need it static):
    a repeated stream would otherwise tell every batch size apart, and a model would trace
    its training step once per effective batch of a search instead of once.

    Every iterator of a shuffled result yields the same stream, the first one's: under a
    distribution strategy Keras's ``fit`` reads a dataset once before training, which
    would otherwise move the seeded shuffle on
    (tfx_accum.components.accumulation.distributed_input).
    """

    def stream() -> tf.data.Dataset:
        data = dataset
        if shuffle_seed is not None:
            data = data.shuffle(SHUFFLE_BUFFER, seed=shuffle_seed, reshuffle_each_iteration=True)
        if repeat:
            data = data.repeat()
        return data.batch(batch_size, drop_remainder=drop_remainder)

    result = stream() if shuffle_seed is None else same_stream_for_every_iterator(stream)
    if not drop_remainder:
        result = result.map(tf.autograph.experimental.do_not_convert(_any_batch_size))
    return result.prefetch(tf.data.AUTOTUNE)


def _any_batch_size(*structure):
    """The same tensors, with an unknown batch dimension (their values are untouched)."""

    def relax(tensor):
        shape = [None, *tensor.shape[1:]]
        return tf.raw_ops.PlaceholderWithDefault(input=tensor, shape=shape)

    relaxed = tf.nest.map_structure(relax, structure)
    return relaxed if len(relaxed) > 1 else relaxed[0]
