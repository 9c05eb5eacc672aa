"""TFX's taxi example's own ``_build_keras_model``, unchanged, named in ``custom_config``,
searched (accumulation steps x micro-batch x learning rate) and trained by TFX's stock Tuner
and Trainer on the example's data with its own Transform; the example's EvalConfig blesses
it, the pushed model serves raw examples with the Evaluator's accuracy, BulkInferrer serves
the same (tests/taxi_pipelines.py; docs/tfx.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from taxi_pipelines import LABEL
from tfx_example_runs import eval_examples, evaluator_metric, inferences, latest, without

# Runs the pipeline in a subprocess (minutes): `pytest -m "not e2e"` skips it.
pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).resolve().parents[1] / "taxi_pipelines.py"


@pytest.fixture(scope="module")
def taxi_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("taxi")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(root)],
        cwd=SCRIPT.parent,
        capture_output=True,
        text=True,
        timeout=2400,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return root, proc.stdout


def _without_label(record: bytes) -> bytes:
    return without(record, LABEL)


def test_the_example_function_is_searched_and_trained_unchanged(taxi_run):
    root, stdout = taxi_run
    (best_file,) = (root / "pipeline" / "Tuner" / "best_hyperparameters").glob("*/*.txt")
    values = json.loads(best_file.read_text())["values"]
    assert values["accumulation_steps"] in (1, 4) and values["micro_batch_size"] in (16, 32)
    assert 1e-3 <= values["learning_rate"] <= 3e-2
    assert stdout.count("[tuner] trial ") == 3
    # The example's model as it wrote it: its four dense layers (100, 70, 50, 25 units),
    # the three category inputs it reads of the seven it lists.
    assert "inputs no layer reads: 'pickup_census_tract_xf', 'dropoff_census_tract_xf'" in stdout
    (pushed,) = (root / "serving").iterdir()
    served = tf.saved_model.load(str(pushed))
    kernels = {tuple(v.shape) for v in served.variables if v.shape.rank == 2}
    assert {(100, 70), (70, 50), (50, 25)} <= kernels


def test_the_pushed_model_serves_raw_examples_with_the_evaluators_accuracy(taxi_run):
    root, _ = taxi_run
    assert (latest(root / "pipeline" / "Evaluator" / "blessing") / "BLESSED").exists()
    (pushed,) = (root / "serving").iterdir()
    served = tf.saved_model.load(str(pushed))
    assert {"serving_default", "transform_features"} <= set(served.signatures)
    records = eval_examples(root)
    labels = served.signatures["transform_features"](examples=tf.constant(records))["tips_xf"]
    labels = labels.numpy().reshape(-1)
    # As TF Serving gets them: raw examples, without the label.
    outputs = served.signatures["serving_default"](
        examples=tf.constant([_without_label(r) for r in records])
    )
    scores = outputs["scores"].numpy()
    assert scores.shape == (len(records), 1)  # the example's sigmoid: class 1's probability
    assert ((scores >= 0) & (scores <= 1)).all()
    accuracy = float(np.mean((scores[:, 0] > 0.5) == (labels == 1)))
    assert abs(accuracy - evaluator_metric(root, "binary_accuracy")) <= 1.5 / len(records)
    # The model learnt: it ranks the big tippers first (the trivial model's AUC is 0.5).
    auc = keras.metrics.AUC()
    auc.update_state(labels, scores[:, 0])
    assert float(auc.result()) > 0.8
    assert [int(c) for c in outputs["classes"].numpy()[:, 0]] == (scores[:, 0] > 0.5).tolist()


def test_bulk_inferrer_writes_the_served_predictions(taxi_run):
    root, _ = taxi_run
    logs = inferences(root)
    assert len(logs) == len(eval_examples(root))
    (pushed,) = (root / "serving").iterdir()
    served = tf.saved_model.load(str(pushed)).signatures["serving_default"]
    for log in logs[:10]:
        (request,) = log.predict_log.request.inputs["examples"].string_val
        scores = tf.make_ndarray(log.predict_log.response.outputs["scores"])
        want = served(examples=tf.constant([_without_label(request)]))["scores"].numpy()
        np.testing.assert_allclose(scores, want, atol=1e-6)
