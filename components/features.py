"""What the model's inputs are: the kind of every feature, learned from the training split.

ExampleGen hands the Tuner and Trainer ``tf.Example`` records; the schema says each
feature's type (INT, FLOAT or BYTES) but not what a BYTES feature holds, nor the
vocabularies and statistics a model needs. :func:`describe_data` learns them in one bounded
pass over the training split (the first ``STATS_ROWS`` examples):

- ``numeric`` (INT or FLOAT): mean and variance of the present values; a missing value is
  filled with the mean (which the model's normalisation maps to 0);
- ``string`` (BYTES): a vocabulary of the most frequent values (at most ``MAX_VOCABULARY``);
  a missing or unseen value maps to the out-of-vocabulary index 0;
- ``image`` (BYTES whose values are PNG or JPEG files): decoded and resized to the first
  image's height, width and channels, scaled to [0, 1];
- the label: integer class indices, or strings with a label vocabulary (sorted).

:class:`Preprocessor` is a Keras layer made of Keras preprocessing layers
(``StringLookup``) and two small ones of ours (:class:`FillMissing`, :class:`DecodeImage`).
It runs in the ``tf.data`` input pipeline during training, so the training step keeps
only dense tensors (and stays XLA-compilable), and it is exported with the model, so the
serving signature takes the raw serialized examples (image bytes, strings, missing
values) and applies the very vocabularies and statistics the model was trained with.

Example::

    data = describe_data(train_files, schema, "label")
    data.features[0].kind          # "numeric", "string" or "image"
    raw = parse_raw(serialized, data)       # dense raw tensors
    inputs = Preprocessor(data)(raw)        # the model's inputs
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2

from tfx_accum.components.feature_kinds import IMAGE, MAX_VOCABULARY, NUMERIC, STRING, is_image

STATS_ROWS = 100_000  # training examples the statistics and vocabularies are learned from


def natural_key(name: str) -> list:
    """Sorts ``pixel_2`` before ``pixel_10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


@dataclasses.dataclass(frozen=True)
class InputFeature:
    """One model input: its name, kind and what was learned about it."""

    name: str
    kind: str  # NUMERIC, STRING or IMAGE
    raw_dtype: str = "float32"  # as stored in the tf.Example: float32, int64 or string
    mean: float = 0.0
    variance: float = 1.0
    missing: int = 0  # examples of the statistics pass without a value
    vocabulary: tuple[str, ...] = ()
    image_shape: tuple[int, int, int] = (0, 0, 0)  # height, width, channels

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of one example's model input."""
        return self.image_shape if self.kind == IMAGE else (1,)

    @property
    def input_dtype(self) -> str:
        return "int64" if self.kind == STRING else "float32"


@dataclasses.dataclass(frozen=True)
class DataDescription:
    """The model's inputs and the label, as learned from the training split."""

    features: tuple[InputFeature, ...]
    label_key: str
    num_classes: int
    label_vocabulary: tuple[str, ...] = ()  # string labels; empty for class indices
    rows: int = 0  # examples the description was learned from

    @property
    def keys(self) -> list[str]:
        return [f.name for f in self.features]

    def kind(self, kind: str) -> list[InputFeature]:
        return [f for f in self.features if f.kind == kind]

    @property
    def values_per_example(self) -> int:
        """Numbers one preprocessed example holds (for the cache-size decision)."""
        return sum(int(np.prod(f.input_shape)) for f in self.features) + 1

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


def raw_spec(names_and_dtypes: dict[str, str]) -> dict[str, tf.io.RaggedFeature]:
    """A parse spec that accepts a feature with zero or more values (missing is allowed)."""
    return {
        name: tf.io.RaggedFeature(tf.as_dtype(dtype), row_splits_dtype=tf.int64)
        for name, dtype in names_and_dtypes.items()
    }


def _first_values(ragged: tf.RaggedTensor, fill) -> np.ndarray:
    """Each example's first value, ``fill`` where it has none."""
    return ragged.to_tensor(default_value=fill, shape=[None, 1]).numpy()[:, 0]


