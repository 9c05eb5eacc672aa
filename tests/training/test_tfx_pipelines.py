"""tfx-accum's ``tuner_fn`` and ``run_fn`` in TFX's *stock* Tuner and Trainer, in TFX's penguin
example (tests/penguin_pipelines.py): without and with TFX Transform, each through
Evaluator (with a Resolver), Pusher and BulkInferrer. The pushed model is checked as TF
Serving would use it: raw ``tf.Example``s in, its accuracy against the Evaluator's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from penguin_pipelines import FEATURES, LABEL
from tfx_example_runs import eval_examples, evaluator_metric, inferences, latest, without

# Runs the pipeline or a command in subprocesses (minutes): `pytest -m "not e2e"` skips it.
pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).resolve().parents[1] / "penguin_pipelines.py"


def _run(kind: str, root: Path) -> tuple[str, Path, str]:
    args = [sys.executable, str(SCRIPT), str(root)] + (["transform"] if kind == "transform" else [])
    proc = subprocess.run(args, cwd=SCRIPT.parent, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return kind, root, proc.stdout


@pytest.fixture(scope="module")
def stock_run(tmp_path_factory):
    return _run("stock", tmp_path_factory.mktemp("stock"))


@pytest.fixture(scope="module")
def transform_run(tmp_path_factory):
    return _run("transform", tmp_path_factory.mktemp("transform"))


@pytest.fixture(params=["stock_run", "transform_run"])
def penguin_run(request):
    """Each pipeline, run once for the module."""
    return request.getfixturevalue(request.param)


def _without_label(record: bytes) -> bytes:
    return without(record, LABEL)


def test_the_pipeline_blesses_and_pushes_a_model_that_serves_raw_examples(penguin_run):
    kind, root, _ = penguin_run
    blessing = latest(root / "pipeline" / "Evaluator" / "blessing")
    assert (blessing / "BLESSED").exists(), kind
    (pushed,) = (root / "serving").iterdir()
    served = tf.saved_model.load(str(pushed))
    records = eval_examples(root)
    labels = np.array(
        [
            tf.train.Example.FromString(r).features.feature[LABEL].int64_list.value[0]
            for r in records
        ]
    )
    # As TF Serving gets them: raw examples, without the label.
    outputs = served.signatures["serving_default"](
        examples=tf.constant([_without_label(r) for r in records])
    )
    scores = outputs["scores"].numpy()
    assert scores.shape == (len(records), 3)
    np.testing.assert_allclose(scores.sum(axis=1), 1.0, atol=1e-5)  # probabilities
    accuracy = float(np.mean(scores.argmax(axis=1) == labels))
    evaluator = evaluator_metric(root, "sparse_categorical_accuracy")
    assert accuracy > 0.9 and abs(accuracy - evaluator) <= 0.02, (kind, accuracy, evaluator)
    classes = outputs["classes"].numpy()
    assert classes.shape == (len(records), 1)
    assert [int(c) for c in classes[:, 0]] == scores.argmax(axis=1).tolist()


def test_bulk_inferrer_writes_the_served_predictions(penguin_run):
    kind, root, _ = penguin_run
    logs = inferences(root)
    unlabelled = root / "data" / "unlabelled" / "penguins_unlabelled.csv"
    assert len(logs) == len(unlabelled.read_text().splitlines()) - 1, kind
    (pushed,) = (root / "serving").iterdir()
    served = tf.saved_model.load(str(pushed)).signatures["serving_default"]
    for log in logs[:10]:
        (request,) = log.predict_log.request.inputs["examples"].string_val
        response = log.predict_log.response.outputs
        scores = tf.make_ndarray(response["scores"])
        want = served(examples=tf.constant([request]))["scores"].numpy()
        np.testing.assert_allclose(scores, want, atol=1e-6)
        example = tf.train.Example.FromString(request)
        assert set(example.features.feature) == set(FEATURES)


def test_transform_exports_tfx_signatures_on_raw_examples(transform_run):
    """With Transform: serving_default applies the transform graph (the model's inputs are
    the *_xf features, which raw examples do not carry), and transform_features is there
    for TFMA, as in TFX's example."""
    _, root, stdout = transform_run
    assert "[trainer] statistics: computed by TFDV over the transformed examples" in stdout
    (pushed,) = (root / "serving").iterdir()
    served = tf.saved_model.load(str(pushed))
    assert {"serving_default", "transform_features"} <= set(served.signatures)
    records = eval_examples(root)[:8]
    transformed = served.signatures["transform_features"](examples=tf.constant(records))
    assert {f"{name}_xf" for name in [*FEATURES, LABEL]} <= set(transformed)
    # z-scores, not raw grams: the transform graph ran.
    assert float(tf.reduce_max(tf.abs(transformed["body_mass_g_xf"]))) < 5
    # The raw serving input names no transformed feature: a raw example is all it needs.
    serving = served.signatures["serving_default"]
    assert [s.name for s in serving.structured_input_signature[1].values()] == ["examples"]
    # An example missing a feature the model needs is refused, not answered from a default.
    broken = tf.train.Example.FromString(records[0])
    del broken.features.feature["body_mass_g"]
    with pytest.raises(tf.errors.InvalidArgumentError):
        serving(examples=tf.constant([broken.SerializeToString()]))


def test_tfxs_train_and_eval_args_keep_their_meaning_or_are_said(stock_run):
    """TrainArgs.num_steps=100: the Trainer's optimizer updates (early stopping may end them
    sooner: said with its reason); EvalArgs, which the Trainer does not use: said."""
    _, root, stdout = stock_run
    assert "[trainer] 100 optimizer updates at global batch" in stdout
    assert "(TrainArgs.num_steps (--train-steps), with early stopping;" in stdout
    assert "[trainer] EvalArgs.num_steps=5 is not used: validation runs on " in stdout
    assert "examples held out of the training split, and the Evaluator scores" in stdout
    assert "[tuner] statistics: computed by TFDV over the examples" in stdout
