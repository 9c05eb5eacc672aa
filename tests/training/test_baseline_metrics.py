"""The baseline metrics' combiners against numpy, fed pre-computed predictions.

TFMA runs each metric as a ``beam.CombineFn``: examples are added to accumulators that
Beam merges in any grouping. Here the examples are split over several accumulators and
merged, as Beam's workers would, and the results compared with numpy's.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.metrics import metric_types

from tfx_accum.components.training import baseline_metrics as bm


def combine(metric: tfma.metrics.Metric, labels, predictions, parts: int = 3, seed: int = 0):
    """The metric's output over the examples, added to ``parts`` accumulators and merged
    (and its derived values, as TFMA adds them after the combine)."""
    computation, *derived = metric.computations(eval_config=tfma.EvalConfig())
    combiner = computation.combiner
    order = np.random.default_rng(seed).permutation(len(labels))
    accumulators = []
    for chunk in np.array_split(order, parts):
        accumulator = combiner.create_accumulator()
        for i in chunk:
            inputs = metric_types.StandardMetricInputs(
                labels=np.atleast_1d(labels[i]),
                predictions=np.atleast_1d(predictions[i]),
                example_weights=np.array([1.0]),
            )
            accumulator = combiner.add_input(accumulator, inputs)
        accumulators.append(accumulator)
    output = combiner.extract_output(combiner.merge_accumulators(accumulators))
    for computation in derived:
        output.update(computation.result(output))
    return {key.name: value for key, value in output.items()}


def skewed_classes(n: int = 600, seed: int = 0):
    """Labels with a 0.8 majority class, and class scores that are right 90% of the time."""
    rng = np.random.default_rng(seed)
    labels = rng.choice(3, size=n, p=[0.1, 0.8, 0.1])
    predicted = np.where(rng.random(n) < 0.9, labels, rng.integers(0, 3, n))
    scores = np.full((n, 3), 0.1)
    scores[np.arange(n), predicted] = 0.8
    return labels, scores


def test_majority_class_share_and_lift_match_numpy():
    labels, scores = skewed_classes()
    result = combine(bm.MajorityClassLift(), labels, scores)
    share = np.bincount(labels).max() / len(labels)
    accuracy = np.mean(np.argmax(scores, -1) == labels)
    assert share > 0.75  # the skew the test is about
    assert result[bm.MAJORITY_CLASS_SHARE] == pytest.approx(share, abs=1e-12)
    assert result[bm.ACCURACY_LIFT] == pytest.approx(accuracy - share, abs=1e-12)
    assert result[bm.ACCURACY_LIFT] > bm.MIN_LIFT  # a good model beats the majority


def test_a_constant_majority_class_model_has_no_lift():
    labels, _ = skewed_classes()
    majority = np.bincount(labels).argmax()
    constant = np.tile(np.eye(3)[majority] * 0.6 + 0.1, (len(labels), 1))
    result = combine(bm.MajorityClassLift(), labels, constant)
    assert result[bm.ACCURACY_LIFT] == 0.0 < bm.MIN_LIFT
    # A constant minority-class model is worse than the baseline.
    minority = np.tile(np.eye(3)[0], (len(labels), 1))
    assert combine(bm.MajorityClassLift(), labels, minority)[bm.ACCURACY_LIFT] < 0


def test_class_scores_are_required():
    with pytest.raises(ValueError, match="one score per class"):
        combine(bm.MajorityClassLift(), np.array([1, 0]), np.array([[0.7], [0.2]]), parts=1)


def regression(n: int = 500, offset: float = 0.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    labels = offset + 3.0 * x + rng.normal(scale=1.0, size=n)
    return labels, offset + 3.0 * x  # a good model: the noise is all it misses


def test_mean_predictor_mse_and_r_squared_match_numpy():
    labels, predictions = regression()
    result = combine(bm.MeanPredictorLift(), labels, predictions)
    mse = np.mean((labels - predictions) ** 2)
    assert result[bm.MEAN_PREDICTOR_MSE] == pytest.approx(np.var(labels), rel=1e-12)
    assert result[bm.R_SQUARED] == pytest.approx(1 - mse / np.var(labels), rel=1e-12)
    assert result[bm.R_SQUARED] > 0.8


def test_mean_predictor_mse_is_exact_far_from_zero():
    """Labels around 1e8 with unit spread: a sum of squares would cancel to noise (float64
    keeps ~16 digits; 1e16 - 1e16 leaves none), the merged Welford moments do not."""
    labels, predictions = regression(offset=1e8)
    result = combine(bm.MeanPredictorLift(), labels, predictions, parts=7)
    centred = labels - labels.mean()
    assert result[bm.MEAN_PREDICTOR_MSE] == pytest.approx(np.mean(centred**2), rel=1e-6)


def test_predicting_the_mean_has_no_lift():
    labels, _ = regression(offset=1000.0)
    # The eval split's own mean, as the model would serve it (float32).
    constant = np.full_like(labels, np.float32(labels.mean()))
    result = combine(bm.MeanPredictorLift(), labels, constant)
    assert result[bm.R_SQUARED] <= bm.MIN_LIFT
    # The training split's mean (a little off) is worse than the eval split's.
    off = combine(bm.MeanPredictorLift(), labels, constant + 0.5)
    assert off[bm.R_SQUARED] < 0


def test_constant_labels_give_nan_r_squared():
    labels = np.full(20, 4.0)
    result = combine(bm.MeanPredictorLift(), labels, labels)
    assert np.isnan(result[bm.R_SQUARED])  # NaN fails every threshold: never blessed
    assert result[bm.MEAN_PREDICTOR_MSE] == 0.0


def test_metric_configs_name_an_importable_class():
    import importlib

    for metric in (
        bm.MajorityClassLift,
        bm.SparseCategoricalAccuracy,
        bm.ClassExampleCount,
        bm.MeanPredictorLift,
    ):
        config = bm.metric_config(metric)
        assert config.module == "tfx_accum.components.training.baseline_metrics"
        assert getattr(importlib.import_module(config.module), config.class_name) is metric
