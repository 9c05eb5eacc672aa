"""Your own Keras model in the pipeline: ``--model package.module:function``.

The function receives what the pipeline knows about the data and the trial, and returns a
Keras model (functional or Sequential, compiled or not)::

    def my_model(features, num_classes, hp):
        # features: {column name: tf.io.FixedLenFeature([1], tf.float32)}, the model's inputs
        # num_classes: from the data
        # hp: the trial's keras_tuner.HyperParameters; declare your own beside ours
        inputs = {name: keras.Input((1,), name=name) for name in features}
        x = keras.layers.Concatenate()(list(inputs.values()))
        x = keras.layers.Dense(hp.Choice("units", [64, 128]), activation="relu")(x)
        return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))

A function that also takes ``feature_stats`` gets ``{"mean": {...}, "variance": {...}}`` of
the training split per feature, for a ``keras.layers.Normalization``.

The pipeline checks the model (inputs named after the data's columns, each of shape
``(None, 1)``; one output of ``num_classes`` class probabilities), wraps it with
:meth:`GradientAccumulationModel.from_model` unless it already is one, and compiles it: your
loss and optimizer class are kept (the optimizer at the trial's learning rate); without a
compile, sparse categorical cross-entropy and Adam. Accuracy is always a metric: the Tuner
ranks by ``val_accuracy`` and the Evaluator blesses on it.

The module must be importable where the Tuner and Trainer run: on the local runner from the
current directory or ``PYTHONPATH``; on Kubeflow, inside the image.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfx_accum.components.accumulation import GradientAccumulationModel


class ModelFunctionError(ValueError):
    """The model function cannot be found, or what it returns does not suit the data."""


def load_model_function(reference: str) -> Callable[..., Any]:
    """The function ``package.module:function`` names, or a :class:`ModelFunctionError`."""
    module_name, _, function_name = reference.partition(":")
    if os.getcwd() not in sys.path:  # as `python -m`: a module in the current directory
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any import failure is the user's to see
        raise ModelFunctionError(
            f"--model {reference}: cannot import {module_name!r} ({type(error).__name__}: "
            f"{error}). Put the module on PYTHONPATH or in the current directory."
        ) from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ModelFunctionError(
            f"--model {reference}: {module_name!r} has no function {function_name!r}."
        )
    return function


def call_model_function(
    reference: str,
    feature_keys: Sequence[str],
    num_classes: int,
    hp,
    mean: np.ndarray | None = None,
    variance: np.ndarray | None = None,
) -> keras.Model:
    """Calls the user's function and checks that its model suits the data."""
    function = load_model_function(reference)
    features = {key: tf.io.FixedLenFeature([1], tf.float32) for key in feature_keys}
    kwargs: dict[str, Any] = {"features": features, "num_classes": num_classes, "hp": hp}
    if "feature_stats" in inspect.signature(function).parameters:
        # Without statistics (the command line's check before any data is read): neutral ones.
        mean = np.zeros(len(feature_keys)) if mean is None else np.asarray(mean)
        variance = np.ones(len(feature_keys)) if variance is None else np.asarray(variance)
        kwargs["feature_stats"] = {
            "mean": {key: float(value) for key, value in zip(feature_keys, mean)},
            "variance": {key: float(value) for key, value in zip(feature_keys, variance)},
        }
    try:
        model = function(**kwargs)
    except Exception as error:  # noqa: BLE001 - the user's code: say where it failed
        raise ModelFunctionError(
            f"--model {reference} raised {type(error).__name__}: {error}"
        ) from error
    check_model(reference, model, feature_keys, num_classes)
    return model


def check_model(reference: str, model: Any, feature_keys: Sequence[str], num_classes: int) -> None:
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
    names = [tensor.name.split(":")[0] for tensor in inputs]
    unknown = sorted(set(names) - set(feature_keys))
    if unknown:
        shown = ", ".join(list(feature_keys)[:8]) + (", ..." if len(feature_keys) > 8 else "")
        raise ModelFunctionError(
            f"--model {reference}: inputs {unknown} are not columns of the data "
            f"(features: {shown}); name each keras.Input after a feature."
        )
    wrong = [n for n, t in zip(names, inputs) if tuple(t.shape[1:]) != (1,)]
    if wrong:
        raise ModelFunctionError(
            f"--model {reference}: inputs {wrong} must have shape (None, 1), one value per "
            "example, as each CSV column is fed."
        )
    outputs = list(model.outputs)
    if len(outputs) != 1 or outputs[0].shape[-1] != num_classes:
        shapes = [tuple(o.shape) for o in outputs]
        raise ModelFunctionError(
            f"--model {reference}: the model must have one output of {num_classes} class "
            f"probabilities (the data has {num_classes} classes); it has {shapes}."
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
