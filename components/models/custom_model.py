"""Your own Keras model in the pipeline: ``custom_config['model'] = 'package.module:function'``.

The function is one of three kinds (tfx_accum.components.models.model_function): TFX's
(no arguments), Keras Tuner's (``hp``), or tfx-accum's (``features``, ...). What its model
must be, and what is done with it:

**Inputs.** TFX's and Keras Tuner's functions follow TFX's contract: each input is named
after a feature of the
examples the module is given (with Transform, the transformed ones: ``fare_xf``), in any
structure (dict keyed by the names, list, one tensor; or a subclassed model that reads a
dict of them), and receives the feature as Transform (or ExampleGen) wrote it, in its own
shape, cast to the input's dtype. tfx-accum's gets the preprocessed inputs its contract
describes (``features``).
Either way the model gets exactly the inputs it declares: the features it leaves out are
named in one console line, not read, and not served; an input that is not a feature is an
error naming the features closest to it. Built with ``tf.keras``, an input that no layer
reads (Keras 2 allowed it; Keras 3 refuses the model) is left out
(tfx_accum.components.models.tf_keras_compat, which also makes ``tf.keras`` Keras 3 while the
function runs, whatever ``TF_USE_LEGACY_KERAS`` says).

**Output.** One output: the class probabilities (``num_classes`` units) or their logits,
or for two classes one unit (class 1's probability, a sigmoid, or its logit; TFX's taxi
example); for regression one unit, the label's value (TFX's and Keras Tuner's functions:
the label as it is; tfx-accum's: the standardised label). The export serves probabilities either way
(tfx_accum.components.training.export).

**Compile.** The model is wrapped with ``GradientAccumulationModel.from_model`` (weights
shared) and compiled with your loss, metrics and optimizer class (its configuration, at the
trial's learning rate); the task's metrics are added beside yours (the Tuner ranks by them:
tfx_accum.components.models.task_compile). Without a compile: the task's loss (of logits, if the
last layer has no activation) and Adam.

Under ``precision`` ``mixed_float16`` (or ``mixed_bfloat16``) the function is called with
that Keras dtype policy set; a model whose output is not float32 gets a float32 cast after
it, and the served outputs are float32 either way.

The module must be importable where the Tuner and Trainer run: on ``PYTHONPATH`` (``tfx-accum
run`` also adds the current directory when the module is there, and says so); on Kubeflow,
inside the image.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras

from tfx_accum import console
from tfx_accum.components.accumulation.model import GradientAccumulationModel
from tfx_accum.components.config.custom_config import ModuleConfig
from tfx_accum.components.config.setting_words import CUSTOM_CONFIG, SettingWords, by_closeness
from tfx_accum.components.config.settings import ModelSettings, is_model_function
from tfx_accum.components.config.tasks import BINARY
from tfx_accum.components.data.features import TENSOR, DataDescription
from tfx_accum.components.models.model_function import (
    ModelFunction,
    ModelFunctionError,
    called,
    say_shadowed_hyperparameters,
)
from tfx_accum.components.models.task_compile import loss_for, metrics_for
from tfx_accum.components.models.tf_keras_compat import is_read

_LINEAR = ("linear", None)


def call_model_function(
    reference: str,
    data: DataDescription,
    hp,
    words: SettingWords = CUSTOM_CONFIG,
    model_hyperparameters: str | None = None,
) -> keras.Model:
    """Calls the user's function and checks that its model suits the data.

    TFX's and Keras Tuner's functions (:attr:`ModelFunction.tfx_native`) give a model
    whose inputs are named after features of ``data``, as a functional model (a subclassed
    one is called once on every feature, keeping the ones it reads).
    """
    model = ModelFunction.load(reference, words, model_hyperparameters)
    return build_checked(model, data, hp)[0]


def build_checked(model: ModelFunction, data: DataDescription, hp) -> tuple[keras.Model, list[str]]:
    """The function's model, checked against ``data``, and the inputs left out of it."""
    built, left_out = called(model, data, hp)
    if model.tfx_native:
        built = _functional(model, built, data)
        _check_tfx_inputs(model, built, data)
    else:
        _check_contract_inputs(model, built, data)
    check_output(model, built, data)
    return built, left_out


