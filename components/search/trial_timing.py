"""Where a trial's time goes, and its steady training throughput (a Keras callback)."""

from __future__ import annotations

import time

import keras


class EpochTimes(keras.callbacks.Callback):
    """Where a trial's time goes, and its steady training throughput.

    Throughput is measured between consecutive training steps of an epoch: the first step
    of each epoch (tracing, the input pipeline's start) and validation are left out, so
    that a one-epoch trial and a short speed measurement compare fairly.
    """

    def __init__(self, batch: int = 0):
        super().__init__()
        self.batch = batch

    def on_train_begin(self, logs=None):
        self.start = time.monotonic()
        self.epochs: list[float] = []
        self.examples = 0
        self.steady_steps, self.steady_seconds = 0, 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._last_step = None

    def on_train_batch_end(self, batch, logs=None):
        now = time.monotonic()
        self.examples += self.batch
        if self._last_step is not None:
            self.steady_steps += 1
            self.steady_seconds += now - self._last_step
        self._last_step = now

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(time.monotonic() - self.start - sum(self.epochs))

    def examples_per_second(self) -> float | None:
        if not self.steady_steps or self.steady_seconds <= 0:
            return None
        return self.steady_steps * self.batch / self.steady_seconds

    def describe(self) -> str:
        if not self.epochs:
            return ""
        rest = self.epochs[1:]
        later = f", later epochs {sum(rest) / len(rest):.1f} each" if rest else ""
        return f" (fit {sum(self.epochs):.1f}: first epoch {self.epochs[0]:.1f}{later})"
