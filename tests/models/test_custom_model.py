"""Bring your own model: ``--model package.module:function`` through Tuner and Trainer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from pipeline_runs import SMALL, digits_examples, run_cli

from tfx_accum.pipeline.checks.data import write_embedded_digits

# Runs the pipeline or a command in subprocesses (minutes): `pytest -m "not e2e"` skips it.
pytestmark = pytest.mark.e2e

TESTS = str(Path(__file__).resolve().parents[1])  # custom_models.py lives here


def test_a_model_function_is_tuned_trained_and_served(tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    write_embedded_digits(data)
    proc, _ = run_cli(
        "--output-dir", str(out), "--data-root", str(data),
        "--model", "custom_models:small_mlp", *SMALL,
        env={"PYTHONPATH": TESTS},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    # The function's own hyperparameter was searched beside ours and reached the Trainer.
    (best_file,) = (out / "pipeline" / "Tuner" / "best_hyperparameters").glob("*/*.txt")
    units = json.loads(best_file.read_text())["values"]["units"]
    assert units in (32, 64)
    (pushed,) = (out / "serving_model").iterdir()
    model = tf.saved_model.load(str(pushed))
    hidden = [v for v in model.variables if v.shape.rank == 2 and v.shape[0] == 64]
    assert hidden and hidden[0].shape[1] == units  # the Dense layer the function built

    serialized, labels = digits_examples()
    scores = model.signatures["serving_default"](examples=tf.constant(serialized))["scores"]
    assert float(np.mean(scores.numpy().argmax(axis=1) == labels)) >= 0.9


@pytest.mark.parametrize(
    "reference,message",
    [
        ("custom_models:not_a_model", "returned str, not a keras.Model"),
        ("custom_models:wrong_inputs", "inputs ['pixels'] are not features of the data"),
        ("custom_models:wrong_classes", "one output of 10 class probabilities"),
        ("no_such_module:fn", "cannot import 'no_such_module'"),
        ("custom_models", "use one of cnn, mlp, densenet121, or your own model function"),
    ],
)
def test_a_model_that_does_not_suit_the_data_fails_before_anything_runs(
    tmp_path, reference, message
):
    data, out = tmp_path / "data", tmp_path / "out"
    write_embedded_digits(data)
    proc, _ = run_cli(
        "--output-dir", str(out), "--data-root", str(data), "--model", reference,
        env={"PYTHONPATH": TESTS},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1  # one line, no traceback
    assert not out.exists() or not any(out.iterdir())  # nothing written
