"""The Evaluator's configuration per task, run by TFMA on small exported models.

Each model is a SavedModel with the Trainer's serving contract
(tfx_accum.components.training.export): ``serving_default`` takes serialized tf.Examples
(``examples``) and returns ``scores`` (class probabilities) and ``classes``, or ``predictions``
``[batch, 1]`` for regression; ``transform_labels`` returns the label (a class index, or the
number). TFMA's own ``run_model_analysis`` (Beam's DirectRunner, as in the Evaluator) evaluates it
with :func:`eval_config` and writes the metrics and the validation that blesses or not; the
tests compare them with numpy and scikit-learn on the same examples.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_model_analysis as tfma
from sklearn.metrics import precision_score, recall_score, roc_auc_score

from tfx_accum.components.config import tasks
from tfx_accum.components.config.blessing import Blessing
from tfx_accum.components.training import baseline_metrics as bm
from tfx_accum.pipeline.evaluation import (
    blessing_reason,
    eval_config,
    evaluation_line,
    read_evaluation,
)

LABEL = "label"
N = 300


def write_examples(path, x: np.ndarray, y: np.ndarray) -> str:
    with tf.io.TFRecordWriter(str(path)) as writer:
        for xi, yi in zip(x, y):
            label = (
                tf.train.Feature(int64_list=tf.train.Int64List(value=[int(yi)]))
                if np.issubdtype(y.dtype, np.integer)
                else tf.train.Feature(float_list=tf.train.FloatList(value=[float(yi)]))
            )
            features = {
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[xi])),
                LABEL: label,
            }
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()
            )
    return str(path)


class ContractModel(tf.Module):
    """A served model: ``predict`` maps the feature ``x`` to class scores or a value."""

    def __init__(self, task: str, predict):
        super().__init__()
        self._predict = predict
        label_type = tf.float32 if task == tasks.REGRESSION else tf.int64
        self._spec = {
            "x": tf.io.FixedLenFeature([1], tf.float32),
            LABEL: tf.io.FixedLenFeature([1], label_type),
        }
        self._task = task

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(self, serialized):
        x = tf.io.parse_example(serialized, self._spec)["x"][:, 0]
        output = self._predict(x)
        if self._task == tasks.REGRESSION:
            return {tasks.PREDICTIONS_KEY: tf.reshape(output, [-1, 1])}
        return {
            tasks.SCORES_KEY: output,
            "classes": tf.strings.as_string(tf.argmax(output, -1)),
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def transform_labels(self, serialized):
        return {LABEL: tf.io.parse_example(serialized, self._spec)[LABEL][:, 0]}


def evaluate(tmp_path, name, task, predict, data, num_classes=None, **blessing):
    """TFMA's evaluation of ``predict`` on ``data`` (x, y) with :func:`eval_config`."""
    model = ContractModel(task, predict)
    model_dir = str(tmp_path / f"{name}_model")
    tf.saved_model.save(
        model,
        model_dir,
        signatures={"serving_default": model.serve, "transform_labels": model.transform_labels},
    )
    config = eval_config(task, LABEL, num_classes, **blessing)
    output = str(tmp_path / f"{name}_evaluation")
    tfma.run_model_analysis(
        eval_shared_model=tfma.default_eval_shared_model(model_dir, eval_config=config),
        eval_config=config,
        data_location=write_examples(tmp_path / f"{name}.tfrecord", *data),
        output_path=output,
    )
    return read_evaluation(output)


def failed(evaluation) -> set[str]:
    return {f.metric for f in evaluation.failures}


# --- multiclass: a 0.8 majority class ----------------------------------------------------


def rule(x):
    return np.where(x < 0.1, 0, np.where(x > 0.9, 2, 1))


@pytest.fixture(scope="module")
def multiclass_data():
    rng = np.random.default_rng(1)
    x = rng.random(N).astype(np.float32)
    y = rule(x)
    noisy = rng.random(N) < 0.05
    y[noisy] = rng.integers(0, 3, noisy.sum())
    return x, y.astype(np.int64)


def rule_scores(x):
    classes = tf.where(x < 0.1, 0, tf.where(x > 0.9, 2, 1))
    return tf.one_hot(classes, 3) * 0.8 + 0.1 / 1.0 * (1 - tf.one_hot(classes, 3))


