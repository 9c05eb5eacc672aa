"""Your own Keras model in the pipeline: ``--model package.module:function``.

The function receives what the pipeline knows about the data and the trial, and returns a
Keras model (functional or Sequential, compiled or not)::

    def my_model(features, num_classes, hp):
        # features: {input name: tf.io.FixedLenFeature(shape, dtype)}, the model's inputs:
        #   numeric columns [1] float32 (missing values filled with the mean),
        #   string and categorical columns [1] int64 (index, 0 = missing or unseen),
        #   image features [height, width, channels] float32 in [0, 1]
        # num_classes: from the data (string labels: the size of their vocabulary);
        #   None for a regression task (then return one output unit, linear)
        # hp: the trial's keras_tuner.HyperParameters; declare your own beside ours
        inputs = {name: keras.Input((1,), name=name) for name in features}
        x = keras.layers.Concatenate()(list(inputs.values()))
        x = keras.layers.Dense(hp.Choice("units", [64, 128]), activation="relu")(x)
        return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))

The input names are the data's column names where those are valid Keras names, else a
safe version (``sepal length (cm)`` -> ``sepal_length_cm``; components/data/columns.py); a
function that takes ``feature_names`` gets ``{input name: column name}``. A function that
also takes ``feature_stats`` gets ``{"mean": {...}, "variance": {...}, "vocabulary":
{...}}`` of the training split per numeric (or string) input, for a
``keras.layers.Normalization`` (or an ``Embedding`` of ``len(vocabulary) + 1`` rows).

**The model gets exactly the inputs it declares, by name.** It may leave features out
(they are named in one console line, not read, and not part of the served model); an input
that is not a feature of the data is an error. The pipeline checks the model (inputs
shaped as above; one output: ``num_classes`` class probabilities, or one value for
regression), wraps it in a GradientAccumulationModel whose inputs are the declared ones,
keyed by name (so a model built on a list of inputs never receives columns by position),
and compiles it: your loss and optimizer class are kept (the optimizer at the trial's
learning rate); without a compile, the task's loss and Adam. The task's metrics are always
added (components/training/task_compile.py): the Tuner ranks by them.

Under ``--precision mixed_float16`` (or ``mixed_bfloat16``) the function is called with
that Keras dtype policy set, so the layers it creates compute in half precision; a model
whose output is not float32 gets a float32 cast after it (Keras's advice: a float32
softmax and loss), and the served outputs are float32 either way.

The module must be importable where the Tuner and Trainer run: on ``PYTHONPATH`` (``tfx-accum
run`` also adds the current directory when the module is there, and says so); on Kubeflow,
inside the image.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from tfx_accum import console
from tfx_accum.components.accumulation.model import GradientAccumulationModel
from tfx_accum.components.data.features import NUMERIC, STRING, DataDescription
from tfx_accum.components.training.task_compile import compile_arguments


class ModelFunctionError(ValueError):
    """The model function cannot be found, or what it returns does not suit the data."""


def load_model_function(reference: str) -> Callable[..., Any]:
    """The function ``package.module:function`` names, or a :class:`ModelFunctionError`."""
    module_name, _, function_name = reference.partition(":")
    # Found on the module search path only: no directory is added here (the command line
    # adds the current directory explicitly, and says so: pipeline/checks/model_path.py).
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any import failure is the user's to see
        raise ModelFunctionError(
            f"--model {reference}: cannot import {module_name!r} ({type(error).__name__}: "
            f"{error}). Put the module on PYTHONPATH (tfx-accum run also looks in the current "
            "directory)."
        ) from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ModelFunctionError(
            f"--model {reference}: {module_name!r} has no function {function_name!r}."
        )
    return function


def call_model_function(reference: str, data: DataDescription, hp) -> keras.Model:
    """Calls the user's function and checks that its model suits the data."""
    function = load_model_function(reference)
    features = {
        f.input_name: tf.io.FixedLenFeature(f.input_shape, tf.as_dtype(f.input_dtype))
        for f in data.features
    }
    kwargs: dict[str, Any] = {"features": features, "num_classes": data.num_classes, "hp": hp}
    parameters = inspect.signature(function).parameters
    if "feature_stats" in parameters:
        kwargs["feature_stats"] = {
            "mean": {f.input_name: f.mean for f in data.kind(NUMERIC)},
            "variance": {f.input_name: f.variance for f in data.kind(NUMERIC)},
            "vocabulary": {f.input_name: list(f.vocabulary) for f in data.kind(STRING)},
        }
    if "feature_names" in parameters:
        kwargs["feature_names"] = {f.input_name: f.name for f in data.features}
    try:
        model = function(**kwargs)
    except Exception as error:  # noqa: BLE001 - the user's code: say where it failed
        raise ModelFunctionError(
            f"--model {reference} raised {type(error).__name__}: {error}"
        ) from error
    check_model(reference, model, data)
    return model


