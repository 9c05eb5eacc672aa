"""One worker of a two-worker cluster (``TF_CONFIG``) that uses TensorFlow's own strategy.

Builds a GradientAccumulationModel inside ``tf.distribute.MultiWorkerMirroredStrategy()``,
as a user following TensorFlow's guide would, and prints what happened as JSON: Keras 3's
fit would crash there with "Attempt to convert a value (PerReplica...)"; the model says so
in one line, naming the public strategy that works (tests/accumulation/test_keras_surprises.py).
"""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfx_accum  # noqa: E402
from tfx_accum.components.accumulation import multi_worker_strategy  # noqa: E402

strategy = tf.distribute.MultiWorkerMirroredStrategy()
try:
    with strategy.scope():
        inputs = keras.Input((4,))
        tfx_accum.GradientAccumulationModel(
            inputs, keras.layers.Dense(1)(inputs), gradient_accumulation_steps=2
        )
    error = None
except ValueError as raised:
    error = str(raised)
print(
    json.dumps(
        {
            "error": error,
            "public": tfx_accum.MultiWorkerMirroredStrategy
            is multi_worker_strategy.MultiWorkerMirroredStrategy,
        }
    )
)
