"""The Trainer's backups: complete or set aside, never a stuck directory.

A small Keras model trains a few epochs with :class:`TrainingBackup`; its backups are then
damaged as a stopped run or a full disk leaves them, and a new ``fit`` must resume from the
last good one with that epoch's exact weights, or start from scratch. The process test is
``test_reliability.py::test_a_full_disk_while_training_is_one_line_and_the_next_run_resumes``.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tfx_accum.components.training.training_backup import TrainingBackup

X = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
Y = (X.sum(axis=1) > 0).astype("int32")


def _model() -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
    return model


class _Weights(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.after = {}

    def on_epoch_end(self, epoch, logs=None):
        self.after[epoch + 1] = [w.copy() for w in self.model.get_weights()]


def _train(backup_dir, epochs: int, lines: list[str]) -> tuple[int, _Weights, keras.Model]:
    backup = TrainingBackup(str(backup_dir), say=lines.append)
    start = backup.restore_point()
    model, weights = _model(), _Weights()
    if start:
        loaded = _Weights()
        model.fit(X, Y, epochs=start, initial_epoch=start, callbacks=[backup, loaded], verbose=0)
        weights.after[start] = [w.copy() for w in model.get_weights()]
    model.fit(X, Y, epochs=epochs, initial_epoch=start, callbacks=[backup, weights], verbose=0)
    return start, weights, model


@pytest.fixture
def trained(tmp_path):
    lines: list[str] = []
    _, weights, _ = _train(tmp_path / "backup", 3, lines)
    return tmp_path / "backup", weights


def test_backups_keep_the_last_two_complete_states(trained):
    backup_dir, _ = trained
    assert sorted(p.name for p in backup_dir.iterdir()) == [
        "epoch-000002.json",
        "epoch-000002.weights.h5",
        "epoch-000003.json",
        "epoch-000003.weights.h5",
    ]


def test_a_newest_backup_cut_short_is_set_aside_and_the_one_before_restored(trained):
    backup_dir, weights = trained
    newest = backup_dir / "epoch-000003.weights.h5"
    newest.write_bytes(newest.read_bytes()[:100])  # a save stopped part-way
    lines: list[str] = []
    start, resumed, _ = _train(backup_dir, 4, lines)
    assert start == 2
    assert lines == [
        f"[trainer] warning: the backup of epoch 3 in {backup_dir} cannot be used (its weights "
        "file differs from what was written (cut short?)); set aside, training resumes from "
        "epoch 2's backup"
    ]
    for got, expected in zip(resumed.after[2], weights.after[2], strict=True):
        np.testing.assert_array_equal(got, expected)  # exactly epoch 2's state
    assert (backup_dir / "epoch-000003.weights.h5.unreadable-1").exists()


def test_no_usable_backup_trains_from_scratch(trained):
    backup_dir, weights = trained
    for state in backup_dir.glob("*.json"):
        state.write_text("{")
    lines: list[str] = []
    start, retrained, _ = _train(backup_dir, 3, lines)
    assert start == 0 and len(lines) == 2 and lines[-1].endswith("training resumes from scratch")
    for got, expected in zip(retrained.after[3], weights.after[3], strict=True):
        np.testing.assert_allclose(got, expected, atol=1e-6)  # seeded: the same model


def test_a_failed_save_leaves_the_earlier_backups_and_no_partial_file(trained, monkeypatch):
    backup_dir, _ = trained
    before = {p.name: p.read_bytes() for p in backup_dir.iterdir()}
    backup = TrainingBackup(str(backup_dir))
    backup.set_model(_model())

    def fail(path, overwrite=True):
        with open(path, "wb") as handle:
            handle.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(backup.model, "save_weights", fail)
    with pytest.raises(OSError) as error:
        backup.save(4)
    assert error.value.filename == f"{backup_dir}/epoch-000004.weights.h5"
    assert {p.name: p.read_bytes() for p in backup_dir.iterdir()} == before
