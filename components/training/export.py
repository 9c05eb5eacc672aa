"""Exports a trained model as a serving SavedModel for Evaluator and TF Serving.

The ``serving_default`` signature takes serialized ``tf.Example`` protos (input name
``examples``) carrying the raw input features under the data's own names (numbers, strings,
encoded image bytes; a feature may be missing; features the model does not use are not
read), applies the preprocessing learned from the training split
(:class:`~tfx_accum.components.data.features.Preprocessor`) and returns, per task
(components/data/tasks.py):

- classification: ``{"scores": class probabilities, "classes": the most likely class}``
  (a model whose compiled loss takes ``from_logits=True`` gets a softmax here);
  ``classes`` (``(batch, 1)``) are the label's own values (string labels) or class indices
  as strings;
- regression: ``{"predictions": the predicted value, in the label's units}``.

A second signature, ``transform_labels``, maps serialized examples to their label as the
Evaluator compares it with the output (TFMA's ``preprocessing_function_names``): the class
index (so that string labels are compared with the scores by index), or the label's value.
The export is a plain SavedModel: nothing of the accumulation logic is in it.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tfx_accum.components.data import transform
from tfx_accum.components.data.features import DataDescription, Preprocessor
from tfx_accum.components.data.raw_features import dense_raw
from tfx_accum.components.data.raw_features import parse_label as _parse_label
from tfx_accum.components.data.raw_features import parse_raw as _parse_raw
from tfx_accum.components.data.tasks import (
    PREDICTION_KEYS,
    PREDICTIONS_KEY,
    REGRESSION,
    SCORES_KEY,
)

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

    With ``transform_output`` (TFX Transform's graph: components/data/transform.py) the served
    examples are raw: the transform graph is applied before the preprocessing, and a
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
        parse_raw, parse_label = _parse_raw, _parse_label
    if data.classification:
        names = list(data.label_vocabulary) or [str(i) for i in range(data.num_classes)]
        class_names = tf.constant(names)
        logits = outputs_logits(model)

        @tf.function(input_signature=[examples])
        def serve(serialized):
            # float32 also where a model of your own computes its output in half precision.
            scores = model(preprocessor(parse_raw(serialized, data)), training=False)
            scores = tf.cast(scores, tf.float32)
            if logits:  # served scores are probabilities, whatever the last layer
                scores = tf.nn.softmax(scores, axis=-1)
            return {
                OUTPUT_KEY: scores,
                # (batch, 1), as TF's classification signatures shape ``classes``: TFX's
                # BulkInferrer (tfx_bsl) splits each output by row and needs an array per row.
                CLASSES_KEY: tf.gather(class_names, tf.argmax(scores, -1))[:, None],
            }

        @tf.function(input_signature=[examples])
        def transform_labels(serialized):
            return {data.label_key: preprocessor.encode_label(parse_label(serialized, data))}

    else:

        @tf.function(input_signature=[examples])
        def serve(serialized):
            output = model(preprocessor(parse_raw(serialized, data)), training=False)
            output = tf.cast(output, tf.float32)  # as above
            return {PREDICTION_KEYS[data.task]: preprocessor.decode_prediction(output)}

        @tf.function(input_signature=[examples])
        def transform_labels(serialized):
            return {data.label_key: tf.cast(parse_label(serialized, data), tf.float32)}

    archive.add_endpoint(SERVING_SIGNATURE, serve)
    archive.add_endpoint(LABELS_SIGNATURE, transform_labels)
    archive.write_out(export_dir, verbose=False)


def outputs_logits(model: keras.Model) -> bool:
    """Whether the model's output is logits: its compiled loss says ``from_logits=True``
    (a model function's own loss, as in TFX's penguin example)."""
    loss = getattr(model, "loss", None)
    losses = loss.values() if isinstance(loss, dict) else loss if isinstance(loss, list) else [loss]
    return any(
        isinstance(item, keras.losses.Loss) and item.get_config().get("from_logits", False)
        for item in losses
    )


def _transformed_parsers(archive, data: DataDescription, path: str, examples: tf.TensorSpec):
    """``(parse_raw, parse_label)`` of raw serialized examples through the transform graph,
    and the ``transform_features`` endpoint on ``archive``."""
    output = transform.load(path)
    layer = output.transform_features_layer()
    archive.track(layer)
    serving_spec = transform.serving_raw_spec(path, {f.name for f in data.features})
    raw_spec = output.raw_feature_spec()

    def parse_raw(serialized, data):
        return dense_raw(layer(tf.io.parse_example(serialized, serving_spec)), data)

    def parse_label(serialized, data):
        transformed = layer(tf.io.parse_example(serialized, raw_spec))
        return dense_raw(transformed, data, with_label=True)[data.label_key]

    @tf.function(input_signature=[examples])
    def transform_features(serialized):
        return layer(tf.io.parse_example(serialized, raw_spec))

    archive.add_endpoint(transform.TRANSFORM_FEATURES_SIGNATURE, transform_features)
    return parse_raw, parse_label
