"""What the model's inputs and label are: one description, made from TFX's own artifacts.

:func:`describe` makes a :class:`DataDescription` from the schema (SchemaGen's, or the
user's through ImportSchemaGen) and StatisticsGen's statistics over the whole training
split, with the column settings of ``custom_config`` (``--features``,
``--exclude-features``, ``--categorical``). Every fact about a feature is derived here
once; the Tuner, the Trainer, the model, the export and the run summary use it:

- ``numeric`` (INT or FLOAT): the split's mean and variance for the model's normalisation;
  a missing value is filled with the mean. A near-constant feature (fewer than
  ``MIN_PRESENT`` values, or no spread) gets a variance floor (``_floored_variance``) and
  a warning naming it, so that a value the training split never showed cannot blow up;
- ``categorical`` (INT declared categorical, by ``--categorical`` or the schema's
  ``int_domain.is_categorical``; a text column declared so stays ``string``, whose values
  are categories already): an index per value, from the statistics' values where
  StatisticsGen counted them, else hashed into ``CATEGORY_BINS`` bins;
- ``string`` (BYTES): the vocabulary of the most frequent values (up to ``MAX_VOCABULARY``,
  StatisticsGen's rank histogram); a missing or unseen value maps to index 0;
- ``image`` (BYTES whose values are PNG or JPEG files, seen in the first examples): decoded
  and resized to the first image's size, scaled to [0, 1];
- the label and the task (tfx_accum.components.config.tasks): classes (indices, or text
  with a sorted vocabulary) or a regression target with its mean and variance (the model learns the
  standardised target; the export predicts in the label's units).

Inside the model every input is named by a valid Keras name (tfx_accum.components.data.columns); the
raw ``tf.Example`` keys stay the data's own. For the built-in models (``numeric_vector``,
set by :func:`describe`) the numeric columns enter as one ``(batch, n)`` input,
``NUMERIC_VECTOR``, in the description's order: a table of 5,000 columns is one tensor to
slice into micro-batches and trace, not 5,000: tracing one input per column makes the first
epoch of a wide table many times slower.
A model function keeps one input per
feature (tfx_accum.components.models.custom_model: its documented contract).

:class:`Preprocessor` (Keras layers) maps raw features to the model's inputs: it runs in
the ``tf.data`` input pipeline during training (so the training step holds dense tensors
only and stays XLA-compilable) and is exported with the model (so serving takes raw
serialized examples).

Example::

    data = describe(schema, SplitStatistics.load(uri, "train"), settings)
    data.features[0].kind          # "numeric", "categorical", "string" or "image"
    inputs = Preprocessor(data)(parse_raw(serialized, data))

The raw tensors themselves (``parse_raw``, ``dense_raw``) come from
tfx_accum.components.data.raw_features.

Size (over 500 lines): the description and the in-model preprocessing are one contract (the
serving signature takes what ``describe`` names); split, each half would restate the other.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2

from tfx_accum import console
from tfx_accum.components.config.setting_words import CUSTOM_CONFIG, SettingWords, by_closeness
from tfx_accum.components.config.settings import ModelSettings, is_model_function
from tfx_accum.components.config.tasks import REGRESSION, LabelFacts, infer_task, is_classification
from tfx_accum.components.data.columns import input_names, select_features
from tfx_accum.components.data.feature_kinds import (
    CATEGORICAL,
    IMAGE,
    MAX_INDEX_RANGE,
    MAX_VOCABULARY,
    NUMERIC,
    STRING,
    TENSOR,
    is_image,
)
from tfx_accum.components.data.statistics import SplitStatistics

MIN_PRESENT = 10  # numeric values below which a feature's spread cannot be trusted
CATEGORY_BINS = 1024  # hash bins of a categorical integer feature without a vocabulary


def natural_key(name: str) -> list:
    """Sorts ``pixel_2`` before ``pixel_10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


NUMERIC_VECTOR = "numeric_features"  # the built-in models' one input of numeric columns


