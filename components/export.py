"""Exports a trained model as a serving SavedModel for Evaluator and TF Serving.

The ``serving_default`` signature takes serialized ``tf.Example`` protos (input name
``examples``) carrying the raw input features under the data's own names (numbers, strings,
encoded image bytes; a feature may be missing; features the model does not use are not
read), applies the preprocessing learned from the training split
(:class:`~tfx_accum.components.features.Preprocessor`) and returns, per task
(components/tasks.py):

- classification: ``{"scores": class probabilities, "classes": the most likely class}``;
  ``classes`` are the label's own values (string labels) or class indices as strings;
- regression: ``{"predictions": the predicted value, in the label's units}``.

A second signature, ``transform_labels``, maps serialized examples to their label as the
Evaluator compares it with the output (TFMA's ``preprocessing_function_names``): the class
index (so that string labels are compared with the scores by index), or the label's value.
The export is a plain SavedModel: nothing of the accumulation logic is in it.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tfx_accum.components.features import DataDescription, Preprocessor, parse_label, parse_raw
from tfx_accum.components.tasks import PREDICTION_KEYS, SCORES_KEY

SERVING_SIGNATURE = "serving_default"
LABELS_SIGNATURE = "transform_labels"
OUTPUT_KEY = SCORES_KEY  # classification; regression: tasks.PREDICTIONS_KEY
CLASSES_KEY = "classes"


def export_serving_model(
    model: keras.Model, data: DataDescription, preprocessor: Preprocessor, export_dir: str
) -> None:
    """Writes ``model`` with its preprocessing to ``export_dir``, serving tf.Examples."""
    archive = keras.export.ExportArchive()
    archive.track(model)
    # Each preprocessing layer, so that the lookup tables of StringLookup are saved (Keras
    # finds them only under what is tracked; the layers sit in a dict of the preprocessor).
    for layer in preprocessor.layers_to_export():
        archive.track(layer)
    examples = tf.TensorSpec([None], tf.string, name="examples")
    if data.classification:
        names = list(data.label_vocabulary) or [str(i) for i in range(data.num_classes)]
        class_names = tf.constant(names)

        @tf.function(input_signature=[examples])
        def serve(serialized):
            # float32 also where a model of your own computes its output in half precision.
            scores = model(preprocessor(parse_raw(serialized, data)), training=False)
            scores = tf.cast(scores, tf.float32)
            return {
                OUTPUT_KEY: scores,
                CLASSES_KEY: tf.gather(class_names, tf.argmax(scores, -1)),
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
