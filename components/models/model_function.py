"""The user's model function: found, told apart by its signature, and called.

The function is told apart by its signature (``inspect.signature``); three kinds:

1. **TFX's**: no arguments, or only arguments with defaults, returning a Keras model,
   compiled or not: the function a TFX module already has (TFX's taxi example's
   ``_build_keras_model(hidden_units=None)``, the MNIST example's ``build_keras_model()``).
2. **Keras Tuner's**: one argument, the trial's ``keras_tuner.HyperParameters`` (named
   ``hp``, ``hparams`` or ``hyperparameters``, or annotated so). The hyperparameters it
   declares are searched beside the accumulation steps, micro-batch and learning rate.
   Those it reads but declares elsewhere (TFX's penguin example declares them in
   ``_get_hyperparameters()``) come from ``custom_config['model_hyperparameters']``, the
   function that returns them.
3. **tfx-accum's**: it takes ``features`` (and, as it names them, ``num_classes``, ``hp``,
   ``feature_stats``, ``feature_names``, ``index_sizes``)::

    def my_model(features, num_classes, hp, index_sizes):
        # features: {input name: tf.io.FixedLenFeature(shape, dtype)}, the model's inputs:
        #   numeric columns [1] float32 (missing values filled with the mean),
        #   string and categorical columns [1] int64 (index, 0 = missing or unseen),
        #   image features [height, width, channels] float32 in [0, 1]
        # num_classes: from the data (string labels: the size of their vocabulary);
        #   None for a regression task (then return one output unit, linear)
        # hp: the trial's keras_tuner.HyperParameters; declare your own beside ours
        # index_sizes: {input name: indices} of the string and categorical inputs
        inputs = {name: keras.Input(f.shape, name=name, dtype=f.dtype)
                  for name, f in features.items()}
        ...

   Categorical inputs are the integer columns named in ``categorical_features`` and those
   whose schema declares a categorical domain (Transform's vocabularies and buckets, with
   their real index ranges: ``index_sizes``). A function that takes ``feature_names`` gets
   ``{input name: column name}``; one that takes ``feature_stats`` gets ``{"mean": {...},
   "variance": {...}, "vocabulary": {...}}`` of the training split per numeric (or
   string) input, for a ``keras.layers.Normalization``. Input names are the data's column
   names where those are valid Keras names, else a safe version (tfx_accum.components.data.columns).

Anything else (a required argument that is none of these) is refused in one line that
says which signatures are accepted.

The call runs with ``tf.keras`` as Keras 3 (tfx_accum.components.models.tf_keras_compat); what
the model must then be is tfx_accum.components.models.custom_model's.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from tfx_accum import console
from tfx_accum.components.config.setting_words import CUSTOM_CONFIG, SettingWords
from tfx_accum.components.data.features import CATEGORICAL, NUMERIC, STRING, DataDescription
from tfx_accum.components.models.tf_keras_compat import (
    is_keras_2,
    keras_2_message,
    keras_3_as_tf_keras,
)

# The kinds of model function (module docstring).
TFX_FUNCTION, TUNER_FUNCTION, CONTRACT_FUNCTION = "tfx", "keras_tuner", "tfx_accum"
HP_NAMES = ("hp", "hparams", "hyperparameters")
CONTRACT_NAMES = ("features", "num_classes", "hp", "feature_stats", "feature_names", "index_sizes")
ACCEPTED = (
    "a model function takes no arguments (or only arguments with defaults), or one "
    "keras_tuner.HyperParameters (named hp or hparams), or tfx-accum's (features, "
    "num_classes, hp, ...)"
)


class ModelFunctionError(ValueError):
    """The model function cannot be found, or what it returns does not suit the data."""


@dataclasses.dataclass(frozen=True)
class ModelFunction:
    """The user's model function, how to call it, and how messages name it."""

    reference: str
    function: Callable[..., Any]
    kind: str
    words: SettingWords = CUSTOM_CONFIG
    hyperparameters: Callable[[], Any] | None = None  # model_hyperparameters' function

    @property
    def where(self) -> str:
        return f"{self.words.name('model')} {self.reference!r}"

    @property
    def tfx_native(self) -> bool:
        """TFX's and Keras Tuner's functions: TFX's contract (inputs named after the
        features, fed as they are)."""
        return self.kind != CONTRACT_FUNCTION

    @classmethod
    def load(
        cls,
        reference: str,
        words: SettingWords = CUSTOM_CONFIG,
        model_hyperparameters: str | None = None,
    ) -> ModelFunction:
        function = load_function(reference, "model", words)
        declared = None
        if model_hyperparameters:
            declared = load_function(model_hyperparameters, "model_hyperparameters", words)
        where = f"{words.name('model')} {reference!r}"
        return cls(reference, function, function_kind(function, where), words, declared)


def load_function(
    reference: str, key: str = "model", words: SettingWords = CUSTOM_CONFIG
) -> Callable[..., Any]:
    """The function ``package.module:function`` names, or a :class:`ModelFunctionError`."""
    module_name, _, function_name = reference.partition(":")
    where = f"{words.name(key)} {reference!r}"
    # Found on the module search path only: no directory is added here (the command line
    # adds the current directory explicitly, and says so: tfx_accum.pipeline.checks.model_path).
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any import failure is the user's to see
        raise ModelFunctionError(
            f"{where}: cannot import {module_name!r} ({type(error).__name__}: "
            f"{error}). Put the module on PYTHONPATH (tfx-accum run also looks in the current "
            "directory)."
        ) from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ModelFunctionError(f"{where}: {module_name!r} has no function {function_name!r}.")
    return function


