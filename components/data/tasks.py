"""What the model predicts: the task, inferred from the label by one rule, or given.

Three tasks: ``multiclass`` and ``binary`` classification, and single-target
``regression``. The rule (:func:`infer_task`), the same wherever the label is seen (the
command line's data check, or the Tuner and Trainer from StatisticsGen's statistics):

- a text label: classification (its distinct values are the classes);
- an integer label (or whole numbers written as floats, ``0.0``/``1.0``) with at most
  ``MAX_CLASSES_INFERRED`` distinct values (where they were counted, as the data check
  does), or else at most that many possible values ``0..max`` (StatisticsGen's
  statistics give the range, not the count): classification;
- otherwise (fractional numbers, negative numbers, or many distinct integers such as the
  diabetes progression 25-346): regression.

Two classes make ``binary``. The ``task`` setting says it instead (a label that looks like a
regression target is then an error unless ``num_classes`` confirms the classes). Each
task fixes the Tuner's objective, the serving output and the Evaluator's metrics
(:data:`OBJECTIVES`, :data:`PREDICTION_KEYS`). Importing this module is cheap (no
TensorFlow).

Example:

```python
infer_task(LabelFacts(dtype="int", minimum=25, maximum=346, distinct=214, integral=True))
# Inference(task='regression', num_classes=None, reason='...')
```
"""

from __future__ import annotations

import dataclasses

from tfx_accum.components.setting_words import CUSTOM_CONFIG, SettingWords

MULTICLASS, BINARY, REGRESSION = "multiclass", "binary", "regression"
CLASSIFICATION = "classification"  # task classification: multiclass or binary by count
TASKS = (MULTICLASS, BINARY, REGRESSION)
TASK_CHOICES = (CLASSIFICATION, MULTICLASS, BINARY, REGRESSION)  # what --task accepts
MAX_CLASSES_INFERRED = 20  # integer labels with more possible values are regression
# Too few to train on 4/5 of ExampleGen's training split, validate on 1/5 and evaluate on
# its eval split (a third): refused before anything runs.
MIN_EXAMPLES = 30
MIN_PER_CLASS = 6

# The Tuner's objective per task (Keras metric names of the validation pass).
OBJECTIVES = {
    MULTICLASS: ("val_accuracy", "max"),
    BINARY: ("val_auc", "max"),
    REGRESSION: ("val_loss", "min"),
}
# The serving signature's output per task: class probabilities, or the predicted value.
SCORES_KEY, PREDICTIONS_KEY = "scores", "predictions"
PREDICTION_KEYS = {MULTICLASS: SCORES_KEY, BINARY: SCORES_KEY, REGRESSION: PREDICTIONS_KEY}


def is_classification(task: str) -> bool:
    return task in (MULTICLASS, BINARY)


def evaluated_task(task: str | None, num_classes: int | None) -> str:
    """The task the Evaluator is configured for when the pipeline is built: ``task`` as
    decided (multiclass, binary, regression), or for a compile's ``classification`` (the
    data unseen) binary with 2 classes given, else multiclass."""
    if task in TASKS:
        return task
    if task == REGRESSION:
        return REGRESSION
    return BINARY if num_classes == 2 else MULTICLASS


@dataclasses.dataclass(frozen=True)
class LabelFacts:
    """What is known of the label's values (from the data check or the statistics).

    ``dtype``: ``"string"``, ``"int"`` or ``"float"``; ``distinct``: the number of distinct
    values where known (None: not counted); ``integral``: every value a whole number
    (None: not known, as for a FLOAT feature in StatisticsGen's statistics).
    """

    dtype: str
    minimum: float | None = None
    maximum: float | None = None
    distinct: int | None = None
    integral: bool | None = None
    vocabulary: tuple[str, ...] = ()  # text labels


@dataclasses.dataclass(frozen=True)
class Inference:
    task: str
    num_classes: int | None  # None for regression
    reason: str  # for the one printed line


