"""The baseline metrics' numpy path gives the Evaluator's values of the per-example path.

The combiners of tfx_accum.components.training.baseline_metrics buffer the plain examples the
Evaluator hands them (one model, unweighted, the serving dict's ``scores`` or ``predictions``) and
count them with numpy in batches, instead of running TFMA's
``to_label_prediction_example_weight`` on each (most of the Evaluator's own time).
Here TFMA evaluates the same exported model on the same examples twice, with the numpy
path and with every example forced through the per-example path, for each task: the
metrics must be equal (classification: the same counts; regression: to float rounding),
and equal to numpy's on the model's own predictions. Small buffers make every run cross
many buffer flushes and merges.

The classification metrics (accuracy, the majority-class lift and share, the example
count) are read off one count of the classes: TFMA runs that counting combiner once per
example, not once per metric, and the count equals TFMA's own ``ExampleCount``, run beside
it under another name.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_model_analysis as tfma

from tfx_accum.components.config import tasks
from tfx_accum.components.training import baseline_metrics as bm
from tfx_accum.pipeline.evaluation import eval_config, read_evaluation

# Each test reads TFMA runs of Beam pipelines (module fixtures): the slow tier.
pytestmark = pytest.mark.e2e

LABEL = "label"
N = 3000
WEIGHTS = np.array([[2.0, -1.0, 0.5], [-1.0, 1.5, 0.2]], np.float32)  # 2 features -> 3 classes


def write_examples(path, x: np.ndarray, y: np.ndarray) -> str:
    with tf.io.TFRecordWriter(str(path)) as writer:
        for xi, yi in zip(x, y):
            label = (
                tf.train.Feature(int64_list=tf.train.Int64List(value=[int(yi)]))
                if np.issubdtype(y.dtype, np.integer)
                else tf.train.Feature(float_list=tf.train.FloatList(value=[float(yi)]))
            )
            features = {
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=xi.tolist())),
                LABEL: label,
            }
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()
            )
    return str(path)


def predict(task: str, x):
    """The model: class scores (3 classes, or 2 for binary) or a value, from 2 features."""
    weights = WEIGHTS[:, :2] if task == tasks.BINARY else WEIGHTS
    if task == tasks.REGRESSION:
        return x @ weights[:, :1] * 1.7 + 0.3  # (n, 1)
    return tf.nn.softmax(x @ weights, axis=-1)


class Model(tf.Module):
    """The Trainer's serving contract (tfx_accum.components.training.export): ``serving_default``
    returns ``scores`` and ``classes`` (or ``predictions``), ``transform_labels`` the label."""

    def __init__(self, task: str):
        super().__init__()
        label_type = tf.float32 if task == tasks.REGRESSION else tf.int64
        self._spec = {
            "x": tf.io.FixedLenFeature([2], tf.float32),
            LABEL: tf.io.FixedLenFeature([1], label_type),
        }
        self._task = task

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(self, serialized):
        output = predict(self._task, tf.io.parse_example(serialized, self._spec)["x"])
        if self._task == tasks.REGRESSION:
            return {tasks.PREDICTIONS_KEY: output}
        return {
            tasks.SCORES_KEY: output,
            "classes": tf.strings.as_string(tf.argmax(output, -1))[:, None],
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def transform_labels(self, serialized):
        return {LABEL: tf.io.parse_example(serialized, self._spec)[LABEL][:, 0]}


def data(task: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, 2)).astype(np.float32)
    if task == tasks.REGRESSION:
        return x, (x @ WEIGHTS[:, :1] * 2.0 + rng.normal(size=(N, 1))).astype(np.float32)[:, 0]
    classes = 2 if task == tasks.BINARY else 3
    scores = x @ WEIGHTS[:, :classes] + rng.normal(scale=1.0, size=(N, classes))
    return x, scores.argmax(axis=1).astype(np.int64)


@pytest.fixture(scope="module", params=[tasks.MULTICLASS, tasks.BINARY, tasks.REGRESSION])
def saved(request, tmp_path_factory):
    task = request.param
    tmp = tmp_path_factory.mktemp(task)
    model = Model(task)
    model_dir = str(tmp / "model")
    tf.saved_model.save(
        model,
        model_dir,
        signatures={"serving_default": model.serve, "transform_labels": model.transform_labels},
    )
    x, y = data(task)
    return task, tmp, model_dir, write_examples(tmp / "eval.tfrecord", x, y), x, y


# TFMA's own ExampleCount, under a name of its own: the reference for the example count.
TFMA_COUNT = "tfma_example_count"


def evaluate(saved, name: str) -> dict[str, float]:
    task, tmp, model_dir, examples, _, _ = saved
    config = eval_config(task, LABEL, 2 if task == tasks.BINARY else None)
    config.metrics_specs[0].metrics.add(
        class_name="ExampleCount", config=json.dumps({"name": TFMA_COUNT})
    )
    output = str(tmp / name)
    tfma.run_model_analysis(
        eval_shared_model=tfma.default_eval_shared_model(model_dir, eval_config=config),
        eval_config=config,
        data_location=examples,
        output_path=output,
    )
    return read_evaluation(output).metrics


@pytest.fixture(scope="module")
def both(saved):
    """The metrics with the numpy path (and a count of per-example calls), and with every
    example forced through TFMA's per-example path; 97-row buffers."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bm, "BUFFER_ROWS", 97)
        calls = []
        per_example = bm._Combiner._examples

        def counted(self, element):
            calls.append(1)
            return per_example(self, element)

        patch.setattr(bm._Combiner, "_examples", counted)
        added = []
        add_input = bm._ClassCountsCombiner.add_input

        def counted_input(self, accumulator, element):
            added.append(1)
            return add_input(self, accumulator, element)

        patch.setattr(bm._ClassCountsCombiner, "add_input", counted_input)
        fast = evaluate(saved, "numpy")
        fast_calls, CLASS_COUNT_INPUTS[saved[0]] = len(calls), len(added)
        patch.setattr(bm._Combiner, "_plain_arrays", lambda self, element: None)
        slow = evaluate(saved, "per_example")
    return fast, fast_calls, slow, len(calls) - fast_calls