def majority_scores(x):
    return tf.tile([[0.1, 0.8, 0.1]], [tf.size(x), 1])


@pytest.fixture(scope="module")
def multiclass_runs(tmp_path_factory, multiclass_data):
    tmp = tmp_path_factory.mktemp("multiclass")
    return {
        "constant": evaluate(tmp, "constant", tasks.MULTICLASS, majority_scores, multiclass_data),
        "good": evaluate(tmp, "good", tasks.MULTICLASS, rule_scores, multiclass_data),
        "good_threshold": evaluate(
            tmp,
            "good_threshold",
            tasks.MULTICLASS,
            rule_scores,
            multiclass_data,
            bless_metric="accuracy",
            bless_threshold=0.999,
        ),
    }


@pytest.mark.e2e
def test_the_majority_class_model_is_not_blessed_on_skewed_data(multiclass_runs, multiclass_data):
    _, y = multiclass_data
    share = np.bincount(y).max() / len(y)
    evaluation = multiclass_runs["constant"]
    assert share > 0.75
    assert evaluation.metrics[bm.MAJORITY_CLASS_SHARE] == pytest.approx(share)
    # Its accuracy is the majority share: high, and worth nothing.
    assert evaluation.metrics["sparse_categorical_accuracy"] == pytest.approx(share)
    assert evaluation.metrics[bm.ACCURACY_LIFT] == 0.0
    assert evaluation.validation_ok is False
    assert failed(evaluation) == {bm.ACCURACY_LIFT}
    assert blessing_reason(evaluation, Blessing.for_task(tasks.MULTICLASS), False) == (
        f"accuracy {share:.4f} does not beat the majority class {share:.4f} on the eval split"
    )


@pytest.mark.e2e
def test_a_good_multiclass_model_is_blessed(multiclass_runs, multiclass_data):
    x, y = multiclass_data
    accuracy = np.mean(rule(x) == y)
    share = np.bincount(y).max() / len(y)
    evaluation = multiclass_runs["good"]
    assert evaluation.metrics["sparse_categorical_accuracy"] == pytest.approx(accuracy, abs=1e-6)
    assert evaluation.metrics[bm.ACCURACY_LIFT] == pytest.approx(accuracy - share, abs=1e-6)
    assert evaluation.metrics["example_count"] == N
    assert evaluation.validation_ok is True and not evaluation.failures
    assert blessing_reason(evaluation, Blessing.for_task(tasks.MULTICLASS), True) == (
        f"accuracy {accuracy:.4f} beats the majority class {share:.4f} on the eval split"
    )


@pytest.mark.e2e
def test_a_bless_threshold_is_a_bar_on_top_of_the_baseline(multiclass_runs, multiclass_data):
    x, y = multiclass_data
    evaluation = multiclass_runs["good_threshold"]
    assert evaluation.validation_ok is False
    assert failed(evaluation) == {"sparse_categorical_accuracy"}  # the baseline is beaten
    blessing = Blessing.for_task(tasks.MULTICLASS, "accuracy", 0.999)
    assert blessing_reason(evaluation, blessing, False) == (
        f"accuracy {np.mean(rule(x) == y):.4f} is below the threshold 0.999"
    )


# --- binary: class 1 is the minority -----------------------------------------------------


def true_probability(x):
    return 1.0 / (1.0 + np.exp(-(x - 0.75) * 12.0))


@pytest.fixture(scope="module")
def binary_data():
    rng = np.random.default_rng(2)
    x = rng.random(N).astype(np.float32)
    y = (rng.random(N) < true_probability(x)).astype(np.int64)
    return x, y


def two_columns(p1):
    return tf.stack([1.0 - p1, p1], -1)


@pytest.fixture(scope="module")
def binary_runs(tmp_path_factory, binary_data):
    tmp = tmp_path_factory.mktemp("binary")

    def good(x):
        return two_columns(tf.sigmoid((x - 0.75) * 12.0))

    def constant(x):
        return two_columns(tf.fill(tf.shape(x), 0.2))

    return {
        "good": evaluate(tmp, "good", tasks.BINARY, good, binary_data, num_classes=2),
        "constant_auc": evaluate(
            tmp, "constant", tasks.BINARY, constant, binary_data, bless_metric="auc"
        ),
    }