class _FeatureTally:
    """Running statistics of one feature over the statistics pass."""

    def __init__(self, name: str, raw_dtype: str):
        self.name, self.raw_dtype = name, raw_dtype
        self.count, self.total, self.total_sq, self.missing = 0, 0.0, 0.0, 0
        self.values: collections.Counter = collections.Counter()
        self.images = 0
        self.image_shape: tuple[int, int, int] | None = None

    def add(self, column: tf.RaggedTensor) -> None:
        lengths = column.row_lengths().numpy()
        self.missing += int((lengths == 0).sum())
        if self.raw_dtype == "string":
            values = column.flat_values.numpy()
            images = [v for v in values if is_image(v)]
            if images and self.image_shape is None:
                decoded = tf.io.decode_image(images[0], expand_animations=False)
                self.image_shape = tuple(decoded.shape)
            self.images += len(images)
            self.values.update(v for v in values if not is_image(v))
            return
        present = _first_values(tf.cast(column, tf.float64), np.nan)
        present = present[lengths > 0]
        self.count += present.size
        self.total += float(present.sum())
        self.total_sq += float((present**2).sum())

    def feature(self, rows: int) -> InputFeature:
        if self.raw_dtype != "string":
            mean = self.total / max(self.count, 1)
            variance = max(self.total_sq / max(self.count, 1) - mean**2, 1e-6)
            return InputFeature(self.name, NUMERIC, self.raw_dtype, mean, variance, self.missing)
        if self.images and not self.values:
            return InputFeature(
                self.name, IMAGE, "string", missing=self.missing, image_shape=self.image_shape
            )
        if self.images:
            raise ValueError(
                f"Feature {self.name!r} holds both images ({self.images} of {rows} examples) "
                "and other bytes; every value of an image feature must be a PNG or JPEG file."
            )
        ranked = sorted(self.values.items(), key=lambda item: (-item[1], item[0]))
        vocabulary = tuple(v.decode("utf-8", "replace") for v, _ in ranked if v)
        vocabulary = vocabulary[:MAX_VOCABULARY]  # "" is a missing value, not a category
        return InputFeature(
            self.name, STRING, "string", missing=self.missing, vocabulary=vocabulary
        )


def describe_data(
    dataset: tf.data.Dataset,
    schema: schema_pb2.Schema,
    label_key: str,
    num_classes: int | None = None,
    rows: int = STATS_ROWS,
) -> DataDescription:
    """Learns the inputs and the label from the first ``rows`` serialized examples.

    ``dataset``: serialized ``tf.Example`` records of the training split. ``num_classes``:
    the user's override, checked against the labels seen (a class index at or above it is
    an error); ``None`` infers it.
    """
    dtypes = {f.name: _raw_dtype(f) for f in schema.feature}
    if label_key not in dtypes:
        shown = ", ".join(sorted(dtypes, key=natural_key)[:10])
        raise ValueError(
            f"The label column {label_key!r} is not in the data (columns: {shown}...). "
            "Set the label key."
        )
    names = sorted((n for n in dtypes if n != label_key), key=natural_key)
    tallies = [_FeatureTally(n, dtypes[n]) for n in names]
    spec = raw_spec(dtypes)
    labels: collections.Counter = collections.Counter()
    seen, missing_labels = 0, 0
    for batch in dataset.take(rows).batch(4096):
        parsed = tf.io.parse_example(batch, spec)
        for tally in tallies:
            tally.add(parsed[tally.name])
        label = parsed[label_key]
        missing_labels += int((label.row_lengths().numpy() == 0).sum())
        fill = b"" if dtypes[label_key] == "string" else -1
        labels.update(_first_values(label, fill).tolist())
        seen += int(batch.shape[0])
    if seen == 0:
        raise ValueError("The training split is empty: the data has no rows to train on.")
    if missing_labels:
        raise ValueError(
            f"{missing_labels} of the first {seen} training examples have no {label_key!r} value."
        )
    features = tuple(t.feature(seen) for t in tallies)
    if dtypes[label_key] == "string":
        vocabulary = tuple(sorted(v.decode("utf-8", "replace") for v in labels))
        inferred = len(vocabulary)
        if num_classes is not None and num_classes != inferred:
            raise ValueError(
                f"num_classes={num_classes}, but the label {label_key!r} has {inferred} "
                f"distinct values ({', '.join(vocabulary[:6])}...); leave num_classes out "
                "to use the label vocabulary."
            )
        return DataDescription(features, label_key, inferred, vocabulary, seen)
    values = np.array(list(labels), "float64")
    if (values < 0).any() or (values != np.round(values)).any():
        bad = values[(values < 0) | (values != np.round(values))][0]
        raise ValueError(f"Label {bad:g} is not a class index (an integer >= 0).")
    inferred = int(values.max()) + 1
    if num_classes is not None and inferred > num_classes:
        raise ValueError(
            f"Label {inferred - 1} is outside 0..{num_classes - 1} (num_classes={num_classes}); "
            "raise num_classes or leave it out to infer it from the data."
        )
    return DataDescription(features, label_key, num_classes or max(inferred, 2), (), seen)