def _functional(model: ModelFunction, built: keras.Model, data: DataDescription) -> keras.Model:
    """``built``, or for a model without defined inputs (subclassed) a functional model
    that calls it on a dict of every feature, without the ones it does not read, compiled
    as ``built`` was."""
    if _defined_inputs(built):
        return built
    every = {
        f.input_name: keras.Input(_declared_shape(f), name=f.input_name, dtype=f.raw_dtype)
        for f in data.features
    }
    try:
        outputs = built(every)
    except Exception as error:  # noqa: BLE001 - the user's model: say it cannot be read
        raise ModelFunctionError(
            f"{model.where}: the model has no defined inputs and cannot be called on a dict "
            f"of the features keyed by their names ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''}); build it from keras.Input "
            "layers named after the features, or read the features from a dict."
        ) from None
    read = {name: tensor for name, tensor in every.items() if is_read(tensor)}
    functional = keras.Model(read, outputs, name=built.name)
    if _compiled(built):
        functional.compile_from_config(built.get_compile_config())
    return functional


def _compiled(model: keras.Model) -> bool:
    return getattr(model, "optimizer", None) is not None and bool(getattr(model, "loss", None))


def _declared_shape(feature) -> tuple[int, ...]:
    if feature.kind == TENSOR:
        return feature.tensor_shape
    return feature.schema_shape or (1,)


def _defined_inputs(model: keras.Model) -> list:
    try:
        return list(model.inputs or [])
    except (AttributeError, ValueError):
        return []


def named_inputs(model: keras.Model) -> list[tuple[str, Any]]:
    """``(name, tensor)`` of each input: a dict's keys (what it is fed by), else the
    input tensors' names."""
    structure = input_structure(model)
    if isinstance(structure, dict):
        return list(structure.items())
    return [(t.name.split(":")[0], t) for t in keras.tree.flatten(structure)]


def input_structure(model: keras.Model):
    """The inputs as the model is called with them: a dict, a list, or one tensor."""
    try:
        return model.input
    except (AttributeError, ValueError):  # a Sequential model: its one input
        inputs = list(model.inputs)
        return inputs[0] if len(inputs) == 1 else inputs


def declared_inputs(model: keras.Model) -> list[str]:
    """The names of the model's inputs, in its order."""
    return [name for name, _ in named_inputs(model)]


def _check_tfx_inputs(model: ModelFunction, built: keras.Model, data: DataDescription) -> None:
    features = {f.input_name: f for f in data.features}
    for name, tensor in named_inputs(built):
        feature = features.get(name)
        if feature is None:
            shown = ", ".join(by_closeness(name, features)[:12])
            raise ModelFunctionError(
                f"{model.where}: input {name!r} is not a feature of the examples "
                f"(features, closest first: {shown}); name each keras.Input after a feature."
            )
        declared = tuple(tensor.shape[1:])
        wanted, dtype = str(tensor.dtype), feature.raw_dtype
        if (dtype == "string") != (wanted == "string"):
            raise ModelFunctionError(
                f"{model.where}: input {name!r} is {wanted} but the feature holds "
                f"{'text' if dtype == 'string' else 'numbers'} ({dtype})."
            )
        if dtype == "float32" and ("int" in wanted or wanted == "bool"):
            raise ModelFunctionError(
                f"{model.where}: input {name!r} is {wanted} but the feature holds fractional "
                "numbers (float32); declare it float32."
            )
        if None in declared:
            raise ModelFunctionError(
                f"{model.where}: input {name!r} has the shape {declared}; every dimension "
                "but the batch must be fixed."
            )
        size = 1
        for dim in declared:
            size *= dim
        if feature.kind == TENSOR:
            fits = declared == feature.tensor_shape
        elif feature.values_per_example is None:
            fits = size == 1  # any number of values: the first is taken
        else:
            fits = size == feature.values_per_example
        if not fits:
            count = feature.values_per_example
            raise ModelFunctionError(
                f"{model.where}: input {name!r} has the shape {declared} but the feature "
                f"holds {'any number of values' if count is None else count} per example "
                f"(schema shape {feature.schema_shape})."
            )