@dataclasses.dataclass(frozen=True)
class InputFeature:
    """One model input: the data's name, the model's name for it, its kind and statistics."""

    name: str  # the tf.Example key (the data's own column name)
    kind: str  # NUMERIC, CATEGORICAL, STRING or IMAGE
    raw_dtype: str = "float32"  # as stored in the tf.Example: float32, int64 or string
    input_name: str = ""  # a valid Keras name (the data's name where it is one)
    mean: float = 0.0
    variance: float = 1.0
    missing: int = 0  # training examples without a value
    vocabulary: tuple[str, ...] = ()
    image_shape: tuple[int, int, int] = (0, 0, 0)  # height, width, channels
    variance_floored: bool = False  # near-constant: the variance is a floor, not measured
    # Categorical with the schema's index domain (Transform's vocabularies and buckets):
    # the values are indices (minus the domain's minimum), not looked up.
    domain: tuple[int, int] | None = None  # (min, max)
    # Values per example as the schema fixes them (``()``: one; None: any number).
    schema_shape: tuple[int, ...] | None = ()
    tensor_shape: tuple[int, ...] = (1,)  # TENSOR: the shape the model declares

    def __post_init__(self) -> None:
        if not self.input_name:
            object.__setattr__(self, "input_name", input_names([self.name])[self.name])

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of one example's model input."""
        if self.kind == TENSOR:
            return self.tensor_shape
        return self.image_shape if self.kind == IMAGE else (1,)

    @property
    def input_dtype(self) -> str:
        if self.kind == TENSOR:
            return self.raw_dtype
        return "int64" if self.kind in (STRING, CATEGORICAL) else "float32"

    @property
    def index_size(self) -> int:
        """Indices a string or categorical input takes (0: missing or unseen; with a
        schema's domain, 0 and then one index per value of the domain, in order)."""
        if self.domain is not None:
            return self.domain[1] - self.domain[0] + 2
        if self.kind == CATEGORICAL and not self.vocabulary:
            return CATEGORY_BINS
        return len(self.vocabulary) + 1

    @property
    def values_per_example(self) -> int | None:
        """Values one example holds by the schema (None: any number)."""
        return None if self.schema_shape is None else int(np.prod(self.schema_shape or (1,)))


@dataclasses.dataclass(frozen=True)
class DataDescription:
    """The model's inputs, the label and the task, as the training split's statistics say."""

    features: tuple[InputFeature, ...]
    label_key: str
    num_classes: int | None  # None for regression
    label_vocabulary: tuple[str, ...] = ()  # text labels; empty for class indices
    rows: int = 0  # training examples the statistics are over
    task: str = ""  # tfx_accum.components.config.tasks; "" reads as multiclass (older callers)
    label_raw_dtype: str = "int64"
    label_mean: float = 0.0  # regression: the target's training mean and variance
    label_variance: float = 1.0
    task_reason: str = ""
    # The numeric features as one input, NUMERIC_VECTOR (the built-in models), or one
    # input each (a model function's; the default for hand-made descriptions).
    numeric_vector: bool = False

    def __post_init__(self) -> None:
        if not self.task:
            object.__setattr__(self, "task", "binary" if self.num_classes == 2 else "multiclass")

    @property
    def keys(self) -> list[str]:
        return [f.name for f in self.features]

    def kind(self, kind: str) -> list[InputFeature]:
        return [f for f in self.features if f.kind == kind]

    @property
    def classification(self) -> bool:
        return is_classification(self.task)

    @property
    def outputs(self) -> int:
        """Units of the model's output: class probabilities, or one predicted value."""
        return self.num_classes if self.classification else 1

    @property
    def values_per_example(self) -> int:
        """Numbers one preprocessed example holds (for the cache-size decision)."""
        return sum(int(np.prod(f.input_shape)) for f in self.features) + 1

    def to_json(self) -> dict[str, Any]:
        """What the model was trained on, for the run's record (the Trainer writes it)."""
        return {
            "label": self.label_key,
            "task": self.task,
            "num_classes": self.num_classes,
            "label_vocabulary": list(self.label_vocabulary),
            "training_examples": self.rows,
            "numeric_vector": self.numeric_vector,
            "features": [
                {
                    "name": f.name,
                    "input_name": f.input_name,
                    "kind": f.kind,
                    "mean": f.mean,
                    "variance": f.variance,
                    "variance_floored": f.variance_floored,
                    "missing": f.missing,
                    "vocabulary_size": len(f.vocabulary),
                }
                for f in self.features
            ],
        }

    def only(self, input_names_: Iterable[str]) -> DataDescription:
        """This description with only the features whose model input names are given."""
        wanted = set(input_names_)
        return dataclasses.replace(
            self, features=tuple(f for f in self.features if f.input_name in wanted)
        )

    @classmethod
    def numeric(
        cls,
        keys: list[str],
        num_classes: int,
        mean: np.ndarray | None = None,
        variance: np.ndarray | None = None,
        label_key: str = "label",
    ) -> DataDescription:
        """Numeric features only (what a CSV of numbers gives), e.g. for tests."""
        mean = np.zeros(len(keys)) if mean is None else mean
        variance = np.ones(len(keys)) if variance is None else variance
        features = tuple(
            InputFeature(k, NUMERIC, mean=float(m), variance=float(v))
            for k, m, v in zip(keys, mean, variance)
        )
        return cls(features, label_key, num_classes)