def narrow_to_declared(reference: str, data: DataDescription, component: str) -> DataDescription:
    """``data`` with only the features the model function's model declares as inputs.

    The model is built once with the hyperparameters' defaults; the features it leaves out
    are named in one line, and are then neither read, nor preprocessed, nor served.
    """
    import keras_tuner

    hp = keras_tuner.HyperParameters()
    declared = declared_inputs(call_model_function(reference, data, hp))
    say_shadowed_hyperparameters(hp, component)
    left_out = [f.name for f in data.features if f.input_name not in declared]
    if left_out:
        shown = ", ".join(map(repr, left_out[:8])) + (", ..." if len(left_out) > 8 else "")
        console.say(
            f"[{component}] the model function declares {len(declared)} of "
            f"{len(data.features)} features; not used: {shown}"
        )
    return data.only(declared)


def declared_inputs(model: keras.Model) -> list[str]:
    """The names of the model's inputs, in its order."""
    return [tensor.name.split(":")[0] for tensor in model.inputs]


def check_model(reference: str, model: Any, data: DataDescription) -> None:
    if not isinstance(model, keras.Model):
        raise ModelFunctionError(
            f"--model {reference} returned {type(model).__name__}, not a keras.Model."
        )
    try:
        inputs = list(model.inputs)
    except (AttributeError, ValueError):
        inputs = []
    if not inputs:
        raise ModelFunctionError(
            f"--model {reference}: the model has no defined inputs; build it from keras.Input "
            "layers (functional or Sequential with an Input)."
        )
    shapes = {f.input_name: f.input_shape for f in data.features}
    names = declared_inputs(model)
    unknown = sorted(set(names) - set(shapes))
    if unknown:
        keys = list(shapes)
        shown = ", ".join(keys[:8]) + (", ..." if len(keys) > 8 else "")
        raise ModelFunctionError(
            f"--model {reference}: inputs {unknown} are not features of the data "
            f"(input names: {shown}); name each keras.Input after a feature."
        )
    if len(set(names)) != len(names):
        raise ModelFunctionError(f"--model {reference}: two inputs have the same name ({names}).")
    wrong = [
        f"{n} {tuple(t.shape[1:])} (expected {shapes[n]})"
        for n, t in zip(names, inputs)
        if tuple(t.shape[1:]) != shapes[n]
    ]
    if wrong:
        raise ModelFunctionError(
            f"--model {reference}: inputs of the wrong shape: {'; '.join(wrong)}. A numeric or "
            "string column is fed as (None, 1); an image as (None, height, width, channels)."
        )
    outputs = list(model.outputs)
    units = data.outputs
    if len(outputs) != 1 or outputs[0].shape[-1] != units:
        found = [tuple(o.shape) for o in outputs]
        wanted = (
            f"{units} class probabilities (the data has {units} classes)"
            if data.classification
            else "1 unit, the predicted value (the task is regression)"
        )
        raise ModelFunctionError(
            f"--model {reference}: the model must have one output of {wanted}; it has {found}."
        )


def by_name(model: keras.Model) -> keras.Model:
    """A functional model whose inputs are ``model``'s, as a dict keyed by their names,
    calling ``model`` with them in the structure it was built with (dict, list, one)."""
    inputs = {
        name: keras.Input(t.shape[1:], name=name, dtype=t.dtype)
        for name, t in zip(declared_inputs(model), model.inputs)
    }
    structure = keras.tree.map_structure(
        lambda tensor: inputs[tensor.name.split(":")[0]], model.input
    )
    output = model(structure)
    if output.dtype != "float32":
        # Built under mixed precision (components/training/models.py): float32 outputs, as Keras
        # recommends (a float32 loss, and the served scores are float32).
        output = keras.layers.Activation("linear", dtype="float32", name="float32_output")(output)
    return keras.Model(inputs, output, name=f"{model.name}_by_name")


def say_shadowed_hyperparameters(hp, component: str) -> None:
    """One line per hyperparameter the model function declares under one of the names
    tfx-accum searches itself: Keras Tuner keeps the first declaration of a name, which in a
    trial is tfx-accum's, so the function's own range is never searched."""
    from tfx_accum.components.settings import (
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


def as_accumulation_model(
    model: keras.Model, accumulation_steps: int, learning_rate: float, task: str
) -> GradientAccumulationModel:
    """The user's model wrapped for exact accumulation (weights shared) and compiled."""
    compiled = getattr(model, "optimizer", None) is not None and getattr(model, "loss", None)
    arguments = compile_arguments(task)
    loss = model.loss if compiled else arguments["loss"]
    if compiled:
        config = model.optimizer.get_config()
        config["learning_rate"] = learning_rate
        optimizer = type(model.optimizer).from_config(config)
    else:
        optimizer = keras.optimizers.Adam(learning_rate)
    if isinstance(model, GradientAccumulationModel):
        wrapped = model
        wrapped.gradient_accumulation_steps = accumulation_steps
    else:
        wrapped = GradientAccumulationModel.from_model(by_name(model), accumulation_steps)
    wrapped.compile(optimizer=optimizer, loss=loss, metrics=arguments["metrics"])
    return wrapped