def infer_task(
    label: LabelFacts,
    requested: str | None = None,
    num_classes: int | None = None,
    words: SettingWords = CUSTOM_CONFIG,
) -> Inference:
    """The task for ``label`` (``requested``: the ``task`` setting; ``num_classes``: the
    ``num_classes`` setting; ``words``: how the messages name them).

    Raises ``ValueError`` with the way out where the request cannot be met (a text label
    as regression, fractional labels as classes).
    """
    task, classes = words.name("task"), words.name("num_classes")
    as_regression = words.setting("task", REGRESSION)
    if requested not in (None, CLASSIFICATION, REGRESSION, *TASKS):
        raise ValueError(
            f"`task` must be one of {', '.join(TASK_CHOICES)}. Received: task={requested!r}."
        )
    if requested == REGRESSION or (requested is None and _looks_like_regression(label)):
        if label.dtype == "string":
            raise ValueError(
                f"A text label cannot be a regression target; leave {task} out (text labels "
                "are classes) or convert the label to numbers."
            )
        if num_classes is not None:
            raise ValueError(f"{classes} applies to classification, not to {as_regression}.")
        reason = as_regression if requested else _regression_reason(label)
        return Inference(REGRESSION, None, reason)
    if requested is not None and num_classes is None and _looks_like_regression(label):
        raise ValueError(
            f"The task is {requested}, but the label looks like a regression target "
            f"({_regression_reason(label)}); use {as_regression}, or confirm the classes "
            f"with {words.setting('num_classes', 'N', placeholder=True)}."
        )
    count = _class_count(label, num_classes, words)
    if requested == BINARY and count != 2:
        raise ValueError(f"{words.setting('task', BINARY)}, but the label has {count} classes.")
    if count < 2:
        raise ValueError(
            "The label has a single class; classification needs at least two (a model "
            "trained on one class predicts it always). Check the label column and the data."
        )
    task = BINARY if count == 2 else MULTICLASS
    if requested:
        reason = words.setting("task", requested)
    elif label.dtype == "string":
        reason = f"text label with {count} distinct values"
    else:
        reason = (
            f"whole-number label with {count} classes 0..{count - 1}"
            if num_classes is None
            else words.setting("num_classes", num_classes)
        )
    return Inference(task, count, reason)


def _looks_like_regression(label: LabelFacts) -> bool:
    if label.dtype == "string":
        return False
    if label.integral is False:
        return True
    if label.integral is None and label.dtype == "float":
        return True  # fractional values cannot be ruled out
    if label.minimum is not None and label.minimum < 0:
        return True
    if label.distinct is not None:
        return label.distinct > MAX_CLASSES_INFERRED
    return label.maximum is not None and label.maximum + 1 > MAX_CLASSES_INFERRED


def _regression_reason(label: LabelFacts) -> str:
    span = (
        f" from {label.minimum:g} to {label.maximum:g}"
        if label.minimum is not None and label.maximum is not None
        else ""
    )
    if label.integral is False or (label.integral is None and label.dtype == "float"):
        return f"fractional numbers{span}"
    if label.minimum is not None and label.minimum < 0:
        return f"negative numbers{span}"
    if label.distinct is not None:
        return (
            f"{label.distinct} distinct whole numbers{span}, more than "
            f"{MAX_CLASSES_INFERRED} classes"
        )
    return f"whole numbers{span}, more than {MAX_CLASSES_INFERRED} possible classes"


def _class_count(label: LabelFacts, num_classes: int | None, words: SettingWords) -> int:
    classes, as_regression = words.name("num_classes"), words.setting("task", REGRESSION)
    if label.dtype == "string":
        count = label.distinct if label.distinct is not None else len(label.vocabulary)
        if num_classes is not None and num_classes != count:
            raise ValueError(
                f"{words.setting('num_classes', num_classes)}, but the text label has {count} "
                f"distinct values; leave {classes} out."
            )
        return count
    if label.integral is False:
        raise ValueError(
            f"The label has fractional values, which cannot be classes; use {as_regression}, "
            "or write class indices 0..N-1."
        )
    if label.minimum is not None and label.minimum < 0:
        raise ValueError(
            f"Label {label.minimum:g} is not a class index (an integer >= 0); use "
            f"{as_regression}, or map the labels to 0..N-1."
        )
    inferred = int(label.maximum) + 1 if label.maximum is not None else 2
    if num_classes is not None:
        if inferred > num_classes:
            raise ValueError(
                f"Label {inferred - 1} is outside 0..{num_classes - 1} "
                f"({words.setting('num_classes', num_classes)}); raise {classes} or leave it out."
            )
        return num_classes
    return inferred
