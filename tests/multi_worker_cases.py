"""The models and data that tests/accumulation/test_multi_worker.py trains on two workers and
on one device.

Each case: a model builder, its data (a ``tf.data`` pipeline batched at the *global*
batch, no shuffling), and its ``compile`` arguments. The worker processes
(tests/multi_worker_worker.py) train a GradientAccumulationModel under
``MultiWorkerMirroredStrategy``; the test process trains a plain ``keras.Model`` on the
same batches with no strategy, and compares every weight and optimizer slot.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from equivalence import classification_data, dense_classifier
from test_exactness_matrix import masked_and_plain_outputs, sequence_data

from tfx_accum.components.data.datasets import batched

GLOBAL_BATCH = 32
ACCUMULATION_STEPS = 4  # k over all replicas: ceil(4 / 2) = 2 micro-batches per replica
MICRO_BATCH = 8
EPOCHS = 2


def _dense_data(n: int):
    x, y, sample_weight = classification_data(n=n)
    return tf.data.Dataset.from_tensor_slices((x, y, sample_weight)).batch(GLOBAL_BATCH)


def _shuffled_data(n: int):
    x, y, sample_weight = classification_data(n=n)
    examples = tf.data.Dataset.from_tensor_slices((x, y, sample_weight))
    return batched(examples, GLOBAL_BATCH, shuffle_seed=7)


def _sequence_data(n: int):
    x, y = sequence_data(n=n)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)


CASES = {
    # 33 = 32 + 1: in the last batch one worker has no sample at all. A "sum" loss is
    # not divided by the replica count; sample weights and an L2 regularizer ride along.
    "sum_loss_empty_worker": dict(
        build=dense_classifier,
        data=lambda: _dense_data(33),
        compile=lambda: dict(
            loss=keras.losses.SparseCategoricalCrossentropy(reduction="sum"),
            optimizer=keras.optimizers.SGD(0.005, momentum=0.9),
        ),
        accumulate=True,
    ),
    # A masked output (valid tokens) and a plain one, each with its own global
    # denominator; 45 = 32 + 13: the last batch gives the workers 7 and 6 samples.
    "masked_outputs_uneven": dict(
        build=masked_and_plain_outputs,
        data=lambda: _sequence_data(45),
        compile=lambda: dict(
            loss={
                "tags": "sparse_categorical_crossentropy",
                "label": "sparse_categorical_crossentropy",
            },
            loss_weights={"tags": 1.0, "label": 0.3},
            optimizer=keras.optimizers.Adam(0.01),
        ),
        accumulate=True,
    ),
    # Plain Keras under the same strategy (what fails with TensorFlow's own class), on
    # the Trainer's seeded, reshuffled, repeated stream: Keras reads it once before
    # training under a strategy, and the stream must still be one device's.
    "plain_keras_shuffled": dict(
        build=lambda: dense_classifier(regularized=False),
        data=lambda: _shuffled_data(40),
        compile=lambda: dict(
            loss="sparse_categorical_crossentropy", optimizer=keras.optimizers.SGD(0.1)
        ),
        accumulate=False,
        fit=dict(steps_per_epoch=3),
    ),
}


def initial_model(name: str) -> keras.Model:
    """The case's model with its seeded initial weights (the same in every process)."""
    keras.utils.set_random_seed(0)
    return CASES[name]["build"]()


def state(model: keras.Model) -> dict[str, np.ndarray]:
    """Every weight and optimizer variable, named by position, for an ``.npz`` file."""
    arrays = {f"w{i}": np.asarray(w) for i, w in enumerate(model.get_weights())}
    arrays.update({f"o{i}": np.asarray(v) for i, v in enumerate(model.optimizer.variables)})
    return arrays