CLASS_COUNT_INPUTS: dict[str, int] = {}  # per task: the examples the class counts were given


def test_the_evaluators_examples_take_the_numpy_path(both):
    _, fast_calls, _, slow_calls = both
    assert fast_calls == 0
    assert slow_calls >= N  # the reference run did go example by example


def test_the_metrics_equal_the_per_example_paths(saved, both):
    task = saved[0]
    fast, _, slow, _ = both
    assert fast.keys() == slow.keys()
    for name, value in slow.items():
        if tasks.is_classification(task):
            assert fast[name] == value, name  # counts: bit for bit
        else:
            assert fast[name] == pytest.approx(value, rel=1e-12, abs=1e-12), name


def test_the_classification_metrics_count_each_example_once(saved, both):
    """Three metrics (and TFMA's ExampleCount beside them), one counting combiner: each
    example is added to the class counts once."""
    task = saved[0]
    if not tasks.is_classification(task):
        assert CLASS_COUNT_INPUTS[task] == 0
        return
    assert CLASS_COUNT_INPUTS[task] == N
    fast, _, slow, _ = both
    for metrics in (fast, slow):
        assert {bm.ACCURACY, bm.ACCURACY_LIFT, bm.MAJORITY_CLASS_SHARE, bm.EXAMPLE_COUNT} <= set(
            metrics
        )
        assert not [name for name in metrics if name.startswith("_")]  # the counts: private


def test_the_example_count_equals_tfmas(both):
    fast, _, slow, _ = both
    assert fast[bm.EXAMPLE_COUNT] == fast[TFMA_COUNT] == slow[bm.EXAMPLE_COUNT] == N


def test_the_metrics_equal_numpy_on_the_models_predictions(saved, both):
    task, _, _, _, x, y = saved
    fast = both[0]
    output = np.asarray(predict(task, tf.constant(x)))
    assert fast[bm.EXAMPLE_COUNT] == N
    if tasks.is_classification(task):
        accuracy = np.mean(output.argmax(axis=1) == y)
        share = np.bincount(y).max() / N
        assert fast[bm.ACCURACY] == pytest.approx(accuracy, abs=1e-12)
        assert fast[bm.MAJORITY_CLASS_SHARE] == pytest.approx(share, abs=1e-12)
        assert fast[bm.ACCURACY_LIFT] == pytest.approx(accuracy - share, abs=1e-12)
        return
    p, y64 = output[:, 0].astype(np.float64), y.astype(np.float64)
    mse = np.mean((y64 - p) ** 2)
    assert fast[bm.MEAN_PREDICTOR_MSE] == pytest.approx(np.var(y64), rel=1e-9)
    assert fast[bm.R_SQUARED] == pytest.approx(1 - mse / np.var(y64), rel=1e-9)
    assert fast["mean_squared_error"] == pytest.approx(mse, rel=1e-5)  # TFMA's, float32
