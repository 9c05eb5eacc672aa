"""Exports a trained model as a serving SavedModel for Evaluator and TF Serving.

The ``serving_default`` signature takes serialized ``tf.Example`` protos (input name
``examples``) carrying the raw input features under the data's own names (numbers, strings,
encoded image bytes; a feature may be missing; features the model does not use are not
read), applies the preprocessing learned from the training split
(:class:`~tfx_accum.components.data.features.Preprocessor`) and returns, per task
(tfx_accum.components.config.tasks):

- classification: ``{"scores": class probabilities, "classes": the most likely class}``
  (a model whose compiled loss takes ``from_logits=True`` gets a softmax here). A model of
  one output unit for two classes (a sigmoid, TFX's taxi example) is served as it is
  built: ``scores`` ``(batch, 1)``, class 1's probability (a sigmoid here for a logit),
  what a TFMA ``BinaryAccuracy`` or ``AUC`` reads;
  ``classes`` (``(batch, 1)``) are the label's own values (string labels) or class indices
  as strings;
- regression: ``{"predictions": the predicted value, in the label's units}``.

A second signature, ``transform_labels``, maps serialized examples to their label as the
Evaluator compares it with the output (TFMA's ``preprocessing_function_names``): the class
index (so that string labels are compared with the scores by index), or the label's value.
The export is a plain SavedModel: nothing of the accumulation logic is in it.

**Numbers that are not finite** are refused, not scored: ``serving_default`` raises
``InvalidArgumentError`` (TF Serving answers ``INVALID_ARGUMENT`` with the message) when a
request's float feature holds inf, -inf or NaN, naming the feature, the example and the
value (a missing value is an absent feature or an empty list); and when a finite number
is more than ``MAX_DEVIATIONS`` (1e12) standard deviations from its feature's training
mean (3e38: the model's float32 arithmetic would overflow, giving NaN or a plausible
score) or the output is not finite, naming the example and its numeric feature furthest
from the mean. The Evaluator and the BulkInferrer call the same signature; the input
checks refuse non-finite values in the data.
"""

from __future__ import annotations

import functools

import keras
import tensorflow as tf

from tfx_accum.components.config.tasks import (
    PREDICTION_KEYS,
    PREDICTIONS_KEY,
    REGRESSION,
    SCORES_KEY,
)
from tfx_accum.components.data import transform
from tfx_accum.components.data.feature_kinds import NUMERIC
from tfx_accum.components.data.features import DataDescription, Preprocessor
from tfx_accum.components.data.raw_features import assert_finite_numbers, dense_raw
from tfx_accum.components.data.raw_features import parse_label as _parse_label
from tfx_accum.components.data.raw_features import parse_raw as _parse_raw
from tfx_accum.components.models.custom_model import outputs_logits

SERVING_SIGNATURE = "serving_default"
LABELS_SIGNATURE = "transform_labels"
OUTPUT_KEY = SCORES_KEY  # classification; regression: tasks.PREDICTIONS_KEY
CLASSES_KEY = "classes"


def serving_outputs(task: str, num_classes: int | None) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The outputs of the ``serving_default`` signature an export for ``task`` has, as
    ``{name: (dtype, shape)}`` (``-1``: the batch), what a model server's clients read."""
    if task == REGRESSION:
        return {PREDICTIONS_KEY: ("float32", (-1, 1))}
    return {CLASSES_KEY: ("string", (-1, 1)), OUTPUT_KEY: ("float32", (-1, int(num_classes or 0)))}