def _raw_dtype(feature: schema_pb2.Feature) -> str:
    return {schema_pb2.INT: "int64", schema_pb2.FLOAT: "float32"}.get(feature.type, "string")


def _floored_variance(mean: float, variance: float, present: int) -> tuple[float, bool]:
    """The variance the normalisation divides by, and whether it is a floor.

    With fewer than ``MIN_PRESENT`` values, or (almost) no spread, the measured variance
    says nothing about the values a request may carry: dividing by it turned real values
    into inputs thousands of times larger than any seen in training. The floor is the
    square of the feature's own magnitude (its mean, at least 1), so that such a value
    stays within a few units.
    """
    scale = max(abs(mean), 1.0)
    if present >= MIN_PRESENT and variance > (1e-6 * scale) ** 2:
        return variance, False
    return max(variance, scale**2), True


def _numeric(name: str, raw_dtype: str, stats: SplitStatistics) -> InputFeature:
    feature = stats.feature(name)
    present = stats.present(name)
    mean, std = 0.0, 1.0
    if feature is not None and feature.HasField("num_stats"):
        mean, std = float(feature.num_stats.mean), float(feature.num_stats.std_dev)
    variance, floored = _floored_variance(mean, std**2, present)
    return InputFeature(
        name,
        NUMERIC,
        raw_dtype,
        mean=mean,
        variance=variance,
        missing=stats.num_examples - present,
        variance_floored=floored,
    )


def _vocabulary(name: str, stats: SplitStatistics) -> tuple[str, ...]:
    values = [value for value, _ in stats.values(name) if value != ""]
    return tuple(values[:MAX_VOCABULARY])  # "" is a missing value, not a category


def _image_shape(values: list[bytes]) -> tuple[int, int, int]:
    decoded = tf.io.decode_image(values[0], expand_animations=False)
    return tuple(int(d) for d in decoded.shape)


def _bytes_feature(name: str, stats: SplitStatistics, sample: dict) -> InputFeature:
    values = [v for v in sample.get(name, []) if v]
    images = [v for v in values if is_image(v)]
    missing = stats.num_examples - stats.present(name)
    if images and len(images) == len(values):
        return InputFeature(
            name, IMAGE, "string", missing=missing, image_shape=_image_shape(images)
        )
    if images:
        raise ValueError(
            f"Feature {name!r} holds both images and other bytes in its first examples; every "
            "value of an image feature must be a PNG or JPEG file."
        )
    return InputFeature(
        name, STRING, "string", missing=missing, vocabulary=_vocabulary(name, stats)
    )


def _label_facts(
    feature: schema_pb2.Feature, splits: list[SplitStatistics]
) -> tuple[LabelFacts, tuple[str, ...]]:
    name, dtype = feature.name, _raw_dtype(feature)
    if dtype == "string":
        values = sorted({v for s in splits for v, _ in s.values(name) if v != ""})
        return LabelFacts("string", distinct=len(values), vocabulary=tuple(values)), tuple(values)
    lows, highs = [], []
    for split in splits:
        stats = split.feature(name)
        if stats is not None and stats.HasField("num_stats") and split.present(name):
            lows.append(stats.num_stats.min)
            highs.append(stats.num_stats.max)
    facts = LabelFacts(
        "int" if dtype == "int64" else "float",
        minimum=min(lows) if lows else None,
        maximum=max(highs) if highs else None,
        integral=True if dtype == "int64" else None,
    )
    return facts, ()


