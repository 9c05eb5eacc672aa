"""The Trainer's training state, backed up every epoch so that an interrupted run resumes.

``keras.callbacks.BackupAndRestore`` overwrites one ``latest.weights.h5`` in place: a run
stopped while it writes (a full disk, a kill) leaves a file that every later run fails to
load ("A total of 2 objects could not be loaded"), so the directory is stuck until it is
deleted by hand. :class:`TrainingBackup` is a Keras callback that keeps the same state
(weights, optimizer state, the epoch) in files that are complete or absent:

- after epoch ``n``: ``epoch-<n>.weights.h5`` (written beside, then renamed), then
  ``epoch-<n>.json`` with the weights file's size and SHA-256 (written beside, then
  renamed): a state file exists only for a complete weights file;
- the last ``keep`` states are kept (2 by default), older ones deleted;
- :meth:`restore_point`, before ``fit``, picks the newest state whose weights file has
  the recorded size and checksum; one that does not is set aside (renamed, with a warning)
  and the one before is used, else training starts from scratch. Never a stuck directory.

Example (what the Trainer does):

```python
backup = TrainingBackup(backup_dir)
epoch = backup.restore_point()               # 0: no usable backup, start afresh
model.fit(..., initial_epoch=epoch, callbacks=[backup, ...])
backup.delete()                              # training finished
```
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Callable

import keras
import tensorflow as tf

from tfx_accum import console
from tfx_accum.atomic_files import (
    gfile_digest,
    gfile_write_atomic,
    raise_if_disk_full,
    set_aside,
)

_STATE = re.compile(r"^epoch-(\d+)\.json$")
_INCOMING = ".incoming-"


class TrainingBackup(keras.callbacks.Callback):
    """Backs up weights, optimizer state and the epoch at every epoch's end; restores them.

    Args:
        backup_dir: a directory (local or ``gs://``) used by this training only.
        keep: how many of the latest states to keep (a fallback if the newest is damaged).
        say: where warnings go (the console by default).
    """

    def __init__(self, backup_dir: str, keep: int = 2, say: Callable[[str], None] = console.say):
        super().__init__()
        if keep < 1:
            raise ValueError(f"`keep` must be >= 1. Received: keep={keep}")
        self.backup_dir = backup_dir.rstrip("/")
        self.keep = keep
        self._say = say
        self._restore: str | None = None  # the weights file on_train_begin loads
        self._epoch = 0

    # ------------------------------------------------------------------ restoring

    def restore_point(self) -> int:
        """The number of epochs the newest usable backup holds (0: none); call before fit.

        Damaged states are set aside with a warning; leftovers of an interrupted save
        are removed.
        """
        self._restore, self._epoch = None, 0
        if not tf.io.gfile.isdir(self.backup_dir):
            return 0
        names = tf.io.gfile.listdir(self.backup_dir)
        for name in names:
            if name.startswith(_INCOMING):  # a save that never finished
                with contextlib.suppress(Exception):
                    tf.io.gfile.remove(self._path(name))
        states = sorted(
            (int(m.group(1)), name) for name in names if (m := _STATE.match(name.rstrip("/")))
        )
        for epoch, name in reversed(states):
            problem, weights = self._check(name, epoch)
            if problem is None:
                self._restore, self._epoch = weights, epoch
                return epoch
            set_aside(self._path(name))
            if weights and tf.io.gfile.exists(weights):
                set_aside(weights)
            earlier = [e for e, _ in states if e < epoch]
            fallback = f"epoch {earlier[-1]}'s backup" if earlier else "scratch"
            self._say(
                f"[trainer] warning: the backup of epoch {epoch} in {self.backup_dir} cannot "
                f"be used ({problem}); set aside, training resumes from {fallback}"
            )
        return 0

    def _check(self, name: str, epoch: int) -> tuple[str | None, str | None]:
        try:
            with tf.io.gfile.GFile(self._path(name)) as handle:
                state = json.loads(handle.read())
            weights = self._path(state["weights"])
            expected = (int(state["size"]), str(state["sha256"]))
            if int(state["epoch"]) != epoch:
                return "its state file names another epoch", weights
        except Exception as error:  # noqa: BLE001 - any unreadable state is set aside
            return f"its state file is unreadable: {type(error).__name__}", None
        if not tf.io.gfile.exists(weights):
            return "its weights file is missing", weights
        if gfile_digest(weights) != expected:
            return "its weights file differs from what was written (cut short?)", weights
        return None, weights

    def on_train_begin(self, logs=None):
        if self._restore is None:
            return
        model = self.model
        if model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)  # its slots are in the file
        try:
            model.load_weights(self._restore)
        except Exception as error:
            state = self._path(f"epoch-{self._epoch:06d}.json")
            for path in (state, self._restore):
                with contextlib.suppress(Exception):
                    set_aside(path)
            raise RuntimeError(
                f"The training backup {self._restore} does not fit this model "
                f"({type(error).__name__}: {str(error)[:200]}); it is set aside, so the next "
                "run trains from scratch."
            ) from None

    # ------------------------------------------------------------------ saving

    def on_epoch_end(self, epoch, logs=None):
        self.save(epoch + 1)

    def save(self, epoch: int) -> None:
        """Writes the state after ``epoch`` epochs, then drops states older than ``keep``."""
        tf.io.gfile.makedirs(self.backup_dir)
        name = f"epoch-{epoch:06d}.weights.h5"
        final = self._path(name)
        # Keras wants the .weights.h5 ending; the prefix marks it unfinished.
        tmp = self._path(f"{_INCOMING}{uuid.uuid4().hex[:8]}.weights.h5")
        try:
            self.model.save_weights(tmp, overwrite=True)
            size, digest = gfile_digest(tmp)
            tf.io.gfile.rename(tmp, final, overwrite=True)
        except Exception as error:
            with contextlib.suppress(Exception):
                tf.io.gfile.remove(tmp)
            raise_if_disk_full(error, final)
            raise
        state = {"epoch": epoch, "weights": name, "size": size, "sha256": digest}
        gfile_write_atomic(self._path(f"epoch-{epoch:06d}.json"), json.dumps(state))
        self._prune()

    def _prune(self) -> None:
        states = sorted(
            (int(m.group(1)), name)
            for name in tf.io.gfile.listdir(self.backup_dir)
            if (m := _STATE.match(name))
        )
        for epoch, name in states[: -self.keep]:
            tf.io.gfile.remove(self._path(name))  # the state first: then its weights
            with contextlib.suppress(Exception):
                tf.io.gfile.remove(self._path(f"epoch-{epoch:06d}.weights.h5"))

    def delete(self) -> None:
        """Removes the backups (training finished: the same inputs start afresh)."""
        if tf.io.gfile.exists(self.backup_dir):
            tf.io.gfile.rmtree(self.backup_dir)

    def _path(self, name: str) -> str:
        return f"{self.backup_dir}/{name}"
