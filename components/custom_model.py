"""Your own Keras model in the pipeline: ``--model package.module:function``.

The function receives what the pipeline knows about the data and the trial, and returns a
Keras model (functional or Sequential, compiled or not)::

    def my_model(features, num_classes, hp):
        # features: {name: tf.io.FixedLenFeature(shape, dtype)}, the model's inputs:
        #   numeric columns [1] float32 (missing values filled with the mean),
        #   string columns [1] int64 (vocabulary index, 0 = missing or unseen),
        #   image features [height, width, channels] float32 in [0, 1]
        # num_classes: from the data (string labels: the size of their vocabulary)
        # hp: the trial's keras_tuner.HyperParameters; declare your own beside ours
        inputs = {name: keras.Input((1,), name=name) for name in features}
        x = keras.layers.Concatenate()(list(inputs.values()))
        x = keras.layers.Dense(hp.Choice("units", [64, 128]), activation="relu")(x)
        return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))

A function that also takes ``feature_stats`` gets ``{"mean": {...}, "variance": {...},
"vocabulary": {...}}`` of the training split per numeric (or string) feature, for a
``keras.layers.Normalization`` (or an ``Embedding`` of ``len(vocabulary) + 1`` rows).

The pipeline checks the model (inputs named after the data's features, shaped as above;
one output of ``num_classes`` class probabilities), wraps it with
:meth:`GradientAccumulationModel.from_model` unless it already is one, and compiles it: your
loss and optimizer class are kept (the optimizer at the trial's learning rate); without a
compile, sparse categorical cross-entropy and Adam. Accuracy is always a metric: the Tuner
ranks by ``val_accuracy`` and the Evaluator blesses on it.

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

from tfx_accum.components.accumulation import GradientAccumulationModel
from tfx_accum.components.features import NUMERIC, STRING, DataDescription


class ModelFunctionError(ValueError):
    """The model function cannot be found, or what it returns does not suit the data."""


def load_model_function(reference: str) -> Callable[..., Any]:
    """The function ``package.module:function`` names, or a :class:`ModelFunctionError`."""
    module_name, _, function_name = reference.partition(":")
    # Found on the module search path only: no directory is added here (the command line
    # adds the current directory explicitly, and says so: pipeline/model_path.py).
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
        f.name: tf.io.FixedLenFeature(f.input_shape, tf.as_dtype(f.input_dtype))
        for f in data.features
    }
    kwargs: dict[str, Any] = {"features": features, "num_classes": data.num_classes, "hp": hp}
    if "feature_stats" in inspect.signature(function).parameters:
        kwargs["feature_stats"] = {
            "mean": {f.name: f.mean for f in data.kind(NUMERIC)},
            "variance": {f.name: f.variance for f in data.kind(NUMERIC)},
            "vocabulary": {f.name: list(f.vocabulary) for f in data.kind(STRING)},
        }
    try:
        model = function(**kwargs)
    except Exception as error:  # noqa: BLE001 - the user's code: say where it failed
        raise ModelFunctionError(
            f"--model {reference} raised {type(error).__name__}: {error}"
        ) from error
    check_model(reference, model, data)
    return model


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
    shapes = {f.name: f.input_shape for f in data.features}
    names = [tensor.name.split(":")[0] for tensor in inputs]
    unknown = sorted(set(names) - set(shapes))
    if unknown:
        keys = data.keys
        shown = ", ".join(keys[:8]) + (", ..." if len(keys) > 8 else "")
        raise ModelFunctionError(
            f"--model {reference}: inputs {unknown} are not columns of the data "
            f"(features: {shown}); name each keras.Input after a feature."
        )
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
    if len(outputs) != 1 or outputs[0].shape[-1] != data.num_classes:
        found = [tuple(o.shape) for o in outputs]
        raise ModelFunctionError(
            f"--model {reference}: the model must have one output of {data.num_classes} class "
            f"probabilities (the data has {data.num_classes} classes); it has {found}."
        )


def as_accumulation_model(
    model: keras.Model, accumulation_steps: int, learning_rate: float
) -> GradientAccumulationModel:
    """The user's model wrapped for exact accumulation (weights shared) and compiled."""
    compiled = getattr(model, "optimizer", None) is not None and getattr(model, "loss", None)
    loss = model.loss if compiled else "sparse_categorical_crossentropy"
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
        wrapped = GradientAccumulationModel.from_model(model, accumulation_steps)
    wrapped.compile(optimizer=optimizer, loss=loss, metrics=["accuracy"])
    return wrapped
