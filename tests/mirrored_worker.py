"""Runs in a subprocess: two logical CPU devices must be configured before TF starts.

Trains a plain model on one device and a GradientAccumulationModel under
MirroredStrategy over two logical CPUs on the same batches; prints the max differences
as JSON on the last line.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# the shared cases of tests/accumulation/test_exactness_matrix.py and test_accumulation.py
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "accumulation"))

import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)

import keras  # noqa: E402
import numpy as np  # noqa: E402
from equivalence import (  # noqa: E402
    classification_data,
    dense_classifier,
    max_abs_diff,
    optimizer_state,
)
from test_accumulation import masked_sequence_model  # noqa: E402
from test_exactness_matrix import masked_and_plain_outputs, sequence_data  # noqa: E402

from tfx_accum.components import GradientAccumulationModel  # noqa: E402

# One strategy per process: separate MirroredStrategy objects reuse collective instance keys.
STRATEGY = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def run(build, make_data, loss, optimizer, steps=4):
    keras.utils.set_random_seed(0)
    plain = build()
    plain.compile(optimizer=optimizer(), loss=loss)
    plain.fit(make_data(), epochs=2, verbose=0)
    with STRATEGY.scope():
        keras.utils.set_random_seed(0)
        ga = GradientAccumulationModel.from_model(build(), gradient_accumulation_steps=steps)
        ga.compile(optimizer=optimizer(), loss=loss)
    ga.fit(make_data(), epochs=2, verbose=0)
    return {
        "weights": max_abs_diff(plain.get_weights(), ga.get_weights()),
        "slots": max_abs_diff(optimizer_state(plain), optimizer_state(ga)),
        "iterations": [
            int(np.asarray(plain.optimizer.iterations)),
            int(np.asarray(ga.optimizer.iterations)),
        ],
        "replicas": STRATEGY.num_replicas_in_sync,
    }


def dense_data(n):
    def make():
        x, y, sw = classification_data(n=n)
        return tf.data.Dataset.from_tensor_slices((x, y, sw)).batch(32)

    return make


def masked_data():
    rng = np.random.default_rng(1)
    x = rng.integers(1, 20, (30, 7))
    lengths = rng.integers(1, 8, 30)
    x[np.arange(7)[None, :] >= lengths[:, None]] = 0
    y = rng.integers(0, 5, (30, 7))
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(16)


def two_output_data():
    x, y = sequence_data(n=45)  # 45 = 32 + 13: uneven per-replica last batch
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(32)


def synchronized_batch_normalization() -> dict:
    """BatchNormalization(synchronized=True) under the strategy: refused in one line."""
    with STRATEGY.scope():
        inputs = keras.Input((8,))
        hidden = keras.layers.BatchNormalization(synchronized=True, name="sync_bn")(
            keras.layers.Dense(4)(inputs)
        )
        model = GradientAccumulationModel(
            inputs,
            keras.layers.Dense(3, activation="softmax")(hidden),
            gradient_accumulation_steps=2,
        )
        model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    before = model.get_weights()
    try:
        model.fit(dense_data(64)(), epochs=1, verbose=0)
        error = None
    except ValueError as exc:
        error = str(exc)
    return {"error": error, "unchanged": max_abs_diff(before, model.get_weights()) == 0.0}


results = {
    # 100 = 3 x 32 + 4: the last batch gives each replica 2 samples.
    "sgd_uneven": run(
        dense_classifier,
        dense_data(100),
        "sparse_categorical_crossentropy",
        lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    ),
    # 33 = 32 + 1: in the last batch one replica has no sample at all.
    "adam_empty_replica": run(
        dense_classifier,
        dense_data(33),
        "sparse_categorical_crossentropy",
        lambda: keras.optimizers.Adam(0.01),
    ),
    "masked_sgd": run(
        masked_sequence_model,
        masked_data,
        "sparse_categorical_crossentropy",
        lambda: keras.optimizers.SGD(0.1),
    ),
    # A "sum" loss is not divided by the replica count; sample weights ride along.
    "sum_loss_sgd": run(
        dense_classifier,
        dense_data(100),
        keras.losses.SparseCategoricalCrossentropy(reduction="sum"),
        lambda: keras.optimizers.SGD(0.005),
    ),
    # A masked and a plain output, each with its own global denominator.
    "masked_and_plain_adam": run(
        masked_and_plain_outputs,
        two_output_data,
        "sparse_categorical_crossentropy",
        lambda: keras.optimizers.Adam(0.01),
    ),
}
results["synchronized_batch_normalization"] = synchronized_batch_normalization()
print(json.dumps(results))