def _check_contract_inputs(model: ModelFunction, built: keras.Model, data: DataDescription) -> None:
    inputs = _defined_inputs(built)
    if not inputs:
        raise ModelFunctionError(
            f"{model.where}: the model has no defined inputs; build it from keras.Input "
            "layers (functional or Sequential with an Input)."
        )
    shapes = {f.input_name: f.input_shape for f in data.features}
    names = declared_inputs(built)
    unknown = sorted(set(names) - set(shapes))
    if unknown:
        shown = ", ".join(by_closeness(unknown[0], shapes)[:8]) + (
            ", ..." if len(shapes) > 8 else ""
        )
        raise ModelFunctionError(
            f"{model.where}: inputs {unknown} are not features of the data "
            f"(input names, closest first: {shown}); name each keras.Input after a feature."
        )
    if len(set(names)) != len(names):
        raise ModelFunctionError(f"{model.where}: two inputs have the same name ({names}).")
    wrong = [
        f"{n} {tuple(t.shape[1:])} (expected {shapes[n]})"
        for n, t in named_inputs(built)
        if tuple(t.shape[1:]) != shapes[n]
    ]
    if wrong:
        raise ModelFunctionError(
            f"{model.where}: inputs of the wrong shape: {'; '.join(wrong)}. A numeric or "
            "string column is fed as (None, 1); an image as (None, height, width, channels)."
        )


def check_output(model: ModelFunction, built: keras.Model, data: DataDescription) -> None:
    """One output of what the task needs (module docstring), else a one-line error."""
    shapes = [tuple(o.shape) for o in built.outputs]
    units = data.outputs
    fits = len(shapes) == 1 and len(shapes[0]) in (1, 2)  # (batch, units), or (batch,): one
    if fits and data.classification:
        fits = output_units(built) == units or (data.task == BINARY and output_units(built) == 1)
    elif fits:
        fits = output_units(built) == 1
    if fits:
        return
    if data.classification:
        wanted = f"{units} class probabilities (or logits; the label has {units} classes)"
        if data.task == BINARY:
            wanted += ", or 1 unit: class 1's probability (a sigmoid) or logit"
    else:
        wanted = "1 unit, the predicted value (the task is regression)"
    words = model.words
    raise ModelFunctionError(
        f"{model.where}: the model must have one output of {wanted}; it has {shapes} "
        f"({words.name('task')} and {words.name('num_classes')} say what the label is)."
    )


def output_units(model: keras.Model) -> int | None:
    """Units of the model's one output; a ``(batch,)`` output is one."""
    shape = model.outputs[0].shape
    return 1 if len(shape) == 1 else shape[-1]


def model_data(fn_args, config: ModuleConfig, component: str) -> DataDescription:
    """The data description the model is built for: ``datasets.describe_data``'s, narrowed to
    the inputs a model function's model declares (:func:`narrow_to_declared`)."""
    from tfx_accum.components.data.datasets import describe_data

    data = describe_data(fn_args, config, component)
    if is_model_function(config.model_settings.model):
        data = narrow_to_declared(config.model_settings, data, component)
    return data


def narrow_to_declared(
    settings: ModelSettings, data: DataDescription, component: str
) -> DataDescription:
    """``data`` with only the features the model function's model declares as inputs.

    The model is built once with the hyperparameters' defaults; the features it leaves out
    are named in one line, and are then neither read, nor preprocessed, nor served. For
    TFX's and Keras Tuner's functions each feature becomes the tensor its input declares
    (``TENSOR``), and the label is learnt as it is (not standardised).
    """
    import keras_tuner

    model = ModelFunction.load(settings.model, model_hyperparameters=settings.model_hyperparameters)
    hp = keras_tuner.HyperParameters()
    built, dropped = build_checked(model, data, hp)
    say_shadowed_hyperparameters(hp, component)
    if dropped:
        console.say(
            f"[{component}] the model's Model(...) lists inputs no layer reads: "
            f"{', '.join(map(repr, dropped))}; left out (Keras 3 refuses them), not read"
        )
    declared = declared_inputs(built)
    left_out = [f.name for f in data.features if f.input_name not in declared]
    if [name for name in left_out if name not in dropped]:
        shown = ", ".join(map(repr, left_out[:8])) + (", ..." if len(left_out) > 8 else "")
        console.say(
            f"[{component}] the model function declares {len(declared)} of "
            f"{len(data.features)} features; not used: {shown}"
        )
    narrowed = data.only(declared)
    if not model.tfx_native:
        return narrowed
    shapes = {name: tuple(t.shape[1:]) for name, t in named_inputs(built)}
    return dataclasses.replace(
        narrowed,
        features=tuple(
            dataclasses.replace(f, kind=TENSOR, tensor_shape=shapes[f.input_name])
            for f in narrowed.features
        ),
        label_mean=0.0,
        label_variance=1.0,
    )