@pytest.mark.e2e
def test_binary_auc_precision_and_recall_of_class_1(binary_runs, binary_data):
    x, y = binary_data
    p1 = tf.sigmoid((x - 0.75) * 12.0).numpy()
    evaluation = binary_runs["good"]
    m = evaluation.metrics
    assert 0.6 < np.bincount(y).max() / len(y) < 0.9  # skewed, not degenerate
    # TFMA's AUC sums over 10,000 thresholds: close to the exact one.
    assert m["auc"] == pytest.approx(roc_auc_score(y, p1), abs=2e-3)
    assert m["precision"] == pytest.approx(precision_score(y, p1 > 0.5))
    assert m["recall"] == pytest.approx(recall_score(y, p1 > 0.5))
    assert m[bm.MAJORITY_CLASS_SHARE] == pytest.approx(np.bincount(y).max() / len(y))
    assert evaluation.validation_ok is True
    assert evaluation_line(evaluation, tasks.BINARY).startswith("evaluation accuracy: ")
    assert f"class 1: auc {m['auc']:.4f}, precision" in evaluation_line(evaluation, tasks.BINARY)


@pytest.mark.e2e
def test_a_constant_binary_model_beats_neither_the_majority_nor_chance(binary_runs):
    evaluation = binary_runs["constant_auc"]
    assert evaluation.metrics["auc"] == pytest.approx(0.5)
    assert evaluation.validation_ok is False
    assert failed(evaluation) == {bm.ACCURACY_LIFT, "auc"}
    reason = blessing_reason(evaluation, Blessing.for_task(tasks.BINARY, "auc"), False)
    assert "does not beat the majority class" in reason
    assert "auc 0.5000 does not beat chance (0.5)" in reason


# --- regression ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def regression_data():
    rng = np.random.default_rng(3)
    x = rng.normal(size=N).astype(np.float32)
    y = (200.0 + 30.0 * x + rng.normal(scale=10.0, size=N)).astype(np.float32)
    return x, y


@pytest.fixture(scope="module")
def regression_runs(tmp_path_factory, regression_data):
    tmp = tmp_path_factory.mktemp("regression")
    _, y = regression_data
    mean = float(np.mean(y.astype(np.float64)))

    def good(x):
        return 200.0 + 30.0 * x

    def constant(x):
        return tf.fill(tf.shape(x), tf.constant(mean, tf.float32))

    return {
        "constant": evaluate(tmp, "constant", tasks.REGRESSION, constant, regression_data),
        "good": evaluate(tmp, "good", tasks.REGRESSION, good, regression_data),
        "good_threshold": evaluate(
            tmp,
            "good_threshold",
            tasks.REGRESSION,
            good,
            regression_data,
            bless_metric="mse",
            bless_threshold=50.0,  # the noise alone has a variance of about 100
        ),
    }


@pytest.mark.e2e
def test_always_predicting_the_mean_is_not_blessed(regression_runs, regression_data):
    _, y = regression_data
    y64 = y.astype(np.float64)
    evaluation = regression_runs["constant"]
    assert evaluation.metrics[bm.MEAN_PREDICTOR_MSE] == pytest.approx(np.var(y64), rel=1e-6)
    assert evaluation.metrics[bm.R_SQUARED] <= bm.MIN_LIFT
    assert evaluation.validation_ok is False
    assert failed(evaluation) == {bm.R_SQUARED}
    reason = blessing_reason(evaluation, Blessing.for_task(tasks.REGRESSION), False)
    assert reason.startswith("mse ") and "does not beat the mean predictor's" in reason


@pytest.mark.e2e
def test_a_good_regression_model_is_blessed(regression_runs, regression_data):
    x, y = regression_data
    y64, p = y.astype(np.float64), 200.0 + 30.0 * x.astype(np.float64)
    evaluation = regression_runs["good"]
    m = evaluation.metrics
    mse = np.mean((y64 - p) ** 2)
    assert m["mean_squared_error"] == pytest.approx(mse, rel=1e-4)
    assert m["mean_absolute_error"] == pytest.approx(np.mean(np.abs(y64 - p)), rel=1e-4)
    assert m[bm.R_SQUARED] == pytest.approx(1 - mse / np.var(y64), rel=1e-4)
    assert evaluation.validation_ok is True
    line = evaluation_line(evaluation, tasks.REGRESSION)
    assert line.startswith(f"evaluation mse: {m['mean_squared_error']:.5g} (mean predictor ")
    assert f"mae {m['mean_absolute_error']:.4f}" in line  # about 8


