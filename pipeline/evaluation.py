"""The Evaluator: its configuration per task, and what its output says about the model.

:func:`eval_config` gives TFMA's ``EvalConfig`` for a task (tfx_accum.components.config.tasks):

- multiclass: accuracy (``SparseCategoricalAccuracy``, computed as Keras does but without
  TensorFlow: tfx_accum.components.training.baseline_metrics), the example count, and the
  majority-class baseline with the model's lift over it
  (:class:`~tfx_accum.components.training.baseline_metrics.MajorityClassLift`), all three
  read off one count of the classes (TFMA's ``example_count`` by
  :class:`~tfx_accum.components.training.baseline_metrics.ClassExampleCount`);
- binary: the same, and AUC, precision and recall of class 1 (TFMA's own metrics,
  binarized on class 1's column of ``scores``);
- regression: ``MeanSquaredError``, ``MeanAbsoluteError``, ``ExampleCount``, and the mean
  predictor's MSE with the model's R^2 against it
  (:class:`~tfx_accum.components.training.baseline_metrics.MeanPredictorLift`).

A model is blessed only if it beats the trivial baseline on the eval split (a lift above
:data:`~tfx_accum.components.training.baseline_metrics.MIN_LIFT`), and, with ``bless_threshold``,
also reaches that threshold on ``bless_metric``
(:class:`~tfx_accum.components.config.blessing.Blessing`
says which metrics fit which task). There is no Resolver node (self-hosted Kubeflow
Pipelines cannot run one): the gates are absolute, measured on this run's eval split.

:func:`read_evaluation` reads the Evaluator's output back (metrics and TFMA's validation
result) and :func:`summary_lines` says, for the run summary, what the model scored against
the baseline and why it was or was not blessed.
"""

from __future__ import annotations

import dataclasses
import math

import tensorflow_model_analysis as tfma

from tfx_accum.components.config import tasks
from tfx_accum.components.config.blessing import BLESS_METRICS, Blessing, check_threshold_range
from tfx_accum.components.training import baseline_metrics
from tfx_accum.components.training.export import LABELS_SIGNATURE, SERVING_SIGNATURE

POSITIVE_CLASS = 1  # binary: class 1 is the positive class (scores[:, 1])
CHANCE_AUC = 0.5

# TFMA's name of each --bless-metric, and the class that computes it.
METRIC_NAMES = {
    "accuracy": "sparse_categorical_accuracy",
    "auc": "auc",
    "precision": "precision",
    "recall": "recall",
    "mse": "mean_squared_error",
    "mae": "mean_absolute_error",
}
_CLASS_NAMES = {
    "accuracy": "SparseCategoricalAccuracy",
    "auc": "AUC",
    "precision": "Precision",
    "recall": "Recall",
    "mse": "MeanSquaredError",
    "mae": "MeanAbsoluteError",
}
# Where a class is not TFMA's own: accuracy is computed without TensorFlow (TFMA's wrapper
# of the Keras metric traces TF functions in every Evaluator).
_MODULES = {"accuracy": baseline_metrics.__name__}
EXAMPLE_COUNT = baseline_metrics.EXAMPLE_COUNT


def eval_config(
    task: str,
    label_key: str,
    num_classes: int | None,
    bless_metric: str | None = None,
    bless_threshold: float | None = None,
) -> tfma.EvalConfig:
    """TFMA's configuration for ``task``: its metrics and the gates that bless a model.

    ``num_classes``: the classes of a classification task where known (None: learned from
    the data; a binary task has 2). ``bless_metric``/``bless_threshold``: see
    :class:`~tfx_accum.components.config.blessing.Blessing` (``ValueError`` where they do not fit
    the task). The label is read through the model's ``transform_labels`` signature
    (class indices for classification, the number itself for regression).
    """
    blessing = Blessing.for_task(task, bless_metric, bless_threshold)
    if task == tasks.BINARY and num_classes not in (None, 2):
        raise ValueError(f"A binary task has 2 classes. Received: num_classes={num_classes}.")
    model_spec = tfma.ModelSpec(
        label_key=label_key,
        signature_name=SERVING_SIGNATURE,
        prediction_key=tasks.PREDICTION_KEYS[task],
        # The label as the model sees it: a class index from the model's own label
        # vocabulary or range check, or the regression target
        # (tfx_accum.components.training.export).
        preprocessing_function_names=[LABELS_SIGNATURE],
    )
    return tfma.EvalConfig(
        model_specs=[model_spec],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=_metrics_specs(blessing),
    )


