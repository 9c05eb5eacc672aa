"""Unit tests: search space, strategy and batch arithmetic, Tuner failures, data checks."""

from __future__ import annotations

import re

import keras
import keras_tuner
import numpy as np
import pytest
import tensorflow as tf

from tfx_accum.components.data import Splits
from tfx_accum.components.features import DataDescription, Preprocessor
from tfx_accum.components.hypermodel import AccumulationHyperModel
from tfx_accum.components.models import build_model
from tfx_accum.components.search_space import SearchSpace
from tfx_accum.components.search_tuners import make_tuner
from tfx_accum.components.settings import ModelSettings
from tfx_accum.components.strategy import choose_strategy, replica_plan, strategy_kind
from tfx_accum.components.trainer import StopAfterUpdates
from tfx_accum.pipeline.csv_check import validate_csv_dir
from tfx_accum.pipeline.data import (
    DIGITS_CLASS_COUNTS,
    DataError,
    digits_csv_text,
    embedded_summary,
    validate_data_root,
    write_embedded_digits,
)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(accumulation_steps_choices=(0, 2)), "accumulation_steps_choices.*positive"),
        (dict(micro_batch_choices=()), "micro_batch_choices.*non-empty"),
        (dict(micro_batch_choices=(8, -1)), "micro_batch_choices"),
        (dict(learning_rate_min=0.1, learning_rate_max=0.01), "range is empty"),
        (dict(learning_rate_min=0.0), "learning_rate_min.*positive"),
        (dict(algorithm="grid"), "algorithm.*bayesian"),
        (dict(max_trials=0), "max_trials"),
        (
            dict(max_effective_batch=4, accumulation_steps_choices=(2,), micro_batch_choices=(8,)),
            "No combination fits",
        ),
    ],
)
def test_search_space_rejects_nonsense(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SearchSpace(**kwargs)


def test_search_space_round_trips_through_custom_config():
    space = SearchSpace(
        accumulation_steps_choices=(4, 1, 2), micro_batch_choices=(16,), max_trials=3
    )
    assert space.accumulation_steps_choices == (1, 2, 4)
    assert SearchSpace.from_config(space.to_config()) == space
    with pytest.raises(ValueError, match="Unknown search-space settings"):
        SearchSpace.from_config({"batch": 3})


@pytest.mark.parametrize(
    "gpus,tpu,kind",
    [
        (0, False, "default"),
        (1, False, "default"),
        (2, False, "mirrored"),
        (8, False, "mirrored"),
        (0, True, "tpu"),
        (4, True, "tpu"),
    ],
)
def test_strategy_kind_follows_devices(gpus, tpu, kind):
    assert strategy_kind(gpus, tpu) == kind


@pytest.mark.parametrize(
    "steps,micro,replicas,per_replica_steps,global_batch",
    [
        (4, 32, 1, 4, 128),
        (4, 32, 2, 2, 128),
        (4, 32, 4, 1, 128),
        (8, 16, 8, 1, 128),
        (4, 32, 3, 2, 192),
        (1, 64, 4, 1, 256),
    ],
)
def test_replica_plan_arithmetic(steps, micro, replicas, per_replica_steps, global_batch):
    plan = replica_plan(steps, micro, replicas)
    assert plan.steps_per_replica == per_replica_steps
    assert plan.per_replica_batch == per_replica_steps * micro
    assert plan.global_batch == global_batch
    with pytest.raises(ValueError, match="replicas"):
        replica_plan(steps, micro, 0)


def test_choose_strategy_on_this_cpu_machine_is_the_default_one():
    strategy = choose_strategy()
    assert strategy.num_replicas_in_sync == 1
    assert not isinstance(strategy, tf.distribute.MirroredStrategy | tf.distribute.TPUStrategy)


def test_densenet_option_is_the_stackoverflow_setup():
    keys = [f"pixel_{i:02d}" for i in range(64)]
    model = build_model("densenet121", DataDescription.numeric(keys, 10), 2, 1e-3)
    assert model.gradient_accumulation_steps == 2
    assert any(layer.name == "densenet121" for layer in model.layers)
    assert any(isinstance(layer, keras.layers.Resizing) for layer in model.layers)
    batch = {k: np.zeros((2, 1), "float32") for k in keys}
    assert model.predict(batch, verbose=0).shape == (2, 10)
    with pytest.raises(ValueError, match="not a square number"):
        build_model("cnn", DataDescription.numeric(keys[:10], 10), 2, 1e-3)


def test_densenet_reads_an_image_feature_as_three_channels():
    from tfx_accum.components.features import IMAGE, InputFeature

    image = InputFeature("image", IMAGE, "string", image_shape=(32, 32, 1))
    data = DataDescription((image,), "label", 10)
    model = build_model("densenet121", data, 4, 1e-3)
    assert model.gradient_accumulation_steps == 4
    assert any(layer.name == "densenet121" for layer in model.layers)
    assert model.predict({"image": np.zeros((2, 32, 32, 1), "float32")}, verbose=0).shape == (2, 10)


def test_training_stops_after_exactly_train_steps_updates():
    """Whole epochs of 37 updates, and the last one stops at 300 (the Trainer's plan)."""
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((37 * 4, 4), "float32")
    data = tf.data.Dataset.from_tensor_slices((x, np.zeros((len(x), 2)))).repeat().batch(4)
    model.fit(data, steps_per_epoch=37, epochs=9, callbacks=[StopAfterUpdates(300)], verbose=0)
    assert int(model.optimizer.iterations) == 300


def _tiny_splits() -> Splits:
    rng = np.random.default_rng(0)
    keys = ["f0", "f1", "f2", "f3"]
    x = rng.normal(size=(96, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    features = {k: x[:, i : i + 1] for i, k in enumerate(keys)}
    ds = tf.data.Dataset.from_tensor_slices((features, y))
    data = DataDescription.numeric(keys, 2)
    return Splits(ds, ds, data, 96, Preprocessor(data))


class _OutOfMemoryAbove32(AccumulationHyperModel):
    """Simulates a device where micro-batches above 32 do not fit: model.fit raises OOM."""

    def fit(self, hp, model, *args, **kwargs):
        if hp.get("micro_batch_size") <= 32:
            return super().fit(hp, model, *args, **kwargs)

        def out_of_memory(*args, **kwargs):
            raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")

        model.fit = out_of_memory  # this trial only: the model is reused by later trials
        try:
            return super().fit(hp, model, *args, **kwargs)
        finally:
            del model.fit


def _search(tmp_path, micro_choices, trials):
    space = SearchSpace(
        accumulation_steps_choices=(1, 2),
        micro_batch_choices=micro_choices,
        algorithm="random",
        max_trials=trials,
        tuning_epochs=1,
    )
    hypermodel = _OutOfMemoryAbove32(space, _tiny_splits(), "mlp")
    tuner = make_tuner(space, hypermodel, str(tmp_path))
    tuner.search(epochs=1)
    return tuner


def test_out_of_memory_trials_are_failed_and_the_search_goes_on(tmp_path, capsys):
    tuner = _search(tmp_path, (8, 64), trials=6)
    trials = list(tuner.oracle.trials.values())
    failed = [t for t in trials if t.status == "FAILED"]
    done = [t for t in trials if t.status == "COMPLETED"]
    assert failed and done
    assert all(t.hyperparameters.get("micro_batch_size") == 64 for t in failed)
    assert all(t.hyperparameters.get("micro_batch_size") == 8 for t in done)
    assert "out of memory with micro-batch 64" in failed[0].message
    best = tuner.get_best_hyperparameters()[0].values
    # The Tuner's decision: the best trial's values and its budget, nothing it measured.
    assert set(best) == {"accumulation_steps", "micro_batch_size", "learning_rate", "examples"}
    batch = 8 * best["accumulation_steps"]
    assert best["examples"] == -(-96 // batch) * batch  # 1 epoch of 96 rows in whole batches
    out = capsys.readouterr().out
    assert "[tuner] trial" in out and "[FAILED]" in out and "[COMPLETED]" in out


def test_search_fails_only_when_every_trial_fails(tmp_path):
    with pytest.raises(RuntimeError, match="All 2 tuning trials failed"):
        _search(tmp_path, (64,), trials=2)


@pytest.mark.parametrize("algorithm", ["random", "bayesian", "hyperband"])
def test_max_effective_batch_shapes_the_proposals(algorithm, tmp_path):
    """Combinations above the limit are never proposed, so no trial fails for it."""
    space = SearchSpace(
        accumulation_steps_choices=(1, 4),
        micro_batch_choices=(8, 16),
        algorithm=algorithm,
        max_trials=5,
        tuning_epochs=2,
        max_effective_batch=16,
    )
    tuner = make_tuner(space, AccumulationHyperModel(space, _tiny_splits(), "mlp"), str(tmp_path))
    tuner.search(epochs=2)
    trials = list(tuner.oracle.trials.values())
    assert trials
    for trial in trials:
        values = trial.hyperparameters.values
        assert values["accumulation_steps"] * values["micro_batch_size"] <= 16, values
        assert trial.status == "COMPLETED", (trial.status, trial.message)
    # TFX ranks the trials with get_best_trials(oracle.max_trials), None for Hyperband.
    assert len(tuner.oracle.get_best_trials(tuner.oracle.max_trials)) == len(trials)


def test_nearest_fitting_combination_keeps_the_micro_batch_and_learning_rate():
    space = SearchSpace(
        accumulation_steps_choices=(1, 2, 4, 8),
        micro_batch_choices=(8, 16, 64),
        max_effective_batch=32,
    )
    values = {"accumulation_steps": 8, "micro_batch_size": 16, "learning_rate": 0.01}
    assert space.within_limit(values) == {**values, "accumulation_steps": 2}
    big_m = {"accumulation_steps": 1, "micro_batch_size": 64, "learning_rate": 0.01}
    assert space.within_limit(big_m) == {
        "accumulation_steps": 2,
        "micro_batch_size": 16,
        "learning_rate": 0.01,
    }


def test_embedded_digits_are_real_and_written_once(tmp_path):
    directory = write_embedded_digits(tmp_path)
    target = directory / "digits.csv"
    mtime = target.stat().st_mtime_ns
    summary = validate_data_root(str(directory), ModelSettings())
    assert summary.rows == 1797 and summary.num_classes == 10 and len(summary.columns) == 65
    assert summary.task == "multiclass"
    assert tuple(c for _, c, _ in sorted(summary.label_values)) == DIGITS_CLASS_COUNTS
    write_embedded_digits(tmp_path)
    assert target.stat().st_mtime_ns == mtime  # unchanged file keeps the TFX cache valid
    assert target.read_text() == digits_csv_text()


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "is empty"),
        ("a,label\n1,0\n2\n", "line 3: 1 values for 2 columns"),
        ("a,label\n", "no data rows"),
        ("a,label\nnan,1\n1,0\n", "not a finite number"),
        # What CsvExampleGen would read differently from what the user meant:
        ("\ufeffa,label\n1,0\n2,1\n", "byte-order mark"),
        (",a,label\n0,1,0\n1,2,1\n", "column 1 has no name (a pandas index"),
        ("a, label\n1,0\n2,1\n", "spaces around it"),
        ("a,label\n1, 0\n2,1\n", "' 0' has spaces around it"),
        ("a,a,label\n1,2,0\n2,3,1\n", "columns 1 and 2 are both named 'a'"),
    ],
)
def test_csv_validation_messages(tmp_path, text, message):
    (tmp_path / "d.csv").write_text(text)
    with pytest.raises(DataError, match=re.escape(message)):
        validate_csv_dir(str(tmp_path), "label")


def test_a_reused_trial_model_trains_like_a_fresh_one():
    """Trials with the same k reuse one traced model, reset to the same initial state."""
    space = SearchSpace(accumulation_steps_choices=(2,), micro_batch_choices=(8, 16))

    def hp(micro, lr):
        values = keras_tuner.HyperParameters()
        values.Fixed("accumulation_steps", 2)
        values.Fixed("micro_batch_size", micro)
        values.Fixed("learning_rate", lr)
        return values

    def train(hypermodel, values):
        model = hypermodel.build(values)
        hypermodel.fit(values, model, epochs=2)
        return [w.copy() for w in model.get_weights()], int(model.optimizer.iterations)

    reused = AccumulationHyperModel(space, _tiny_splits(), "mlp")
    train(reused, hp(16, 0.05))
    second, updates = train(reused, hp(8, 0.01))
    assert len(reused._models) == 1  # one model for k=2
    fresh, fresh_updates = train(AccumulationHyperModel(space, _tiny_splits(), "mlp"), hp(8, 0.01))
    assert updates == fresh_updates == 2 * 6  # 96 rows at effective batch 2 x 8 = 16
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(second, fresh)) < 1e-6


