"""Exports a trained model as a serving SavedModel for Evaluator and TF Serving.

The ``serving_default`` signature takes serialized ``tf.Example`` protos (input name
``examples``) carrying the input feature names, and returns ``{"scores": probabilities}``.
The export is a plain SavedModel: nothing of the accumulation logic is in it.
"""

from __future__ import annotations

import keras
import tensorflow as tf

SERVING_SIGNATURE = "serving_default"
OUTPUT_KEY = "scores"


def export_serving_model(
    model: keras.Model, spec: dict[str, tf.io.FixedLenFeature], export_dir: str
) -> None:
    """Writes ``model`` to ``export_dir`` with a tf.Example-parsing serving signature."""
    archive = keras.export.ExportArchive()
    archive.track(model)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        features = {key: tf.cast(value, tf.float32) for key, value in parsed.items()}
        return {OUTPUT_KEY: model(features, training=False)}

    archive.add_endpoint(SERVING_SIGNATURE, serve)
    archive.write_out(export_dir, verbose=False)
