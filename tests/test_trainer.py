"""The Trainer module's pieces (components/trainer.py)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfx_accum.components.trainer import StopAfterUpdates


def test_training_stops_after_exactly_train_steps_updates():
    """Whole epochs of 37 updates, and the last one stops at 300 (the Trainer's plan)."""
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((37 * 4, 4), "float32")
    data = tf.data.Dataset.from_tensor_slices((x, np.zeros((len(x), 2)))).repeat().batch(4)
    model.fit(data, steps_per_epoch=37, epochs=9, callbacks=[StopAfterUpdates(300)], verbose=0)
    assert int(model.optimizer.iterations) == 300