def _label_dtype(data: DataDescription) -> str:
    return "string" if data.label_vocabulary else "int64"


def parse_raw(
    serialized: tf.Tensor, data: DataDescription, with_label: bool = False
) -> dict[str, tf.Tensor]:
    """Dense raw features of a batch of serialized examples, in one parse: ``(batch, 1)``
    numbers (NaN where missing) and strings ("" where missing), ``(batch,)`` image bytes;
    with ``with_label``, also the raw label ``(batch,)`` under ``data.label_key``."""
    dtypes = {f.name: f.raw_dtype for f in data.features}
    if with_label:
        dtypes[data.label_key] = _label_dtype(data)
    parsed = tf.io.parse_example(serialized, raw_spec(dtypes))
    raw = {}
    for feature in data.features:
        column = parsed[feature.name]
        if feature.kind == NUMERIC:
            column = tf.cast(column, tf.float32)
            raw[feature.name] = column.to_tensor(default_value=np.nan, shape=[None, 1])
        elif feature.kind == STRING:
            raw[feature.name] = column.to_tensor(default_value="", shape=[None, 1])
        else:
            raw[feature.name] = column.to_tensor(default_value="", shape=[None, 1])[:, 0]
    if with_label:
        raw[data.label_key] = _dense_label(parsed[data.label_key], data)
    return raw


def parse_label(serialized: tf.Tensor, data: DataDescription) -> tf.Tensor:
    """The raw label of each serialized example, ``(batch,)``."""
    parsed = tf.io.parse_example(serialized, raw_spec({data.label_key: _label_dtype(data)}))
    return _dense_label(parsed[data.label_key], data)


def _dense_label(label: tf.RaggedTensor, data: DataDescription) -> tf.Tensor:
    fill = "" if data.label_vocabulary else -1  # a missing label fails encode_label
    return label.to_tensor(default_value=fill, shape=[None, 1])[:, 0]


@keras.saving.register_keras_serializable("tfx_accum")
class FillMissing(keras.layers.Layer):
    """Replaces NaN (a missing value) with ``value``, the feature's training mean."""

    def __init__(self, value: float, **kwargs):
        super().__init__(**kwargs)
        self.value = float(value)

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


class Preprocessor(keras.layers.Layer):
    """Raw features (:func:`parse_raw`) to the model's inputs, and raw labels to class
    indices. Runs in the input pipeline and in the serving signature."""

    def __init__(self, data: DataDescription, **kwargs):
        super().__init__(name="preprocessor", **kwargs)
        self.data = data
        self.steps = {}
        for feature in data.features:
            if feature.kind == NUMERIC:
                self.steps[feature.name] = FillMissing(feature.mean, name=f"fill_{feature.name}")
            elif feature.kind == STRING:
                # Index 0: missing ("") and values outside the vocabulary.
                self.steps[feature.name] = keras.layers.StringLookup(
                    vocabulary=list(feature.vocabulary) or ["<none>"],
                    output_mode="int",
                    name=f"lookup_{feature.name}",
                )
            else:
                self.steps[feature.name] = DecodeImage(
                    *feature.image_shape, name=f"decode_{feature.name}"
                )
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
        return {name: step(raw[name]) for name, step in self.steps.items()}

    def encode_label(self, label: tf.Tensor) -> tf.Tensor:
        """Class indices; a label outside the vocabulary or range stops with an error."""
        if self.label_lookup is not None:
            known = tf.reduce_all(
                tf.reduce_any(
                    tf.equal(label[:, None], tf.constant(self.data.label_vocabulary)[None, :]),
                    axis=1,
                )
            )
            tf.debugging.Assert(
                known,
                [f"a label of {self.data.label_key!r} is not in the training labels:", label],
                summarize=8,
            )
            return tf.cast(self.label_lookup(label), tf.int64)
        label = tf.cast(label, tf.int64)
        tf.debugging.Assert(
            tf.reduce_all((label >= 0) & (label < self.data.num_classes)),
            [
                f"a label of {self.data.label_key!r} is outside 0..{self.data.num_classes - 1}:",
                label,
            ],
            summarize=8,
        )
        return label
