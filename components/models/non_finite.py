"""Stops training when the loss is no longer a finite number.

A model whose loss became NaN went on for every remaining update, the Trainer said "done",
and the Evaluator then failed deep inside TFMA. ``StopOnNonFiniteLoss`` ends ``fit`` at
the first update whose loss is NaN or infinite with :class:`NonFiniteLoss`, one line naming
the epoch, the update and the usual remedies: the Trainer fails before anything is
exported (so nothing is evaluated or pushed), and a Tuner trial fails
(``keras_tuner.errors.FailedTrialError``) while the search goes on.
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
import math

import keras
import keras_tuner

REMEDIES = (
    "lower the learning rate, normalise the inputs or the label, or look for extreme or "
    "non-finite values in the data"
)


class NonFiniteLoss(keras_tuner.errors.FailedTrialError):
    """The training loss became NaN or infinite (a failed trial, in a search)."""


class StopOnNonFiniteLoss(keras.callbacks.Callback):
    """Raises :class:`NonFiniteLoss` after the first update with a non-finite loss."""

    def __init__(self, where: str):
        super().__init__()
        self.where = where  # "the Trainer", "trial 3", ...
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None or math.isfinite(float(loss)):
            return
        update = int(self.model.optimizer.iterations.numpy())
        raise NonFiniteLoss(
            f"{self.where}: the training loss became {float(loss)} at epoch {self._epoch + 1}, "
            f"update {update}; stopped: {REMEDIES}."
        )
