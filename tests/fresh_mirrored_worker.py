"""Runs in a fresh subprocess: ``python fresh_mirrored_worker.py REPLICAS``.

What a multi-GPU user does first: in a process where nothing of tfx-accum ran before,
a GradientAccumulationModel is built, compiled and fit *inside* a MirroredStrategy's scope
over REPLICAS logical CPUs, on data whose last batch is uneven, with sample weights. Then the
same for plain Keras under the same strategy, and for plain Keras on one device. Prints the
max differences as JSON on the last line (or the first error, as ``{"error": ...}``).
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
REPLICAS = int(sys.argv[1])

import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(REPLICAS)]
)

import keras  # noqa: E402
import numpy as np  # noqa: E402
from equivalence import (  # noqa: E402
    classification_data,
    dense_classifier,
    max_abs_diff,
    optimizer_state,
)

from tfx_accum.components import GradientAccumulationModel  # noqa: E402

# One strategy per process: separate MirroredStrategy objects reuse collective instance keys.
STRATEGY = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(REPLICAS)])
BATCH = 12 * REPLICAS  # the global batch: every replica gets 12 rows of a full batch


def data(n: int) -> tf.data.Dataset:
    x, y, sw = classification_data(n=n)
    return tf.data.Dataset.from_tensor_slices((x, y, sw)).batch(BATCH)


def train(ga: bool, n: int, strategy: tf.distribute.Strategy | None, steps: int = 4):
    """A model trained 2 epochs; built, compiled and fit inside ``strategy``'s scope."""
    scope = strategy.scope() if strategy is not None else tf.distribute.get_strategy().scope()
    with scope:
        keras.utils.set_random_seed(0)
        model = dense_classifier()
        if ga:
            model = GradientAccumulationModel.from_model(model, gradient_accumulation_steps=steps)
        model.compile(
            optimizer=keras.optimizers.Adam(0.01),
            loss="sparse_categorical_crossentropy",
            weighted_metrics=["accuracy"],
        )
        history = model.fit(data(n), epochs=2, verbose=0)
    return model, history.history


def compare(a, b) -> dict:
    (ma, ha), (mb, hb) = a, b
    return {
        "weights": max_abs_diff(ma.get_weights(), mb.get_weights()),
        "slots": max_abs_diff(optimizer_state(ma), optimizer_state(mb)),
        "iterations": [int(np.asarray(m.optimizer.iterations)) for m in (ma, mb)],
        "logs": max(abs(ha[k][-1] - hb[k][-1]) for k in ("loss", "accuracy")),
    }


try:
    # GA first: nothing of tfx-accum has run in this process before this fit.
    even = 4 * BATCH  # whole batches: plain Keras under the strategy is the large batch
    uneven = 4 * BATCH + REPLICAS + 1  # a short last batch, split unevenly among replicas
    ga_even = train(True, even, STRATEGY)
    results = {
        "replicas": STRATEGY.num_replicas_in_sync,
        # The same strategy, whole batches: GA must equal plain Keras there.
        "even_vs_plain_mirrored": compare(ga_even, train(False, even, STRATEGY)),
        # A short last batch: Keras's per-replica means weigh its rows unevenly, GA's global
        # denominators do not; the reference is the large batch on one device.
        "uneven_vs_one_device": compare(train(True, uneven, STRATEGY), train(False, uneven, None)),
        # For the record: plain Keras's own error there (not asserted; it is Keras's).
        "plain_mirrored_uneven_vs_one_device": compare(
            train(False, uneven, STRATEGY), train(False, uneven, None)
        ),
        # k not divisible by the replicas, and k = 1.
        "k3_vs_one_device": compare(
            train(True, uneven, STRATEGY, steps=3), train(False, uneven, None)
        ),
        "k1_vs_one_device": compare(
            train(True, uneven, STRATEGY, steps=1), train(False, uneven, None)
        ),
    }
except Exception as error:  # noqa: BLE001 - reported to the test, in one line
    results = {"error": f"{type(error).__name__}: {error}"}
print(json.dumps(results))
