"""Names, defaults and validation of every setting, in one place.

The command line, the pipeline's ``custom_config``, the Tuner and Trainer modules and the
model read their defaults and checks from here (the search space's own defaults are the
fields of :class:`~tfx_accum.components.search.search_space.SearchSpace`). Words mean one thing:
``accumulation_steps`` is ``k``, the micro-batches per optimizer update; ``train_steps`` is
the number of optimizer updates the Trainer makes.

Importing this module is cheap (no TensorFlow), so the command line can use it.

Example:

```python
hp = Hyperparameters.from_values({"accumulation_steps": 4, "micro_batch_size": 32,
                                  "learning_rate": 1e-3})
hp.effective_batch  # 128
ModelSettings(model="mlp", num_classes=3).to_custom_config()
```

``custom_config`` as a whole (these settings and the search space, checked key by key) is
:class:`~tfx_accum.components.module_config.ModuleConfig`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from tfx_accum.components.data import tasks
from tfx_accum.components.setting_words import CUSTOM_CONFIG, SettingWords

__all__ = [
    "BLESS_METRICS",
    "Blessing",
    "DEFAULT_MODEL",
    "EVAL_BATCH",
    "HP_ACCUMULATION_STEPS",
    "HP_LEARNING_RATE",
    "HP_MICRO_BATCH_SIZE",
    "Hyperparameters",
    "LABEL_KEY",
    "MODEL_NAMES",
    "ModelSettings",
    "PRECISIONS",
    "TRAIN_STEPS",
    "TunerDecision",
    "validate_positive_int",
]

# The three hyperparameters the Tuner searches jointly and the Trainer uses.
HP_ACCUMULATION_STEPS = "accumulation_steps"
HP_MICRO_BATCH_SIZE = "micro_batch_size"
HP_LEARNING_RATE = "learning_rate"

MODEL_NAMES = ("cnn", "mlp", "densenet121")
# Or your own model: "package.module:function" (see tfx_accum.components.training.custom_model).
MODEL_FUNCTION = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")
IMAGE_MODELS = ("cnn", "densenet121")  # read the features as a square pixel grid
DEFAULT_MODEL = "mlp"  # tabular; the embedded digits (an 8x8 image) get "cnn"
LABEL_KEY = "label"
# Keras mixed-precision policies the Tuner's and Trainer's models can compute in
# (``--precision``; tfx_accum.components.training.models applies them). float16 wants a GPU (Keras
# wraps the optimizer for loss scaling), bfloat16 a TPU or a recent GPU; the variables and the
# output layer stay float32 either way.
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
DEFAULT_PRECISION = "float32"  # tfx-accum run; compile: the node pool's (node_pools.yaml)
TRAIN_STEPS = 300  # Trainer optimizer updates, each one whole effective batch
EVAL_BATCH = 256  # batch size of validation passes (no gradients: not tuned)
# custom_config["train_budget"]: the Trainer trains for the best trial's examples (the
# default when tuning); otherwise for train_steps updates with early stopping.
BEST_TRIAL_BUDGET = "best_trial"

# What a trial records beside its score (Keras Tuner metrics, and columns of trials.csv).
TRIAL_EXAMPLES = "examples"  # training examples the trial's score is for
TRIAL_SCORED_ON = "scored_examples"  # held-out examples the trial's score is measured on
TRIAL_SPEED = "examples_per_second"  # steady training throughput (tuner.EpochTimes)
TRIAL_PEAK_MEMORY = "peak_memory_mb"  # GPU allocator peak, or the process's peak RSS on CPU
TRIAL_REUSED_FROM = "reused_from"  # the trial whose score an exact duplicate reuses
# Added to the best hyperparameters when the Tuner picks a faster split of the best
# trial's effective batch (tfx_accum.components.search.search_policy: choose_trainer_split).
RESPLIT_FROM_TRIAL = "resplit_from_trial"
RESPLIT_FROM_SPLIT = "resplit_from_split"
RESPLIT_SPEEDUP = "resplit_speedup"
# Values a trial or the Tuner's decision records beside the hyperparameters: never part of
# what decides the trained model (tfx_accum.components.search.search_policy: duplicate_key).
TRIAL_RECORDED = (
    TRIAL_EXAMPLES,
    TRIAL_SCORED_ON,
    TRIAL_SPEED,
    TRIAL_PEAK_MEMORY,
    TRIAL_REUSED_FROM,
    RESPLIT_FROM_TRIAL,
    RESPLIT_FROM_SPLIT,
    RESPLIT_SPEEDUP,
)


def validate_positive_int(name: str, value: Any, hint: str | None = None) -> int:
    """Returns ``value`` as an int >= 1, or raises naming ``name`` and the value.

    numpy integers are accepted; floats, strings, bools and None are not (``TypeError``);
    an int below 1 raises ``ValueError``.
    """
    suffix = f" ({hint})" if hint else ""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(
            f"`{name}` must be an int >= 1{suffix}. "
            f"Received: {name}={value!r} of type {type(value).__name__}."
        )
    value = int(value)
    if value < 1:
        raise ValueError(f"`{name}` must be an int >= 1{suffix}. Received: {name}={value}.")
    return value


def validate_positive_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"`{name}` must be a positive number. Received: {name}={value!r}.")
    if value <= 0:
        raise ValueError(f"`{name}` must be a positive number. Received: {name}={value!r}.")
    return float(value)


def check_precision(precision: Any) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`, else a one-line ``ValueError``."""
    if precision not in PRECISIONS:
        raise ValueError(
            f"`precision` must be one of {', '.join(PRECISIONS)}. Received: {precision!r}."
        )
    return precision