def test_labels_that_skip_class_zero_are_warned_about(tmp_path):
    rows = "".join(f"{i},{1 + i % 2}\n" for i in range(40))
    (tmp_path / "d.csv").write_text("a,label\n" + rows)
    summary = validate_data_root(str(tmp_path), ModelSettings())
    assert summary.num_classes == 3 and summary.labels == (1, 2)
    assert "1 of the 3 classes 0..2 have no example" in summary.label_warning()


def test_the_default_model_follows_the_data_and_image_models_need_a_square_grid(tmp_path):
    import argparse

    from tfx_accum.pipeline.errors import InputError
    from tfx_accum.pipeline.model_choice import model_for as _model_for

    def args(model, data_root):
        return argparse.Namespace(model=model, data_root=data_root, verbose=False, label_key="y")

    def columns(n, text=0):
        header = [f"f{i}" for i in range(n)] + [f"t{i}" for i in range(text)] + ["y"]
        row = ["1"] * n + ["a"] * text
        lines = [",".join(header), ",".join([*row, "0"]), ",".join([*row, "1"])]
        directory = tmp_path / f"{n}-{text}-{len(list(tmp_path.iterdir()))}"
        directory.mkdir()
        (directory / "d.csv").write_text("\n".join(lines) + "\n")
        return validate_csv_dir(str(directory), "y")

    def model_for(args, summary):
        return _model_for(args, summary, ModelSettings(label_key="y"))

    digits, images = embedded_summary("digits"), embedded_summary("digit-images")
    assert model_for(args(None, None), digits) == "cnn"  # the embedded 8x8 digits
    assert model_for(args(None, None), images) == "cnn"  # an image feature
    assert model_for(args(None, "/my/csvs"), columns(4)) == "mlp"  # never a 2x2 "image"
    assert model_for(args(None, "/my/csvs"), columns(64)) == "mlp"  # a grid is declared
    assert model_for(args("cnn", "/my/csvs"), columns(64)) == "cnn"  # declared grid
    with pytest.raises(InputError, match="30 feature columns.*--model mlp"):
        model_for(args("cnn", "/my/csvs"), columns(30))
    with pytest.raises(InputError, match="too small an image"):
        model_for(args("densenet121", "/my/csvs"), columns(4))
    with pytest.raises(InputError, match="'t0' is a text column. Use --model mlp"):
        model_for(args("cnn", "/my/csvs"), columns(63, text=1))
    with pytest.raises(InputError, match="'image' is an image. Use --model cnn"):
        model_for(args("mlp", None), images)
