"""The config room's model settings: the model, its label and columns, its precision, the
Trainer's steps; their names, defaults and validation, in one place.

The command line, the pipeline's ``custom_config``, the Tuner and Trainer modules and the
model read their defaults and checks from here. Beside it, by concern: the hyperparameters
(``config.hyperparameters``), the Evaluator's blessing (``config.blessing``), the
trial-record keys and the Tuner's decision (``config.trial_records``), the search space
(``config.search_space``) and ``custom_config`` as a whole, checked key by key
(``config.custom_config.ModuleConfig``, with the registry of its keys). Words mean one thing:
``train_steps`` is the number of optimizer updates the Trainer makes.

Importing this module is cheap (no TensorFlow), so the command line can use it.

Example:

```python
ModelSettings(model="mlp", num_classes=3).to_custom_config()
```
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from tfx_accum.components.accumulation.arguments import (
    validate_positive_int,
)
from tfx_accum.components.config.setting_words import CUSTOM_CONFIG, SettingWords

__all__ = [
    "DEFAULT_MODEL",
    "EVAL_BATCH",
    "LABEL_KEY",
    "MODEL_NAMES",
    "ModelSettings",
    "PRECISIONS",
    "TRAIN_STEPS",
]


MODEL_NAMES = ("cnn", "mlp", "densenet121")
# Or your own model: "package.module:function" (see tfx_accum.components.models.custom_model).
MODEL_FUNCTION = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")
IMAGE_MODELS = ("cnn", "densenet121")  # read the features as a square pixel grid
DEFAULT_MODEL = "mlp"  # tabular; the embedded digits (an 8x8 image) get "cnn"
LABEL_KEY = "label"
# Keras mixed-precision policies the Tuner's and Trainer's models can compute in
# (``--precision``; tfx_accum.components.models.models applies them). float16 wants a GPU
# (Keras wraps the optimizer for loss scaling), bfloat16 a TPU or a recent GPU; the variables
# and the output layer stay float32 either way.
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
DEFAULT_PRECISION = "float32"  # tfx-accum run; compile: the node pool's (node_pools.yaml)
TRAIN_STEPS = 300  # Trainer optimizer updates, each one whole effective batch
EVAL_BATCH = 256  # batch size of validation passes (no gradients: not tuned)


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
class ModelSettings:
    """What the Tuner and Trainer modules need to build the model, from ``custom_config``.

    ``task``: ``classification``, ``regression`` (``--task``), or what the command line's
    data check decided (``multiclass``, ``binary``, ``regression``); None: inferred from the
    statistics (tfx_accum.components.config.tasks). ``features``/``exclude_features``: the
    columns the model gets (tfx_accum.components.data.columns); ``categorical_features``:
    integer columns that are categories, not quantities. ``precision``: the Keras dtype
    policy the model is built under (:data:`PRECISIONS`). ``model_hyperparameters``:
    ``package.module:function`` returning the ``keras_tuner.HyperParameters`` a model
    function reads but does not declare (TFX's penguin example's ``_get_hyperparameters``);
    searched with the rest.
    ``model_code``: a model function's files and their SHA-256
    (tfx_accum.components.config.model_code), so that TFX's cache key holds the code; ``{}``
    for a built-in model, and then left out of ``custom_config``.
    """

    model: str = DEFAULT_MODEL
    # None: inferred from the labels (tfx_accum.components.config.tasks)
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
        from tfx_accum.components.config.tasks import TASK_CHOICES, TASKS

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