def _takes_hyperparameters(parameter: inspect.Parameter) -> bool:
    annotation = parameter.annotation
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return parameter.name in HP_NAMES or str(name).split(".")[-1] == "HyperParameters"


def function_kind(function: Callable[..., Any], where: str) -> str:
    """Which kind of model function (module docstring) ``function`` is, by its signature;
    a :class:`ModelFunctionError` naming the accepted signatures when it is none."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        raise ModelFunctionError(f"{where}: its signature cannot be read; {ACCEPTED}.") from None
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    parameters = [p for p in signature.parameters.values() if p.kind not in variadic]
    required = [p for p in parameters if p.default is inspect.Parameter.empty]
    names = {p.name for p in parameters}
    if "features" in names:
        others = [p.name for p in required if p.name not in CONTRACT_NAMES]
        if not others:
            return CONTRACT_FUNCTION
        raise ModelFunctionError(
            f"{where}: cannot tell what to pass as {', '.join(others)} in "
            f"{function.__name__}{signature}; {ACCEPTED}."
        )
    tuner = [p for p in parameters if _takes_hyperparameters(p)]
    if len(tuner) == 1 and all(p is tuner[0] for p in required):
        return TUNER_FUNCTION
    if not required and not tuner:
        return TFX_FUNCTION
    raise ModelFunctionError(
        f"{where}: cannot tell how to call {function.__name__}{signature}; {ACCEPTED}."
    )


def declare_model_hyperparameters(hp, model: ModelFunction) -> None:
    """Adds the hyperparameters ``custom_config['model_hyperparameters']`` declares to
    ``hp``; a name already declared (tfx-accum's ``learning_rate``) keeps its declaration."""
    if model.hyperparameters is None:
        return
    declared = model.hyperparameters()
    space = getattr(declared, "space", None)
    if space is None:
        raise ModelFunctionError(
            f"{model.words.name('model_hyperparameters')}: returned "
            f"{type(declared).__name__}, not a keras_tuner.HyperParameters."
        )
    hp.merge(declared, overwrite=False)


def called(model: ModelFunction, data: DataDescription, hp) -> tuple[Any, list[str]]:
    """What the function returns for ``data`` and ``hp``, and the inputs a ``tf.keras``
    Model built in it left out."""
    if model.kind == CONTRACT_FUNCTION:
        parameters = inspect.signature(model.function).parameters
        candidates = {
            "features": {
                f.input_name: tf.io.FixedLenFeature(f.input_shape, tf.as_dtype(f.input_dtype))
                for f in data.features
            },
            "num_classes": data.num_classes,
            "hp": hp,
            "feature_stats": {
                "mean": {f.input_name: f.mean for f in data.kind(NUMERIC)},
                "variance": {f.input_name: f.variance for f in data.kind(NUMERIC)},
                "vocabulary": {f.input_name: list(f.vocabulary) for f in data.kind(STRING)},
            },
            "feature_names": {f.input_name: f.name for f in data.features},
            "index_sizes": {
                f.input_name: f.index_size for f in (*data.kind(STRING), *data.kind(CATEGORICAL))
            },
        }
        args, kwargs = (), {k: v for k, v in candidates.items() if k in parameters}
    elif model.kind == TUNER_FUNCTION:
        declare_model_hyperparameters(hp, model)
        (parameter,) = [
            p
            for p in inspect.signature(model.function).parameters.values()
            if _takes_hyperparameters(p)
        ]
        if parameter.kind == inspect.Parameter.POSITIONAL_ONLY:
            args, kwargs = (hp,), {}
        else:
            args, kwargs = (), {parameter.name: hp}
    else:
        args, kwargs = (), {}
    try:
        with keras_3_as_tf_keras(model.function) as left_out:
            built = model.function(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - the user's code: say where it failed
        raise ModelFunctionError(_raised(model, error)) from error
    if is_keras_2(built):
        raise ModelFunctionError(keras_2_message(model.where))
    if not isinstance(built, keras.Model):
        raise ModelFunctionError(
            f"{model.where} returned {type(built).__name__}, not a keras.Model."
        )
    return built, list(left_out)


def _raised(model: ModelFunction, error: Exception) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    if "KerasTensor" in text:
        return keras_2_message(model.where)
    message = f"{model.where} raised {type(error).__name__}: {text}"
    if isinstance(error, KeyError) and "does not exist" in text:
        message += (
            f"; a hyperparameter the function reads must be declared: in the function "
            f"(hp.Int(...)), or by the function {model.words.name('model_hyperparameters')} "
            "names"
        )
    return message


def say_shadowed_hyperparameters(hp, component: str) -> None:
    """One line per hyperparameter the model function declares under one of the names
    tfx-accum searches itself: Keras Tuner keeps the first declaration of a name, which in a
    trial is tfx-accum's, so the function's own range is never searched."""
    from tfx_accum.components.config.hyperparameters import (
        HP_ACCUMULATION_STEPS,
        HP_LEARNING_RATE,
        HP_MICRO_BATCH_SIZE,
    )

    ours = {
        HP_LEARNING_RATE: "search_space's learning_rate_min/max",
        HP_ACCUMULATION_STEPS: "search_space's accumulation_steps_choices",
        HP_MICRO_BATCH_SIZE: "search_space's micro_batch_choices",
    }
    for parameter in hp.space:
        if parameter.name in ours:
            console.say(
                f"[{component}] the model function declares its own {parameter.name!r} "
                f"({type(parameter).__name__}); tfx-accum's search decides it "
                f"({ours[parameter.name]}): rename yours to search it too"
            )
