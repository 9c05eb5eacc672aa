"""The config room's blessing: the metrics the Evaluator can bless on, per task, and the
threshold checks of ``--bless-metric`` and ``--bless-threshold``.

Importing this module is cheap (no TensorFlow).
"""

from __future__ import annotations

import dataclasses
import math

from tfx_accum.components.config import tasks

__all__ = ["BLESS_METRICS", "Blessing", "check_bless_options"]


@dataclasses.dataclass(frozen=True)
class BlessMetric:
    """A metric the Evaluator can bless on (``--bless-metric``).

    ``baseline``: what the model must beat on it when no ``--bless-threshold`` is given
    (None: the metric has no trivial baseline measurable in one pass, so a threshold is
    required). ``share``: a value in [0, 1] (else a non-negative error).
    """

    name: str
    tasks: tuple[str, ...]
    higher_is_better: bool
    share: bool
    baseline: str | None
    why_no_baseline: str = ""


_CLASSIFICATION = (tasks.MULTICLASS, tasks.BINARY)
BLESS_METRICS = {
    m.name: m
    for m in (
        BlessMetric("accuracy", _CLASSIFICATION, True, True, "the majority class"),
        BlessMetric("auc", (tasks.BINARY,), True, True, "chance (0.5)"),
        BlessMetric(
            "precision", (tasks.BINARY,), True, True, None, "one right class-1 guess scores 1.0"
        ),
        BlessMetric(
            "recall", (tasks.BINARY,), True, True, None, "always predicting class 1 scores 1.0"
        ),
        BlessMetric("mse", (tasks.REGRESSION,), False, False, "the mean predictor"),
        BlessMetric(
            "mae",
            (tasks.REGRESSION,),
            False,
            False,
            None,
            "the median predictor needs a second pass over the eval split",
        ),
    )
}
# The metric each task blesses on unless --bless-metric says otherwise.
DEFAULT_BLESS_METRICS = {
    tasks.MULTICLASS: "accuracy",
    tasks.BINARY: "accuracy",
    tasks.REGRESSION: "mse",
}


@dataclasses.dataclass(frozen=True)
class Blessing:
    """What the Evaluator blesses a model on: a metric of the task, and a threshold or not.

    Every model must beat the task's trivial baseline on the eval split (classification:
    accuracy above the majority class's share; regression: MSE below the mean
    predictor's), whatever else is asked. ``metric`` (default per task:
    :data:`DEFAULT_BLESS_METRICS`) is the one the summary reports; ``threshold``, if
    given, is a fixed bar on it as well (at least, for accuracy/auc/precision/recall; at
    most, for mse/mae). Without a threshold, ``auc`` must beat chance (0.5); precision,
    recall and mae have no trivial baseline and need one. Build it with :meth:`for_task`,
    which validates; the messages name the command-line options.
    """

    task: str
    metric: str
    threshold: float | None = None

    @property
    def spec(self) -> BlessMetric:
        return BLESS_METRICS[self.metric]

    @classmethod
    def for_task(
        cls, task: str, metric: str | None = None, threshold: float | None = None
    ) -> Blessing:
        """The blessing for ``task``; ``ValueError`` (one line) where the options do not fit."""
        check_bless_options(metric, threshold)
        if task not in tasks.TASKS:
            raise ValueError(f"`task` must be one of {', '.join(tasks.TASKS)}. Received: {task!r}.")
        metric = metric or DEFAULT_BLESS_METRICS[task]
        spec = BLESS_METRICS[metric]
        if task not in spec.tasks:
            fitting = [m for m, s in BLESS_METRICS.items() if task in s.tasks]
            raise ValueError(
                f"--bless-metric {metric} does not fit a {task} task; use one of "
                f"{', '.join(fitting)}."
            )
        if threshold is not None:
            check_threshold_range(spec, threshold)
        elif spec.baseline is None:
            raise ValueError(
                f"--bless-metric {metric} needs --bless-threshold: it has no trivial baseline "
                f"to beat ({spec.why_no_baseline})."
            )
        return cls(task, metric, None if threshold is None else float(threshold))


def check_bless_options(metric: str | None, threshold: float | None) -> None:
    """``--bless-metric``/``--bless-threshold`` as far as they can be checked without the
    task (a known metric; a finite threshold in the metric's range);
    :meth:`Blessing.for_task` checks the rest once the task is known."""
    if metric is not None and metric not in BLESS_METRICS:
        raise ValueError(
            f"--bless-metric must be one of {', '.join(BLESS_METRICS)}. Received: {metric!r}."
        )
    if threshold is None:
        return
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not math.isfinite(threshold)
        or threshold < 0
    ):
        raise ValueError(f"--bless-threshold must be a number >= 0. Received: {threshold!r}.")
    if metric is not None:
        check_threshold_range(BLESS_METRICS[metric], threshold)


def check_threshold_range(spec: BlessMetric, threshold: float) -> None:
    if spec.share and threshold > 1.0:
        raise ValueError(
            f"--bless-threshold {threshold:g} is outside [0, 1], the range of {spec.name}."
        )