def by_name(model: keras.Model, data: DataDescription | None = None) -> keras.Model:
    """A functional model whose inputs are ``model``'s, as a dict keyed by their names (in
    the dtype ``data`` delivers, cast to the model's), calling ``model`` with them in the
    structure it was built with (dict, list, one)."""
    dtypes = {f.input_name: f.input_dtype for f in data.features} if data else {}
    inputs = {
        name: keras.Input(t.shape[1:], name=name, dtype=dtypes.get(name, t.dtype))
        for name, t in named_inputs(model)
    }

    def fed(name: str, tensor):
        value = inputs[name]
        return value if value.dtype == tensor.dtype else keras.ops.cast(value, tensor.dtype)

    structure = input_structure(model)
    if isinstance(structure, dict):
        structure = {name: fed(name, tensor) for name, tensor in structure.items()}
    else:
        structure = keras.tree.map_structure(
            lambda tensor: fed(tensor.name.split(":")[0], tensor), structure
        )
    output = keras.tree.flatten(model(structure))[0]  # one output (check_output), in any form
    if len(output.shape) == 1:  # (batch,): one unit, as the losses and the export read it
        output = keras.layers.Reshape((1,), name="one_unit")(output)
    if output.dtype != "float32":
        # Built under mixed precision (tfx_accum.components.models.models): float32 outputs,
        # as Keras recommends (a float32 loss, and the served scores are float32).
        output = keras.layers.Activation("linear", dtype="float32", name="float32_output")(output)
    return keras.Model(inputs, output, name=f"{model.name}_by_name")


def outputs_logits(model: keras.Model) -> bool:
    """Whether the model's output is logits: its compiled loss says ``from_logits=True``
    (a model function's own loss, as in TFX's penguin example)."""
    loss = getattr(model, "loss", None)
    losses = loss.values() if isinstance(loss, dict) else loss if isinstance(loss, list) else [loss]
    return any(
        isinstance(item, keras.losses.Loss) and item.get_config().get("from_logits", False)
        for item in losses
    )


def output_logits(model: keras.Model) -> bool:
    """Whether the model's output is logits: its compiled loss says ``from_logits=True``;
    not compiled, its last layer (before reshapes) is one with a linear ``activation``
    (``Dense(n)``)."""
    if _compiled(model):
        return outputs_logits(model)
    operation = getattr(getattr(model.outputs[0], "_keras_history", None), "operation", None)
    while isinstance(operation, keras.layers.Reshape | keras.layers.Flatten):
        operation = operation.input._keras_history.operation
    if not hasattr(operation, "activation"):  # a Softmax layer, or one we cannot tell
        return False
    activation = operation.activation
    return getattr(activation, "__name__", activation) in _LINEAR


def _user_metrics(model: keras.Model) -> list:
    """The metrics ``model`` was compiled with (fresh objects, from its compile config)."""
    metrics = (model.get_compile_config() or {}).get("metrics") or []
    if isinstance(metrics, dict) and len(metrics) == 1:  # keyed by the one output's name
        metrics = next(iter(metrics.values()))
    if not isinstance(metrics, list | tuple):
        metrics = [metrics]
    return [
        keras.saving.deserialize_keras_object(m) if isinstance(m, dict) else m
        for m in metrics
        if m is not None
    ]


def _metric_name(metric) -> str:
    return metric if isinstance(metric, str) else getattr(metric, "name", "")


def as_accumulation_model(
    model: keras.Model, accumulation_steps: int, learning_rate: float, data: DataDescription
) -> GradientAccumulationModel:
    """The user's model wrapped for exact accumulation (weights shared) and compiled with
    its loss, metrics and optimizer class (module docstring)."""
    units, logits = output_units(model), output_logits(model)
    if _compiled(model):
        config = model.optimizer.get_config()
        config["learning_rate"] = learning_rate
        optimizer = type(model.optimizer).from_config(config)
        loss, metrics = model.loss, _user_metrics(model)
        if isinstance(loss, dict) and len(loss) == 1:  # keyed by the one output's name
            loss = next(iter(loss.values()))
    else:
        optimizer = keras.optimizers.Adam(learning_rate)
        loss, metrics = loss_for(data.task, units, logits), []
    names = {_metric_name(m) for m in metrics}
    metrics += [m for m in metrics_for(data.task, units, logits) if _metric_name(m) not in names]
    if isinstance(model, GradientAccumulationModel):
        wrapped = model
        wrapped.gradient_accumulation_steps = accumulation_steps
    else:
        wrapped = GradientAccumulationModel.from_model(by_name(model, data), accumulation_steps)
    wrapped.compile(optimizer=optimizer, loss=loss, metrics=metrics)
    return wrapped