def _schema_shape(feature: schema_pb2.Feature) -> tuple[int, ...] | None:
    """Values per example as the schema fixes them: ``()`` one, None any number."""
    if not feature.HasField("shape"):
        return None
    return tuple(int(d.size) for d in feature.shape.dim)


def _domain(feature: schema_pb2.Feature) -> tuple[int, int] | None:
    """A categorical integer feature's index range, where the schema gives one (what
    Transform writes for ``compute_and_apply_vocabulary`` and ``bucketize``)."""
    if not feature.HasField("int_domain"):
        return None
    domain = feature.int_domain
    if not (domain.is_categorical and domain.HasField("min") and domain.HasField("max")):
        return None
    if not 0 <= domain.max - domain.min < MAX_INDEX_RANGE:
        return None
    return int(domain.min), int(domain.max)


def missing_label_message(
    label_key: str, columns: Iterable[str], transformed: bool, words: SettingWords = CUSTOM_CONFIG
) -> str:
    """One line: the label is not a column; the columns closest to it first (a raw name
    finds its transformed one: ``tips`` -> ``tips_xf``)."""
    columns = list(columns)
    ranked = by_closeness(label_key, columns)
    close = [c for c in ranked if label_key.lower() in c.lower() or c.lower() in label_key.lower()]
    where = "Transform's transformed examples" if transformed else "the data"
    hint = f"did you mean {close[0]!r}? " if close else ""
    shown = ", ".join(ranked[:20]) + (
        f", ... ({len(ranked) - 20} more)" if len(ranked) > 20 else ""
    )
    return (
        f"{words.name('label_key')} {label_key!r} is not a column of {where}: {hint}"
        f"the columns, closest first: {shown}."
    )


def describe(
    schema: schema_pb2.Schema,
    train: SplitStatistics,
    settings: ModelSettings,
    evaluation: SplitStatistics | None = None,
    sample: dict[str, list[bytes]] | None = None,
    transformed: bool = False,
    words: SettingWords = CUSTOM_CONFIG,
) -> DataDescription:
    """The model's inputs, label and task from the schema and the training statistics.

    ``evaluation``: the eval split's statistics (labels the training split lacks are
    classes too). ``sample``: the first examples' BYTES values by feature (images are told
    from text by them). ``transformed``: the schema is Transform's (for the messages).
    ``words``: how the messages name the settings (``custom_config``'s keys, or the
    command line's flags). Raises ``ValueError`` naming what does not fit.

    An integer feature whose schema declares a categorical domain with a range (what
    Transform writes for its vocabularies and buckets) is categorical, indexed by that
    range: no list of columns by hand.
    """
    by_name = {f.name: f for f in schema.feature}
    label_key = settings.label_key
    if label_key not in by_name:
        raise ValueError(missing_label_message(label_key, by_name, transformed, words))
    if train.num_examples == 0:
        raise ValueError("The training split is empty: the data has no rows to train on.")
    names = sorted((n for n in by_name if n != label_key), key=natural_key)
    chosen = select_features(
        names, label_key, settings.features, settings.exclude_features, words=words
    )
    safe = input_names(chosen)
    categorical = set(settings.categorical_features)
    unknown = sorted(categorical - set(chosen))
    setting = words.name("categorical_features")
    if unknown:
        raise ValueError(f"{setting} names {unknown}, which are not features of the model.")
    features = []
    for name in chosen:
        spec, dtype = by_name[name], _raw_dtype(by_name[name])
        domain = _domain(spec) if dtype == "int64" else None
        declared = spec.HasField("int_domain") and spec.int_domain.is_categorical
        if (name in categorical or declared) and dtype != "string":  # text: categories already
            if dtype != "int64":
                raise ValueError(
                    f"{setting} {name!r}: only integer and text columns can be declared "
                    f"categorical ({name!r} holds fractional numbers)."
                )
            feature = InputFeature(
                name,
                CATEGORICAL,
                dtype,
                missing=train.num_examples - train.present(name),
                vocabulary=() if domain else _vocabulary(name, train),
                domain=domain,
            )
        elif dtype == "string":
            feature = _bytes_feature(name, train, sample or {})
        else:
            feature = _numeric(name, dtype, train)
        features.append(
            dataclasses.replace(feature, input_name=safe[name], schema_shape=_schema_shape(spec))
        )
    splits = [train] + ([evaluation] if evaluation is not None else [])
    facts, vocabulary = _label_facts(by_name[label_key], splits)
    inference = infer_task(facts, settings.task, settings.num_classes, words)
    label_mean, label_variance = 0.0, 1.0
    if inference.task == REGRESSION:
        stats = train.feature(label_key)
        label_mean = float(stats.num_stats.mean)
        label_variance = max(float(stats.num_stats.std_dev) ** 2, 1e-12)
    if train.present(label_key) < train.num_examples:
        missing = train.num_examples - train.present(label_key)
        raise ValueError(
            f"{missing} of the {train.num_examples} training examples have no {label_key!r} "
            "value; every example needs a label."
        )
    return DataDescription(
        tuple(features),
        label_key,
        inference.num_classes,
        vocabulary,
        train.num_examples,
        inference.task,
        _raw_dtype(by_name[label_key]),
        label_mean,
        label_variance,
        inference.reason,
        numeric_vector=not is_model_function(settings.model),
    )