def is_model_function(model: Any) -> bool:
    """True for a ``package.module:function`` reference to the user's own model function."""
    return isinstance(model, str) and bool(MODEL_FUNCTION.match(model))


def image_side(num_features: int, model_name: str, words: SettingWords = CUSTOM_CONFIG) -> int:
    """The side of the square image an image model reads the features as, or an error
    (``words``: how it names the ``model`` setting)."""
    side = math.isqrt(num_features)
    if side * side != num_features or side < 3:
        why = "not a square number" if side * side != num_features else "too small an image"
        raise ValueError(
            f"Model {model_name!r} reads the features as a square image, but there are "
            f"{num_features} feature columns ({why}). Use {words.setting('model', 'mlp')} for "
            "tabular data."
        )
    return side


@dataclasses.dataclass(frozen=True)
class Hyperparameters:
    """One trial's (or the Trainer's) accumulation steps, micro-batch and learning rate.

    The defaults are what the Trainer uses with tuning switched off.
    """

    accumulation_steps: int = 4
    micro_batch_size: int = 16
    learning_rate: float = 3e-3

    def __post_init__(self) -> None:
        for name in (HP_ACCUMULATION_STEPS, HP_MICRO_BATCH_SIZE):
            object.__setattr__(self, name, validate_positive_int(name, getattr(self, name)))
        object.__setattr__(
            self, HP_LEARNING_RATE, validate_positive_float(HP_LEARNING_RATE, self.learning_rate)
        )

    @property
    def effective_batch(self) -> int:
        return self.accumulation_steps * self.micro_batch_size

    def to_values(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> Hyperparameters:
        """From a Keras Tuner ``values`` dict (other entries, like Hyperband's, ignored)."""
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in values]
        if missing:
            raise ValueError(
                f"Hyperparameters {missing} are missing (got {sorted(values)}); the Tuner's "
                "best_hyperparameters must come from this project's tuner_fn."
            )
        return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls)})

    def describe(self) -> str:
        return (
            f"accumulation_steps={self.accumulation_steps} "
            f"micro_batch={self.micro_batch_size} lr={self.learning_rate:.3g} "
            f"(effective batch {self.effective_batch})"
        )