@pytest.mark.e2e
def test_an_mse_threshold_is_an_upper_bound(regression_runs):
    evaluation = regression_runs["good_threshold"]
    assert evaluation.metrics["mean_squared_error"] > 50.0
    assert evaluation.validation_ok is False
    assert failed(evaluation) == {"mean_squared_error"}
    blessing = Blessing.for_task(tasks.REGRESSION, "mse", 50.0)
    assert blessing_reason(evaluation, blessing, False) == (
        f"mse {evaluation.metrics['mean_squared_error']:.5g} is above the threshold 50"
    )


# --- the run summary and the pipeline ----------------------------------------------------


@pytest.mark.e2e
def test_the_summary_says_why_the_model_was_not_blessed(multiclass_runs, regression_runs):
    from tfx_accum.pipeline.cli.report import RunSummary
    from tfx_accum.pipeline.cli.summary import summary_lines as _summary_lines

    evaluation = multiclass_runs["constant"]
    share = evaluation.metrics[bm.MAJORITY_CLASS_SHARE]
    summary = RunSummary("run", None, evaluation, False, None, [])
    lines = _summary_lines(summary, Blessing.for_task(tasks.MULTICLASS), "trials: none", 1.0)
    assert f"evaluation accuracy: {share:.4f} (majority class {share:.4f}); {N} eval examples" in (
        lines
    )
    assert (
        f"blessed: no (accuracy {share:.4f} does not beat the majority class {share:.4f} on the "
        "eval split): not pushed; exit code 3 (--allow-unblessed to exit 0)"
    ) in lines

    evaluation = regression_runs["good"]
    summary = RunSummary("run", None, evaluation, True, "/served", [])
    lines = _summary_lines(summary, Blessing.for_task(tasks.REGRESSION), "trials: none", 1.0)
    m = evaluation.metrics
    assert (
        f"blessed: yes (mse {m['mean_squared_error']:.5g} beats the mean predictor's "
        f"{m[bm.MEAN_PREDICTOR_MSE]:.5g} on the eval split)"
    ) in lines


def test_the_pipelines_evaluator_gets_the_tasks_config():
    from google.protobuf import json_format

    from tfx_accum.components.config.settings import ModelSettings
    from tfx_accum.pipeline.pipeline import create_pipeline

    pipeline = create_pipeline(
        "p",
        "/r",
        "/d",
        "/s",
        tune=False,
        model_settings=ModelSettings(task=tasks.BINARY),
        bless_metric="auc",
        bless_threshold=0.8,
    )
    evaluator = next(c for c in pipeline.components if c.id == "Evaluator")
    config = json_format.Parse(evaluator.exec_properties["eval_config"], tfma.EvalConfig())
    assert config == eval_config(tasks.BINARY, "label", None, "auc", 0.8)
    classes = {m.class_name: m for spec in config.metrics_specs for m in spec.metrics}
    assert classes["MajorityClassLift"].module == "tfx_accum.components.training.baseline_metrics"
    assert classes["AUC"].threshold.value_threshold.lower_bound.value == 0.8
    assert json.loads(evaluator.exec_properties["eval_config"])  # JSON, as TFX stores it


@pytest.mark.parametrize("task", [tasks.MULTICLASS, tasks.BINARY, tasks.REGRESSION])
def test_every_metric_is_computed_without_tensorflow(task):
    """No metric of the Evaluator is a Keras metric, which TFMA computes by tracing
    TensorFlow functions in every Evaluator: each is TFMA's own or ours."""
    from tensorflow_model_analysis.metrics import metric_types

    native = metric_types.registered_metrics()
    config = eval_config(task, "label", 2 if task == tasks.BINARY else None)
    metrics = [m for spec in config.metrics_specs for m in spec.metrics]
    assert metrics
    keras_metrics = [
        m.class_name for m in metrics if m.class_name not in native and m.module != bm.__name__
    ]
    assert keras_metrics == []