def say_near_constant(
    data: DataDescription, component: str, words: SettingWords = CUSTOM_CONFIG
) -> None:
    """One warning line naming the features whose variance is a floor (if any)."""
    floored = [f.name for f in data.features if f.variance_floored]
    if floored:
        shown = ", ".join(map(repr, floored[:6])) + (", ..." if len(floored) > 6 else "")
        console.say(
            f"[{component}] warning: {len(floored)} near-constant numeric feature(s) "
            f"({shown}): fewer than {MIN_PRESENT} values or no spread in the training split, "
            f"so their normalisation uses a variance floor; {words.name('exclude_features')} "
            "to drop them"
        )


@keras.saving.register_keras_serializable("tfx_accum")
class FillMissing(keras.layers.Layer):
    """Replaces NaN (a missing value) with ``value``, the feature's training mean; a list:
    one mean per column of a ``(batch, n)`` input."""

    def __init__(self, value: float | list[float], **kwargs):
        super().__init__(**kwargs)
        self.value = [float(v) for v in value] if isinstance(value, list | tuple) else float(value)

    def call(self, inputs):
        return tf.where(tf.math.is_nan(inputs), tf.cast(self.value, inputs.dtype), inputs)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "value": self.value}


@keras.saving.register_keras_serializable("tfx_accum")
class DecodeImage(keras.layers.Layer):
    """PNG/JPEG bytes ``(batch,)`` to float images ``(batch, height, width, channels)`` in
    [0, 1], resized to the training images' size."""

    def __init__(self, height: int, width: int, channels: int, **kwargs):
        super().__init__(**kwargs)
        self.height, self.width, self.channels = int(height), int(width), int(channels)
        self.supports_jit = False  # tf.io.decode_image has no XLA kernel

    def _decode(self, data):
        image = tf.io.decode_image(data, channels=self.channels, expand_animations=False)
        image = tf.image.resize(tf.cast(image, tf.float32), (self.height, self.width))
        return image / 255.0

    def call(self, inputs):
        return tf.map_fn(
            self._decode,
            inputs,
            fn_output_signature=tf.TensorSpec((self.height, self.width, self.channels), tf.float32),
        )

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "height": self.height,
            "width": self.width,
            "channels": self.channels,
        }


def _category_step(feature: InputFeature, name: str) -> keras.layers.Layer:
    if feature.vocabulary:
        return keras.layers.IntegerLookup(
            vocabulary=[int(v) for v in feature.vocabulary], output_mode="int", name=name
        )
    return keras.layers.Hashing(CATEGORY_BINS - 1, name=name)  # + 1 below: 0 stays unused


def _domain_index(value: tf.Tensor, domain: tuple[int, int]) -> tf.Tensor:
    """A value of the domain ``(low, high)`` as its index ``value - low + 1``; 0 for a
    missing value or one outside the domain."""
    value = tf.cast(value, tf.int64)
    inside = (value >= domain[0]) & (value <= domain[1])
    return tf.where(inside, value - domain[0] + 1, tf.zeros_like(value))


