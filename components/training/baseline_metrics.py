"""TFMA metrics that measure the trivial baseline and the model's lift over it, in one pass.

A model is worth blessing only if it beats what needs no model at all, measured on the
split it is judged on (the Evaluator's eval split):

- classification: always predicting the **majority class** of that split. Its accuracy is
  the majority class's share; :class:`MajorityClassLift` reports that share
  (``majority_class_share``) and the model's accuracy minus it (``accuracy_lift``).
- regression: always predicting the **mean** of that split. Its MSE is the labels'
  variance; :class:`MeanPredictorLift` reports it (``mean_predictor_mse``) and
  ``r_squared`` = 1 - MSE / the mean predictor's MSE, the share of the mean predictor's
  squared error the model removes (R^2; 0 for a model that predicts the mean).

Both baselines take the eval split's own majority and mean, the best constant in
hindsight: stricter than the training split's, and measured on the same examples in the
same pass as the model's score (each is a ``beam.CombineFn`` that TFMA runs beside its
own metrics). The Evaluator gates on the lift with a ``MetricThreshold`` of
:data:`MIN_LIFT` (tfx_accum.pipeline.evaluation): equal to the baseline is not better.

:class:`SparseCategoricalAccuracy` is the model's accuracy computed the same way (the arg
max of the scores against the class index, weighted), in Python like TFMA's own native
metrics: TFMA's wrapper of the Keras metric of that name traces TensorFlow functions in
every Evaluator, a large part of a small Evaluator's time.

The classification metrics (:class:`SparseCategoricalAccuracy`, :class:`MajorityClassLift`
and :class:`ClassExampleCount`, TFMA's ``example_count``) are read off one count of the
classes, as TFMA's own precision, recall and AUC are read off one confusion matrix: each
metric's computations are the same counting ``MetricComputation`` (private name
:data:`CLASS_COUNTS`; TFMA runs identical computations once and drops private names from
its output) and a ``DerivedMetricComputation`` that writes the metric's own keys from the
counts. An EvalConfig with all three has one per-example combiner where it had three.

TFMA hands each combiner one example at a time (after unbatching the model's batched
output), so the per-example work is what an Evaluator's time grows with. The plain
examples of this project's EvalConfig (one model, unweighted, numeric label and the
serving dict's ``scores`` or ``predictions``) are therefore only buffered and counted with
numpy every :data:`BUFFER_ROWS` examples, sparing TFMA's ``to_label_prediction_example_weight``
on every example, twice for classification (the Evaluator's CPU time:
bench/evaluator.py). Any other input takes that per-example path; both give the same counts
(tests/training/test_evaluator_scale.py).

They are ordinary ``tfma.metrics.Metric`` subclasses, named in an ``EvalConfig`` by class
and module (:func:`metric_config`), so TFMA imports them from the installed package
wherever the Evaluator runs (Beam's DirectRunner, a Kubeflow pod).
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
import collections
import dataclasses
from collections.abc import Callable, Iterable

import apache_beam as beam
import numpy as np
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.metrics import example_count, metric_types, metric_util

# The names of the values in TFMA's output (``tfma.load_eval_result``, the validation).
ACCURACY = "sparse_categorical_accuracy"  # Keras's name for the same accuracy
EXAMPLE_COUNT = example_count.EXAMPLE_COUNT_NAME  # TFMA's ExampleCount's name
ACCURACY_LIFT = "accuracy_lift"  # accuracy - majority_class_share
MAJORITY_CLASS_SHARE = "majority_class_share"  # the majority class's share of the split
R_SQUARED = "r_squared"  # 1 - mse / mean_predictor_mse
MEAN_PREDICTOR_MSE = "mean_predictor_mse"  # the labels' variance on the split
# The counts the classification metrics share; private (a leading ``_``): not in the output.
CLASS_COUNTS = "_class_counts"

# The lift a model must reach to count as better than the baseline. Not 0: a model equal
# to the baseline (a constant majority-class or mean model) scores a lift of 0 up to float
# rounding (~1e-16), which must not pass; one example better of a million is 1e-6.
MIN_LIFT = 1e-9


def metric_config(metric_class: type[tfma.metrics.Metric]) -> tfma.MetricConfig:
    """The ``MetricConfig`` naming ``metric_class`` by class and by this module."""
    return tfma.MetricConfig(class_name=metric_class.__name__, module=__name__)


def _key(name: str, model_name: str, output_name: str, sub_key, example_weighted: bool):
    return metric_types.MetricKey(
        name=name,
        model_name=model_name,
        output_name=output_name,
        sub_key=sub_key,
        example_weighted=example_weighted,
    )


class MajorityClassLift(tfma.metrics.Metric):
    """The majority class's share of the examples, and the model's accuracy above it.

    Reads sparse labels (a class index per example, as the ``transform_labels`` signature
    gives them) and class scores (``[num_classes]`` per example; the predicted class is
    the arg max, as in Keras's ``SparseCategoricalAccuracy``). Writes ``accuracy_lift``
    (the metric's name, for thresholds) and ``majority_class_share``.
    """

    def __init__(self, name: str = ACCURACY_LIFT):
        super().__init__(
            metric_util.merge_per_key_computations(
                _from_class_counts(_lift_and_share, MAJORITY_CLASS_SHARE)
            ),
            name=name,
        )


class SparseCategoricalAccuracy(tfma.metrics.Metric):
    """The share of examples whose highest score is their class, as Keras's metric of the
    same name computes it (``sparse_categorical_accuracy``), without TensorFlow.

    Reads what :class:`MajorityClassLift` reads: a class index per example and its scores.
    """

    def __init__(self, name: str = ACCURACY):
        super().__init__(
            metric_util.merge_per_key_computations(_from_class_counts(_accuracy)), name=name
        )


class ClassExampleCount(tfma.metrics.Metric):
    """TFMA's ``example_count`` (the examples, or their weight where weighted) for a
    classification model, from the class counts the other classification metrics share
    instead of a combiner of its own (TFMA's ``ExampleCount``).

    Reads what :class:`MajorityClassLift` reads: a class index per example and its scores.
    """

    def __init__(self, name: str = EXAMPLE_COUNT):
        super().__init__(
            metric_util.merge_per_key_computations(_from_class_counts(_count)), name=name
        )

    @property
    def compute_confidence_interval(self) -> bool:
        return False  # as TFMA's ExampleCount: a count has no sampling error to report


class MeanPredictorLift(tfma.metrics.Metric):
    """The MSE of always predicting the labels' mean, and the model's R^2 against it.

    Reads one number per example for label and prediction. Writes ``r_squared`` (the
    metric's name, for thresholds) and ``mean_predictor_mse``; ``r_squared`` is NaN (never
    blessed) when every label is the same, where no model can beat the mean.
    """

    def __init__(self, name: str = R_SQUARED):
        super().__init__(
            metric_util.merge_per_key_computations(
                _computations(_MeanCombiner, MEAN_PREDICTOR_MSE)
            ),
            name=name,
        )


def _per_key(build: Callable[..., metric_types.MetricComputations]):
    """TFMA's ``create_computations_fn`` (the signature TFMA inspects) around
    ``build(key, name, eval_config, example_weighted)``, where ``key(n)`` is metric ``n``'s
    key for the model, output and sub key that TFMA asks for."""

    def computations(
        name: str,
        eval_config: tfma.EvalConfig | None = None,
        model_name: str = "",
        output_name: str = "",
        sub_key: metric_types.SubKey | None = None,
        example_weighted: bool = False,
    ) -> metric_types.MetricComputations:
        def key(metric: str) -> metric_types.MetricKey:
            return _key(metric, model_name, output_name, sub_key, example_weighted)

        return build(key, name, eval_config, example_weighted)

    return computations


def _computations(combiner_class: type, *extra: str):
    """TFMA's ``create_computations_fn`` for ``combiner_class``: one computation writing
    the metric's own value (under its name, for thresholds) and the ``extra`` values."""

    def build(key, name, eval_config, example_weighted):
        keys = [key(n) for n in (name, *extra)]
        return [
            metric_types.MetricComputation(
                keys=keys,
                preprocessors=None,
                combiner=combiner_class(keys, eval_config, example_weighted),
            )
        ]

    return _per_key(build)


def _from_class_counts(values: Callable[[_ClassCounts], tuple[float, ...]], *extra: str):
    """TFMA's ``create_computations_fn`` for a metric read off the class counts: the
    counting computation (the same for every such metric, so that TFMA runs it once) and
    a derived one writing ``values(counts)`` under the metric's name and ``extra``."""

    def build(key, name, eval_config, example_weighted):
        counts_key = key(CLASS_COUNTS)
        keys = [key(n) for n in (name, *extra)]

        def result(metrics: dict) -> metric_types.MetricsDict:
            return dict(zip(keys, values(metrics[counts_key])))

        return [
            metric_types.MetricComputation(
                keys=[counts_key],
                preprocessors=None,
                combiner=_ClassCountsCombiner([counts_key], eval_config, example_weighted),
            ),
            metric_types.DerivedMetricComputation(keys=keys, result=result),
        ]

    return _per_key(build)


def _accuracy(counts: _ClassCounts) -> tuple[float]:
    return (counts.correct / counts.total if counts.total > 0 else float("nan"),)


def _lift_and_share(counts: _ClassCounts) -> tuple[float, float]:
    if counts.total <= 0:
        return float("nan"), float("nan")
    majority = max(counts.per_class.values())
    # From the counts, so that a constant majority-class model's lift is exactly 0.
    return (counts.correct - majority) / counts.total, majority / counts.total


def _count(counts: _ClassCounts) -> tuple[float]:
    return (counts.total,)


# Rows an accumulator holds before it reduces them with numpy: bounds its memory (a few
# hundred KiB of scores) while each reduction is one vectorised call over many examples.
BUFFER_ROWS = 4096


class _Combiner(beam.CombineFn):
    """Label, prediction and weight of each example, as TFMA's own metrics read them.

    TFMA hands a combiner one example at a time. The plain case (one model and output, no
    sub key, unweighted, numeric arrays: what this project's EvalConfig gives) is only
    buffered per example and reduced with numpy every :data:`BUFFER_ROWS` examples; any
    other input goes through TFMA's ``to_label_prediction_example_weight`` per example, as
    TFMA's own metrics do. Both paths give the same values (tests/training/test_evaluator_scale.py).
    """

    def __init__(self, keys, eval_config, example_weighted: bool, flatten: bool):
        self._keys = keys
        self._eval_config = eval_config
        self._example_weighted = example_weighted
        self._flatten = flatten
        key = keys[0]
        specs = list(eval_config.model_specs) if eval_config else []
        self._plain = len(specs) <= 1 and not (
            example_weighted or key.model_name or key.output_name or key.sub_key
        )
        # The output TFMA reads where the model returns several (the serving dict).
        self._prediction_key = specs[0].prediction_key if specs else ""

    def _plain_arrays(self, element: metric_types.StandardMetricInputs):
        """``(label, prediction)`` as numeric arrays where the fast path applies, else None."""
        if not self._plain:
            return None
        label, prediction = element.label, element.prediction
        if isinstance(prediction, dict) and self._prediction_key:
            prediction = prediction.get(self._prediction_key)
        if (
            type(label) is np.ndarray  # noqa: E721 - not a dict of outputs, not a list
            and type(prediction) is np.ndarray  # noqa: E721
            and label.dtype.kind in "biuf"
            and prediction.dtype.kind in "f"
            and label.size >= 1
        ):
            return label, prediction
        return None

    def _examples(self, element: metric_types.StandardMetricInputs):
        key = self._keys[0]
        yield from metric_util.to_label_prediction_example_weight(
            element,
            eval_config=self._eval_config,
            model_name=key.model_name,
            output_name=key.output_name,
            sub_key=key.sub_key,
            example_weighted=self._example_weighted,
            flatten=self._flatten,
            require_single_example_weight=True,
        )

    def compact(self, accumulator):
        accumulator.reduce()  # what Beam ships between stages: counts, not examples
        return accumulator


@dataclasses.dataclass
class _ClassCounts:
    """Weight per true class, of correctly predicted examples, and in all; and the plain
    examples not yet counted (their class index and their scores)."""

    per_class: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    correct: float = 0.0
    total: float = 0.0
    labels: list = dataclasses.field(default_factory=list)
    scores: list = dataclasses.field(default_factory=list)

    def add(self, other: _ClassCounts) -> None:
        """``other``'s examples added to these (``other`` unchanged: Beam may share it)."""
        pending = _ClassCounts(labels=other.labels, scores=other.scores)
        pending.reduce()
        for counts in (other, pending):
            self.per_class.update(counts.per_class)
            self.correct += counts.correct
            self.total += counts.total

    def reduce(self) -> None:
        """Counts the buffered examples (each of weight 1) with numpy."""
        if not self.labels:
            return
        true_class = np.asarray([label.reshape(-1)[0] for label in self.labels]).astype(int)
        # The first of equal scores wins, as in Keras (argmax); float64 as per example.
        predicted = np.argmax(np.stack(self.scores).astype(np.float64, copy=False), axis=1)
        classes, counts = np.unique(true_class, return_counts=True)
        for value, count in zip(classes.tolist(), counts.tolist()):
            self.per_class[value] += float(count)
        self.correct += float(np.count_nonzero(predicted == true_class))
        self.total += float(len(true_class))
        self.labels, self.scores = [], []


class _ClassCountsCombiner(_Combiner):
    """The class counts (:class:`_ClassCounts`) of the examples, under :data:`CLASS_COUNTS`."""

    def __init__(self, keys, eval_config, example_weighted: bool):
        super().__init__(keys, eval_config, example_weighted, flatten=False)

    def create_accumulator(self) -> _ClassCounts:
        return _ClassCounts()

    def add_input(
        self, accumulator: _ClassCounts, element: metric_types.StandardMetricInputs
    ) -> _ClassCounts:
        plain = self._plain_arrays(element)
        # Class indices only (a float label takes TFMA's path, as it did).
        if plain is not None and plain[0].dtype.kind in "biu" and plain[1].ndim <= 1:
            label, scores = plain
            self._check_scores(scores.size)
            if accumulator.scores and scores.shape != accumulator.scores[0].shape:
                accumulator.reduce()  # np.stack needs one shape per buffer
            accumulator.labels.append(label)
            accumulator.scores.append(scores)
            if len(accumulator.labels) >= BUFFER_ROWS:
                accumulator.reduce()
            return accumulator
        for true_class, predicted, weight in self._classes(element):
            accumulator.per_class[true_class] += weight
            accumulator.total += weight
            if predicted == true_class:
                accumulator.correct += weight
        return accumulator

    def _check_scores(self, size: int) -> None:
        if size < 2:
            raise ValueError(
                f"{ACCURACY} and {ACCURACY_LIFT} need one score per class (at least 2 per "
                f"example, the serving output's `scores`); got {size}."
            )

    def _classes(self, element: metric_types.StandardMetricInputs):
        """``(true class, predicted class, weight)`` of each example."""
        for label, prediction, weight in self._examples(element):
            scores = np.asarray(prediction, dtype=np.float64).reshape(-1)
            self._check_scores(scores.size)
            # The first of equal scores wins, as in Keras (argmax).
            yield (
                int(np.asarray(label).reshape(-1)[0]),
                int(np.argmax(scores)),
                float(metric_util.safe_to_scalar(weight)),
            )

    def merge_accumulators(self, accumulators: Iterable[_ClassCounts]) -> _ClassCounts:
        merged = _ClassCounts()
        for accumulator in accumulators:
            merged.add(accumulator)
        return merged

    def extract_output(self, accumulator: _ClassCounts) -> metric_types.MetricsDict:
        accumulator.reduce()
        (key,) = self._keys
        return {key: accumulator}


@dataclasses.dataclass
class _Moments:
    """Weighted count, mean and sum of squared deviations of the labels (Welford, merged
    by Chan's rule: no cancellation between large sums), and the model's squared error;
    and the plain examples not yet added (label and prediction, weight 1)."""

    weight: float = 0.0
    mean: float = 0.0
    squared_deviations: float = 0.0
    squared_errors: float = 0.0
    labels: list = dataclasses.field(default_factory=list)
    predictions: list = dataclasses.field(default_factory=list)

    def add(self, other: _Moments) -> None:
        """Chan's rule: ``other``'s examples added to these."""
        if other.weight <= 0:
            return
        total = self.weight + other.weight
        delta = other.mean - self.mean
        self.squared_deviations += (
            other.squared_deviations + delta * delta * self.weight * other.weight / total
        )
        self.mean += delta * other.weight / total
        self.weight = total
        self.squared_errors += other.squared_errors

    def reduce(self) -> None:
        """Adds the buffered examples as one batch: its mean and squared deviations in two
        passes with numpy, merged by Chan's rule."""
        if not self.labels:
            return
        y = np.concatenate(self.labels).astype(np.float64)
        p = np.concatenate(self.predictions).astype(np.float64)
        self.labels, self.predictions = [], []
        mean = float(np.mean(y))
        batch = _Moments(
            weight=float(len(y)),
            mean=mean,
            squared_deviations=float(np.sum(np.square(y - mean))),
            squared_errors=float(np.sum(np.square(y - p))),
        )
        self.add(batch)


class _MeanCombiner(_Combiner):
    def __init__(self, keys, eval_config, example_weighted: bool):
        super().__init__(keys, eval_config, example_weighted, flatten=True)

    def create_accumulator(self) -> _Moments:
        return _Moments()

    def add_input(
        self, accumulator: _Moments, element: metric_types.StandardMetricInputs
    ) -> _Moments:
        plain = self._plain_arrays(element)
        if plain is not None and plain[0].size == 1 and plain[1].size == 1:
            accumulator.labels.append(plain[0].reshape(1))
            accumulator.predictions.append(plain[1].reshape(1))
            if len(accumulator.labels) >= BUFFER_ROWS:
                accumulator.reduce()
            return accumulator
        for label, prediction, weight in self._examples(element):
            y = float(metric_util.safe_to_scalar(label))
            p = float(metric_util.safe_to_scalar(prediction))
            w = float(metric_util.safe_to_scalar(weight))
            if w <= 0:
                continue
            accumulator.weight += w
            delta = y - accumulator.mean
            accumulator.mean += w * delta / accumulator.weight
            accumulator.squared_deviations += w * delta * (y - accumulator.mean)
            accumulator.squared_errors += w * (y - p) ** 2
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[_Moments]) -> _Moments:
        merged = _Moments()
        for a in accumulators:  # each left unchanged: Beam may share it
            pending = _Moments(labels=a.labels, predictions=a.predictions)
            pending.reduce()
            merged.add(a)
            merged.add(pending)
        return merged

    def extract_output(self, accumulator: _Moments) -> metric_types.MetricsDict:
        accumulator.reduce()
        r2_key, baseline_key = self._keys
        if accumulator.weight <= 0:
            return {r2_key: float("nan"), baseline_key: float("nan")}
        baseline = accumulator.squared_deviations / accumulator.weight
        r_squared = (
            1.0 - accumulator.squared_errors / accumulator.squared_deviations
            if accumulator.squared_deviations > 0
            else float("nan")  # constant labels: nothing to beat, nothing to bless
        )
        return {r2_key: r_squared, baseline_key: baseline}