@dataclasses.dataclass(frozen=True)
class ModelSettings:
    """What the Tuner and Trainer modules need to build the model, from ``custom_config``.

    ``task``: ``classification``, ``regression`` (``--task``), or what the command line's
    data check decided (``multiclass``, ``binary``, ``regression``); None: inferred from the
    statistics (tfx_accum.components.data.tasks). ``features``/``exclude_features``: the columns the
    model gets (tfx_accum.components.data.columns); ``categorical_features``: integer columns that
    are categories, not quantities. ``precision``: the Keras dtype policy the model is built
    under (:data:`PRECISIONS`). ``model_hyperparameters``: ``package.module:function``
    returning the ``keras_tuner.HyperParameters`` a model function reads but does not
    declare (TFX's penguin example's ``_get_hyperparameters``); searched with the rest.
    ``model_code``: a model function's files and their SHA-256
    (tfx_accum.components.training.model_code), so that TFX's cache key holds the code; ``{}``
    for a built-in model, and then left out of ``custom_config``.
    """

    model: str = DEFAULT_MODEL
    # None: inferred from the labels (tfx_accum.components.data.tasks)
    num_classes: int | None = None
    label_key: str = LABEL_KEY
    task: str | None = None
    features: tuple[str, ...] | None = None
    exclude_features: tuple[str, ...] = ()
    categorical_features: tuple[str, ...] = ()
    precision: str = DEFAULT_PRECISION
    model_hyperparameters: str | None = None
    model_code: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        from tfx_accum.components.data.tasks import TASK_CHOICES, TASKS

        if self.model not in MODEL_NAMES and not is_model_function(self.model):
            raise ValueError(
                f"`model` must be one of {', '.join(MODEL_NAMES)} or a model function as "
                f"package.module:function. Received: model={self.model!r}."
            )
        if self.num_classes is None:
            pass
        elif validate_positive_int("num_classes", self.num_classes) < 2:
            raise ValueError(
                f"`num_classes` must be >= 2. Received: num_classes={self.num_classes}."
            )
        if not isinstance(self.label_key, str) or not self.label_key:
            raise ValueError(f"`label_key` must be a column name. Received: {self.label_key!r}.")
        if self.task is not None and self.task not in (*TASK_CHOICES, *TASKS):
            raise ValueError(
                f"`task` must be one of {', '.join(TASK_CHOICES)}. Received: task={self.task!r}."
            )
        for name in ("features", "exclude_features", "categorical_features"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"`{name}` must be a list of column names. Received: {value!r}.")
            object.__setattr__(self, name, tuple(value))
        if self.features is not None and not self.features:
            raise ValueError("`features` must name at least one column, or be left out.")
        check_precision(self.precision)
        if self.model_hyperparameters is not None and not is_model_function(
            self.model_hyperparameters
        ):
            raise ValueError(
                "`model_hyperparameters` must name a function as package.module:function. "
                f"Received: model_hyperparameters={self.model_hyperparameters!r}."
            )
        code = self.model_code
        pairs = tuple(code.items()) if isinstance(code, dict) else tuple(map(tuple, code))
        if not all(len(p) == 2 and all(isinstance(v, str) for v in p) for p in pairs):
            raise ValueError(f"`model_code` must map file paths to digests. Received: {code!r}.")
        object.__setattr__(self, "model_code", tuple(sorted(pairs)))

    def to_custom_config(self) -> dict[str, Any]:
        config = dataclasses.asdict(self)
        for name in ("features", "exclude_features", "categorical_features"):
            if config[name] is not None:
                config[name] = list(config[name])
        if config["model_hyperparameters"] is None:  # absent: the same keys as without it
            del config["model_hyperparameters"]
        if self.model_code:
            config["model_code"] = dict(self.model_code)
        else:  # a built-in model: the same keys as without the field
            del config["model_code"]
        return config


@dataclasses.dataclass(frozen=True)
class TunerDecision:
    """The Tuner's output, parsed once: what the Trainer trains with, and why.

    The Tuner writes it as Keras Tuner's ``best_hyperparameters`` config (TFX's
    ``best_hyperparameters.txt``): the best trial's values, with the fastest exact split of
    its effective batch (tfx_accum.components.search.search_policy) and where that split came from.
    The Trainer and the run summary both read it through :meth:`from_config`.
    """

    hyperparameters: Hyperparameters
    values: dict[str, Any]  # every value, a model function's own hyperparameters included
    resplit_from_trial: str | None = None
    resplit_from_split: str | None = None
    resplit_speedup: float | None = None
    examples: int | None = None  # training examples the best trial's model saw in all
    scored_examples: int | None = None  # the held-out examples its score is on (None: all)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> TunerDecision:
        """From ``best_hyperparameters.txt`` (a ``HyperParameters`` config, or its values)."""
        values = dict(config.get("values", config))
        return cls(
            Hyperparameters.from_values(values),
            values,
            values.get(RESPLIT_FROM_TRIAL),
            values.get(RESPLIT_FROM_SPLIT),
            values.get(RESPLIT_SPEEDUP),
            int(values[TRIAL_EXAMPLES]) if values.get(TRIAL_EXAMPLES) else None,
            int(values[TRIAL_SCORED_ON]) if values.get(TRIAL_SCORED_ON) else None,
        )

    def describe_source(self) -> str:
        if self.resplit_from_trial is None:
            return "Tuner"
        return (
            f"Tuner; trial {self.resplit_from_trial} ran this effective batch as "
            f"{self.resplit_from_split}, this split ran {self.resplit_speedup or 0:.2f}x faster "
            "in the search and trains the same model, as accumulation is exact"
        )


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