def _metrics_specs(blessing: Blessing) -> list[tfma.MetricsSpec]:
    task = blessing.task
    if tasks.is_classification(task):
        names, lift = ["accuracy"], baseline_metrics.MajorityClassLift
        count = baseline_metrics.metric_config(baseline_metrics.ClassExampleCount)
    else:
        names, lift = ["mse", "mae"], baseline_metrics.MeanPredictorLift
        count = tfma.MetricConfig(class_name="ExampleCount")
    # The baseline gate, always: the lift over the trivial baseline must be positive.
    lift_config = baseline_metrics.metric_config(lift)
    lift_config.threshold.CopyFrom(_bound(lower=baseline_metrics.MIN_LIFT))
    specs = [
        tfma.MetricsSpec(
            metrics=[
                *(_metric(name, blessing) for name in names),
                count,
                lift_config,
            ]
        )
    ]
    if task == tasks.BINARY:
        # In a spec of their own: binarization would apply to accuracy too.
        specs.append(
            tfma.MetricsSpec(
                metrics=[_metric(name, blessing) for name in ("auc", "precision", "recall")],
                binarize=tfma.BinarizationOptions(class_ids={"values": [POSITIVE_CLASS]}),
            )
        )
    return specs


def _metric(name: str, blessing: Blessing) -> tfma.MetricConfig:
    """TFMA's metric for ``name``, with the blessing's threshold if it is the bless metric."""
    config = tfma.MetricConfig(class_name=_CLASS_NAMES[name], module=_MODULES.get(name, ""))
    if name != blessing.metric:
        return config
    threshold = blessing.threshold
    if threshold is None and name == "auc":
        # Chance: a model that ranks no better than a coin (or a constant) scores 0.5.
        config.threshold.CopyFrom(_bound(lower=CHANCE_AUC + baseline_metrics.MIN_LIFT))
    elif threshold is not None:
        higher = blessing.spec.higher_is_better
        config.threshold.CopyFrom(_bound(lower=threshold) if higher else _bound(upper=threshold))
    return config


def with_bless_threshold(
    config: tfma.EvalConfig, bless_metric: str, threshold: float
) -> tfma.EvalConfig:
    """``config`` (changed in place) with ``threshold`` as the bar on ``bless_metric`` (at
    least, or at most for errors): a Kubeflow run's ``bless_threshold`` parameter.
    ``ValueError`` where the value is outside the metric's range or the config lacks it."""
    spec = BLESS_METRICS[bless_metric]
    check_threshold_range(spec, threshold)
    found = False
    for metrics in config.metrics_specs:
        for metric in metrics.metrics:
            if metric.class_name == _CLASS_NAMES[bless_metric]:
                bound = (
                    _bound(lower=threshold) if spec.higher_is_better else _bound(upper=threshold)
                )
                metric.threshold.CopyFrom(bound)
                found = True
    if not found:
        raise ValueError(f"the eval config has no {bless_metric} metric to set a threshold on")
    return config


def _bound(lower: float | None = None, upper: float | None = None) -> tfma.MetricThreshold:
    bounds = {}
    if lower is not None:
        bounds["lower_bound"] = {"value": lower}
    if upper is not None:
        bounds["upper_bound"] = {"value": upper}
    return tfma.MetricThreshold(value_threshold=tfma.GenericValueThreshold(**bounds))


# --- Reading the Evaluator's output -------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Failure:
    """One gate the model failed: TFMA's metric name, its value, and the bounds it missed."""

    metric: str
    value: float
    lower: float | None = None
    upper: float | None = None


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """The Evaluator's metrics (TFMA's names; class 1's for binary AUC, precision and
    recall) and its validation: ``validation_ok`` (None: no validation written) and the
    gates that failed."""

    metrics: dict[str, float]
    validation_ok: bool | None = None
    failures: tuple[Failure, ...] = ()

    def get(self, name: str) -> float | None:
        return self.metrics.get(name)


def read_evaluation(uri: str) -> Evaluation | None:
    """The evaluation the Evaluator wrote under ``uri``, or None if it wrote none."""
    try:
        result = tfma.load_eval_result(uri)
    except Exception:  # noqa: BLE001 - no evaluation written
        return None
    metrics: dict[str, float] = {}
    for slice_key, per_output in result.slicing_metrics:
        if slice_key:  # the overall slice only
            continue
        for per_sub_key in per_output.values():
            for values in per_sub_key.values():
                for name, value in values.items():
                    number = _number(value)
                    if number is not None:
                        metrics[name] = number
    try:
        validation = tfma.load_validation_result(uri)
    except Exception:  # noqa: BLE001 - no validation written
        return Evaluation(metrics)
    failures = []
    for per_slice in validation.metric_validations_per_slice:
        for failure in per_slice.failures:
            bounds = failure.metric_threshold.value_threshold
            failures.append(
                Failure(
                    failure.metric_key.name,
                    failure.metric_value.double_value.value,
                    bounds.lower_bound.value if bounds.HasField("lower_bound") else None,
                    bounds.upper_bound.value if bounds.HasField("upper_bound") else None,
                )
            )
    return Evaluation(metrics, bool(validation.validation_ok), tuple(failures))