class Preprocessor(keras.layers.Layer):
    """Raw features (:func:`dense_raw`) to the model's inputs (keyed by their input names),
    and raw labels to what the model learns. Runs in the input pipeline and in serving."""

    def __init__(self, data: DataDescription, **kwargs):
        super().__init__(name="preprocessor", **kwargs)
        self.data = data
        self.steps = {}
        numeric = data.kind(NUMERIC)
        if data.numeric_vector and numeric:
            self.steps[NUMERIC_VECTOR] = FillMissing(
                [f.mean for f in numeric], name=f"fill_{NUMERIC_VECTOR}"
            )
        for feature in data.features:
            name = feature.input_name
            if feature.kind == NUMERIC or (
                feature.kind == TENSOR and feature.raw_dtype == "float32"
            ):
                if not (data.numeric_vector and feature.kind == NUMERIC):
                    self.steps[feature.name] = FillMissing(feature.mean, name=f"fill_{name}")
            elif feature.kind == STRING:
                # Index 0: missing ("") and values outside the vocabulary.
                self.steps[feature.name] = keras.layers.StringLookup(
                    vocabulary=list(feature.vocabulary) or ["<none>"],
                    output_mode="int",
                    name=f"lookup_{name}",
                )
            elif feature.kind == CATEGORICAL and feature.domain is None:
                self.steps[feature.name] = _category_step(feature, f"category_{name}")
            elif feature.kind == IMAGE:
                self.steps[feature.name] = DecodeImage(*feature.image_shape, name=f"decode_{name}")
        self.label_lookup = (
            keras.layers.StringLookup(
                vocabulary=list(data.label_vocabulary), num_oov_indices=0, name="label_lookup"
            )
            if data.label_vocabulary
            else None
        )

    def layers_to_export(self) -> list[keras.layers.Layer]:
        """Every preprocessing layer (for ``keras.export.ExportArchive.track``)."""
        return [*self.steps.values(), *([self.label_lookup] if self.label_lookup else [])]

    def call(self, raw: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        inputs = {}
        if NUMERIC_VECTOR in self.steps:
            columns = [raw[f.name] for f in self.data.kind(NUMERIC)]
            inputs[NUMERIC_VECTOR] = self.steps[NUMERIC_VECTOR](tf.concat(columns, axis=1))
        for feature in self.data.features:
            if self.data.numeric_vector and feature.kind == NUMERIC:  # in NUMERIC_VECTOR
                continue
            value = raw[feature.name]
            if feature.name in self.steps:
                value = self.steps[feature.name](value)
            if feature.kind == CATEGORICAL and feature.domain is not None:
                value = _domain_index(value, feature.domain)
            elif feature.kind == CATEGORICAL and not feature.vocabulary:
                value = tf.cast(value, tf.int64) + 1
            inputs[feature.input_name] = value
        return inputs

    def encode_label(self, label: tf.Tensor) -> tf.Tensor:
        """What the model learns: class indices (a label outside the vocabulary or range
        stops with an error), or the standardised regression target."""
        data = self.data
        if not data.classification:
            label = tf.cast(label, tf.float32)
            return (label - data.label_mean) / math.sqrt(data.label_variance)
        if self.label_lookup is not None:
            known = tf.reduce_all(
                tf.reduce_any(
                    tf.equal(label[:, None], tf.constant(data.label_vocabulary)[None, :]),
                    axis=1,
                )
            )
            tf.debugging.Assert(
                known,
                [f"a label of {data.label_key!r} is not in the training labels:", label],
                summarize=8,
            )
            return tf.cast(self.label_lookup(label), tf.int64)
        if label.dtype.is_floating:
            tf.debugging.Assert(
                tf.reduce_all(tf.equal(label, tf.round(label))),
                [f"a label of {data.label_key!r} is not a whole number:", label],
                summarize=8,
            )
        label = tf.cast(label, tf.int64)
        tf.debugging.Assert(
            tf.reduce_all((label >= 0) & (label < data.num_classes)),
            [
                f"a label of {data.label_key!r} is outside 0..{data.num_classes - 1}:",
                label,
            ],
            summarize=8,
        )
        return label

    def decode_prediction(self, output: tf.Tensor) -> tf.Tensor:
        """A regression output in the label's own units (classification: unchanged)."""
        if self.data.classification:
            return output
        return output * math.sqrt(self.data.label_variance) + self.data.label_mean
