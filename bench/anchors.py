"""The gradient-accumulation implementations this project is measured against.

- ``keras_optimizer_option``: Keras 3's own ``optimizer(gradient_accumulation_steps=k)``.
- ``StackOverflowAccumulationModel``: the widely copied ``CustomTrainStep`` answer
  (tf.Variable accumulators, ``tf.cond`` to apply every k steps), re-implemented for Keras 3
  from its published description, bugs included: it sums the k gradients instead of
  averaging them, ignores sample weights, and never flushes a partial window.
"""

from __future__ import annotations

import keras
import tensorflow as tf


def keras_optimizer_option(optimizer_cls, steps: int, **kwargs) -> keras.optimizers.Optimizer:
    """Keras 3's built-in accumulation: the model is fed micro-batches, the optimizer waits."""
    return optimizer_cls(gradient_accumulation_steps=steps, **kwargs)


class StackOverflowAccumulationModel(keras.Model):
    """The StackOverflow ``CustomTrainStep`` pattern, faithfully including its flaws."""

    def __init__(self, *args, n_gradients: int = 1, **kwargs):
        super().__init__(*args, **kwargs)
        self.n_gradients = tf.constant(n_gradients, dtype=tf.int32)
        self.n_acum_step = tf.Variable(0, dtype=tf.int32, trainable=False)
        self.gradient_accumulation = [
            tf.Variable(tf.zeros_like(v, dtype=tf.float32), trainable=False)
            for v in self.trainable_variables
        ]

    def train_step(self, data):
        self.n_acum_step.assign_add(1)
        x, y = data[0], data[1]  # sample weights are dropped, as in the answer
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        gradients = tape.gradient(loss, self.trainable_variables)
        for accumulator, gradient in zip(self.gradient_accumulation, gradients):
            accumulator.assign_add(gradient)  # summed, never divided by n_gradients
        tf.cond(tf.equal(self.n_acum_step, self.n_gradients), self._apply, lambda: None)
        self._loss_tracker.update_state(loss)
        return {"loss": self._loss_tracker.result()}

    def _apply(self):
        self.optimizer.apply_gradients(zip(self.gradient_accumulation, self.trainable_variables))
        self.n_acum_step.assign(0)
        for accumulator in self.gradient_accumulation:
            accumulator.assign(tf.zeros_like(accumulator))