def _number(value) -> float | None:
    if isinstance(value, dict):
        value = value.get("doubleValue", value.get("value"))
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# --- The run summary's lines --------------------------------------------------------------


def _fmt(value: float | None) -> str:
    """Shares and small errors to 4 decimals, larger errors to 5 significant digits."""
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:.4f}" if abs(value) < 10 else f"{value:.5g}"


def evaluation_line(evaluation: Evaluation, task: str) -> str:
    """``evaluation accuracy: 0.9712 (majority class 0.1034); 360 eval examples``."""
    m = evaluation.metrics
    count = m.get(EXAMPLE_COUNT)
    examples = f"; {int(count):,} eval examples" if count is not None else ""
    if tasks.is_classification(task):
        line = (
            f"evaluation accuracy: {_fmt(m.get(METRIC_NAMES['accuracy']))} (majority class "
            f"{_fmt(m.get(baseline_metrics.MAJORITY_CLASS_SHARE))})"
        )
        if task == tasks.BINARY:
            line += (
                f"; class {POSITIVE_CLASS}: auc {_fmt(m.get('auc'))}, precision "
                f"{_fmt(m.get('precision'))}, recall {_fmt(m.get('recall'))}"
            )
        return line + examples
    return (
        f"evaluation mse: {_fmt(m.get(METRIC_NAMES['mse']))} (mean predictor "
        f"{_fmt(m.get(baseline_metrics.MEAN_PREDICTOR_MSE))}, R^2 "
        f"{_fmt(m.get(baseline_metrics.R_SQUARED))}); mae {_fmt(m.get(METRIC_NAMES['mae']))}"
        + examples
    )


def blessing_reason(evaluation: Evaluation | None, blessing: Blessing, blessed: bool) -> str:
    """Why the model was (``blessed``) or was not blessed, from the Evaluator's own gates.

    ``accuracy 0.7710 does not beat the majority class 0.7710 on the eval split``.
    """
    if evaluation is None:
        return "no evaluation was written"
    if not blessed:
        reasons = [_failure_reason(f, evaluation) for f in evaluation.failures]
        return "; ".join(reasons) or "the Evaluator's validation failed"
    parts = [_beats_baseline(evaluation, blessing.task)]
    value = evaluation.get(METRIC_NAMES[blessing.metric])
    if blessing.threshold is not None:
        word = "at least" if blessing.spec.higher_is_better else "at most"
        parts.append(
            f"{blessing.metric} {_fmt(value)} is {word} the threshold {blessing.threshold:g}"
        )
    elif blessing.metric == "auc":
        parts.append(f"auc {_fmt(value)} beats chance ({CHANCE_AUC:g})")
    return "; ".join(parts)


def _beats_baseline(evaluation: Evaluation, task: str) -> str:
    m = evaluation.metrics
    if tasks.is_classification(task):
        return (
            f"accuracy {_fmt(m.get(METRIC_NAMES['accuracy']))} beats the majority class "
            f"{_fmt(m.get(baseline_metrics.MAJORITY_CLASS_SHARE))} on the eval split"
        )
    return (
        f"mse {_fmt(m.get(METRIC_NAMES['mse']))} beats the mean predictor's "
        f"{_fmt(m.get(baseline_metrics.MEAN_PREDICTOR_MSE))} on the eval split"
    )


def _failure_reason(failure: Failure, evaluation: Evaluation) -> str:
    m = evaluation.metrics
    if failure.metric == baseline_metrics.ACCURACY_LIFT:
        return (
            f"accuracy {_fmt(m.get(METRIC_NAMES['accuracy']))} does not beat the majority "
            f"class {_fmt(m.get(baseline_metrics.MAJORITY_CLASS_SHARE))} on the eval split"
        )
    if failure.metric == baseline_metrics.R_SQUARED:
        if math.isnan(failure.value):
            return "every eval label is the same: no model can beat the mean predictor there"
        return (
            f"mse {_fmt(m.get(METRIC_NAMES['mse']))} does not beat the mean predictor's "
            f"{_fmt(m.get(baseline_metrics.MEAN_PREDICTOR_MSE))} on the eval split"
        )
    if failure.metric == "auc" and failure.lower == CHANCE_AUC + baseline_metrics.MIN_LIFT:
        return f"auc {_fmt(failure.value)} does not beat chance ({CHANCE_AUC:g})"
    name = next((k for k, v in METRIC_NAMES.items() if v == failure.metric), failure.metric)
    if math.isnan(failure.value):  # precision with no example predicted as class 1
        return f"{name} is undefined on the eval split, which fails its threshold"
    if failure.lower is not None and not failure.value >= failure.lower:
        return f"{name} {_fmt(failure.value)} is below the threshold {failure.lower:g}"
    if failure.upper is not None and not failure.value <= failure.upper:
        return f"{name} {_fmt(failure.value)} is above the threshold {failure.upper:g}"
    return f"{name} {_fmt(failure.value)} failed its threshold"