def export_serving_model(
    model: keras.Model,
    data: DataDescription,
    preprocessor: Preprocessor,
    export_dir: str,
    transform_output: str | None = None,
) -> None:
    """Writes ``model`` with its preprocessing to ``export_dir``, serving tf.Examples.

    With ``transform_output`` (TFX Transform's graph: tfx_accum.components.data.transform) the
    served examples are raw: the transform graph is applied before the preprocessing, and a
    ``transform_features`` signature is added.
    """
    archive = keras.export.ExportArchive()
    archive.track(model)
    # Each preprocessing layer, so that the lookup tables of StringLookup are saved (Keras
    # finds them only under what is tracked; the layers sit in a dict of the preprocessor).
    for layer in preprocessor.layers_to_export():
        archive.track(layer)
    examples = tf.TensorSpec([None], tf.string, name="examples")
    if transform_output:
        parse_raw, parse_label = _transformed_parsers(archive, data, transform_output, examples)
    else:
        parse_raw, parse_label = functools.partial(_parse_raw, finite=True), _parse_label
    if data.classification:
        names = list(data.label_vocabulary) or [str(i) for i in range(data.num_classes)]
        class_names = tf.constant(names)
        logits = outputs_logits(model)
        one_unit = model.outputs[0].shape[-1] == 1  # class 1's probability (binary)

        @tf.function(input_signature=[examples])
        def serve(serialized):
            raw = parse_raw(serialized, data)
            # float32 also where a model of your own computes its output in half precision.
            scores = tf.cast(model(preprocessor(raw), training=False), tf.float32)
            if one_unit:
                if logits:
                    scores = tf.sigmoid(scores)
                chosen = tf.cast(scores[:, 0] > 0.5, tf.int64)
            else:
                if logits:  # served scores are probabilities, whatever the last layer
                    scores = tf.nn.softmax(scores, axis=-1)
                chosen = tf.argmax(scores, -1)
            _assert_in_range(scores, raw, data)
            return {
                OUTPUT_KEY: scores,
                # (batch, 1), as TF's classification signatures shape ``classes``: TFX's
                # BulkInferrer (tfx_bsl) splits each output by row and needs an array per row.
                CLASSES_KEY: tf.gather(class_names, chosen)[:, None],
            }

        @tf.function(input_signature=[examples])
        def transform_labels(serialized):
            return {data.label_key: preprocessor.encode_label(parse_label(serialized, data))}

    else:

        @tf.function(input_signature=[examples])
        def serve(serialized):
            raw = parse_raw(serialized, data)
            output = tf.cast(model(preprocessor(raw), training=False), tf.float32)  # as above
            output = preprocessor.decode_prediction(output)
            _assert_in_range(output, raw, data)
            return {PREDICTION_KEYS[data.task]: output}

        @tf.function(input_signature=[examples])
        def transform_labels(serialized):
            return {data.label_key: tf.cast(parse_label(serialized, data), tf.float32)}

    archive.add_endpoint(SERVING_SIGNATURE, serve)
    archive.add_endpoint(LABELS_SIGNATURE, transform_labels)
    archive.write_out(export_dir, verbose=False)


# A served number further than this from its feature's training mean, in standard
# deviations, is refused: float32 arithmetic in the model would overflow on it (3e38 with a
# spread of 0.5 is beyond float32's range at the first normalisation) and the score would
# be NaN or a plausible-looking number. A training value lies within sqrt(n) of its mean.
MAX_DEVIATIONS = 1e12
OUT_OF_RANGE = (
    f"A served example holds a number the model cannot compute with in float32: more than "
    f"{MAX_DEVIATIONS:.0e} standard deviations from its feature's training mean, or one that "
    "makes the output inf or NaN. Example, the feature furthest from its mean, its value:"
)


def _assert_in_range(output: tf.Tensor, raw: dict[str, tf.Tensor], data) -> None:
    """Raises ``InvalidArgumentError`` for the first example with a numeric feature beyond
    ``MAX_DEVIATIONS`` or an output that is not finite, naming the example and its numeric
    feature furthest from the training mean."""
    good = tf.reduce_all(tf.math.is_finite(output), axis=list(range(1, output.shape.rank)))
    numeric = data.kind(NUMERIC)
    culprit: list = ["(no numeric feature)", ""]
    if numeric:
        values = tf.cast(tf.concat([raw[f.name] for f in numeric], 1), tf.float64)
        mean = tf.constant([f.mean for f in numeric], tf.float64)
        scale = tf.sqrt(tf.constant([f.variance for f in numeric], tf.float64))
        distance = tf.abs(values - mean) / scale
        distance = tf.where(tf.math.is_nan(distance), tf.zeros_like(distance), distance)  # missing
        good = good & tf.reduce_all(distance <= MAX_DEVIATIONS, axis=1)
    # The first example refused; the batch size (a sentinel row of zeros) if none.
    example = tf.argmax(tf.concat([tf.cast(tf.logical_not(good), tf.int32), [1]], 0))
    if numeric:
        pad = tf.zeros([1, len(numeric)], tf.float64)
        row = tf.concat([distance, pad], 0)[example]
        furthest = tf.argmax(row)
        value = tf.concat([values, pad], 0)[example][furthest]
        culprit = [tf.gather(tf.constant([f.name for f in numeric]), furthest), value]
    tf.debugging.Assert(tf.reduce_all(good), [OUT_OF_RANGE, example, *culprit])


def _transformed_parsers(archive, data: DataDescription, path: str, examples: tf.TensorSpec):
    """``(parse_raw, parse_label)`` of raw serialized examples through the transform graph,
    and the ``transform_features`` endpoint on ``archive``."""
    output = transform.load(path)
    layer = output.transform_features_layer()
    archive.track(layer)
    serving_spec = transform.serving_raw_spec(path, {f.name for f in data.features})
    raw_spec = output.raw_feature_spec()

    def parse_raw(serialized, data):
        parsed = tf.io.parse_example(serialized, serving_spec)
        assert_finite_numbers(parsed)
        return dense_raw(layer(parsed), data)

    def parse_label(serialized, data):
        transformed = layer(tf.io.parse_example(serialized, raw_spec))
        return dense_raw(transformed, data, with_label=True)[data.label_key]

    @tf.function(input_signature=[examples])
    def transform_features(serialized):
        return layer(tf.io.parse_example(serialized, raw_spec))

    archive.add_endpoint(transform.TRANSFORM_FEATURES_SIGNATURE, transform_features)
    return parse_raw, parse_label
