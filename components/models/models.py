"""The model architectures the Trainer and Tuner can build, all as GA models.

Every model takes a dict of preprocessed features keyed by their input names
(``tfx_accum.components.data.features``: the numeric columns as one ``(batch, n)`` vector, or for a
model function one ``(batch, 1)`` number per numeric column; one index per
string or categorical column, one ``(batch, height, width, channels)`` image per image
feature), normalises numbers with statistics of the training split, and outputs what the
task needs (``tfx_accum.components.config.tasks``): class probabilities (``scores``), or one value
(``predictions``, the standardised regression target). The loss and metrics per task are
in ``tfx_accum.components.models.task_compile``.

- ``cnn``: a small convolutional network on the image feature, or on the numeric columns
  as a square image (the 8x8 digits CSV); no BatchNormalization, so accumulation is exact.
- ``mlp``: two dense layers, for tabular data (numeric and string columns).
- ``package.module:function``: your own model (tfx_accum.components.models.custom_model): a TFX
  module's own function, as written, or one of tfx-accum's contract.
- ``densenet121``: the StackOverflow question's setup: DenseNet121 (``weights=None``) on
  the image (at least 32x32, three channels). It has BatchNormalization, so accumulation
  is not exact (a warning says so).

**Precision** (``--precision``, ``settings.PRECISIONS``): every model is built under its
Keras dtype policy (:func:`precision_policy`), so its layers compute in float16 or
bfloat16 while its variables stay float32, and Keras's ``compile`` wraps the optimizer in
a ``LossScaleOptimizer`` for ``mixed_float16`` (which the GA step applies to every
micro-batch's loss). As Keras recommends, the output layer is float32 (a model function's
output is cast to float32), and so is the input normalisation (a float16 variance
overflows above 65,504). The policy is set only while the model is built: the layers keep
it, and nothing else in the process (the preprocessing, the next component of a local run)
computes in it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import keras
import numpy as np

from tfx_accum.components.accumulation.model import GradientAccumulationModel
from tfx_accum.components.config.settings import (
    DEFAULT_PRECISION,
    MODEL_NAMES,
    check_precision,
    image_side,
    is_model_function,
)
from tfx_accum.components.config.tasks import PREDICTION_KEYS
from tfx_accum.components.data.features import (
    CATEGORICAL,
    IMAGE,
    NUMERIC,
    NUMERIC_VECTOR,
    STRING,
    DataDescription,
)
from tfx_accum.components.models.custom_model import as_accumulation_model, call_model_function
from tfx_accum.components.models.model_rules import check_model_suits
from tfx_accum.components.models.task_compile import compile_arguments

ONE_HOT_LIMIT = 32  # string features with up to this many values are one-hot encoded


def model_inputs(data: DataDescription) -> dict[str, keras.KerasTensor]:
    """The inputs as the preprocessor delivers them: the numeric features as one
    ``NUMERIC_VECTOR`` input where ``data.numeric_vector``, every other feature alone."""
    numeric = data.kind(NUMERIC)
    inputs = {}
    if data.numeric_vector and numeric:
        inputs[NUMERIC_VECTOR] = keras.Input((len(numeric),), name=NUMERIC_VECTOR)
    for f in data.features:
        if not (data.numeric_vector and f.kind == NUMERIC):
            inputs[f.input_name] = keras.Input(
                f.input_shape, name=f.input_name, dtype=f.input_dtype
            )
    return inputs


def tabular_vector(data: DataDescription, inputs: dict) -> keras.KerasTensor | None:
    """Numeric features normalised with the training statistics, string features one-hot
    (or embedded), concatenated; None without such features."""
    parts = []
    numeric = data.kind(NUMERIC)
    if numeric:
        # float32 also under mixed precision, until normalised: raw values may exceed
        # float16's range (65,504), and so may their variance.
        x = (
            inputs[NUMERIC_VECTOR]
            if data.numeric_vector
            else keras.layers.Concatenate(name="features", dtype="float32")(
                [inputs[f.input_name] for f in numeric]
            )
        )
        parts.append(
            keras.layers.Normalization(
                mean=np.array([f.mean for f in numeric], "float32"),
                variance=np.array([f.variance for f in numeric], "float32"),
                dtype="float32",
            )(x)
        )
    for feature in (*data.kind(STRING), *data.kind(CATEGORICAL)):
        size = feature.index_size  # index 0: missing or out of vocabulary
        if size <= ONE_HOT_LIMIT:
            encode = keras.layers.CategoryEncoding(size, output_mode="one_hot")
            parts.append(encode(inputs[feature.input_name]))
        else:
            embedded = keras.layers.Embedding(size, 16)(inputs[feature.input_name])
            parts.append(keras.layers.Flatten()(embedded))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else keras.layers.Concatenate()(parts)


def _conv_trunk(image: keras.KerasTensor) -> keras.KerasTensor:
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(image)
    x = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(x)
    x = keras.layers.MaxPooling2D(2)(x)
    if image.shape[1] >= 16:  # larger images: one more stage, then pool globally
        x = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling2D(2)(x)
    return keras.layers.Flatten()(x)


def _densenet_trunk(image: keras.KerasTensor) -> keras.KerasTensor:
    side = max(32, image.shape[1])  # DenseNet121 needs at least 32x32
    x = keras.layers.Resizing(side, side)(image) if image.shape[1] != side else image
    if image.shape[-1] == 1:
        x = keras.layers.Concatenate()([x, x, x])
    backbone = keras.applications.DenseNet121(
        weights=None, include_top=False, input_shape=(side, side, 3), pooling="avg"
    )
    return backbone(x)


@contextlib.contextmanager
def precision_policy(precision: str) -> Iterator[None]:
    """Keras's global dtype policy set to ``precision`` while the block runs, then restored.

    Layers take the policy when they are created and keep it, so building (and compiling)
    a model in the block is all that mixed precision needs.
    """
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(check_precision(precision))
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def describe_precision(precision: str, component: str) -> str | None:
    """The console line saying what ``precision`` means here (None for float32)."""
    if precision == DEFAULT_PRECISION:
        return None
    import tensorflow as tf

    half = precision.removeprefix("mixed_")
    line = (
        f"[{component}] precision {precision}: layers compute in {half}, variables and "
        "outputs stay float32" + ("; the loss is scaled" if half == "float16" else "")
    )
    if half == "float16" and not tf.config.list_physical_devices("GPU"):
        line += " (no GPU: the CPU computes float16 slower than float32)"
    return line


def build_model(
    model_name: str,
    data: DataDescription,
    accumulation_steps: int,
    learning_rate: float,
    hp=None,
    precision: str = DEFAULT_PRECISION,
    model_hyperparameters: str | None = None,
) -> GradientAccumulationModel:
    """Builds and compiles one of ``MODEL_NAMES``, or the user's model function's model,
    as a GradientAccumulationModel for the inputs ``data`` describes.

    ``hp``: the trial's ``keras_tuner.HyperParameters``, for a model function that declares
    its own (and those ``model_hyperparameters`` names). ``precision``: the Keras dtype
    policy the model is built under (:func:`precision_policy`).
    """
    with precision_policy(precision):
        if is_model_function(model_name):  # validated by settings.ModelSettings
            model = call_model_function(
                model_name, data, hp, model_hyperparameters=model_hyperparameters
            )
            return as_accumulation_model(model, accumulation_steps, learning_rate, data)
        return _build_model(model_name, data, accumulation_steps, learning_rate)


def _build_model(
    model_name: str, data: DataDescription, accumulation_steps: int, learning_rate: float
) -> GradientAccumulationModel:
    assert model_name in MODEL_NAMES, model_name
    check_model_suits(model_name, {f.name: f.kind for f in data.features})
    inputs = model_inputs(data)
    images = data.kind(IMAGE)
    if model_name == "mlp":
        x = tabular_vector(data, inputs)
        x = keras.layers.Dense(128, activation="relu")(x)
        x = keras.layers.Dense(64, activation="relu")(x)
    else:
        trunk = _conv_trunk if model_name == "cnn" else _densenet_trunk
        if images:  # an image feature, and any tabular ones beside it in the head
            x = trunk(inputs[images[0].input_name])
            tabular = tabular_vector(data, inputs)
            if tabular is not None:
                x = keras.layers.Concatenate()([x, tabular])
        else:  # a square grid of numeric pixel columns (the 8x8 digits CSV)
            side = image_side(len(data.features), model_name)
            x = tabular_vector(data, inputs)
            x = trunk(keras.layers.Reshape((side, side, 1))(x))
        if model_name == "cnn":
            x = keras.layers.Dense(128, activation="relu")(x)
    outputs = keras.layers.Dense(
        data.outputs,
        activation="softmax" if data.classification else None,
        name=PREDICTION_KEYS[data.task],
        dtype="float32",  # under mixed precision too: a float32 softmax, float32 outputs
    )(x)
    model = GradientAccumulationModel(
        inputs=inputs,
        outputs=outputs,
        gradient_accumulation_steps=accumulation_steps,
        name=f"{model_name}_ga{accumulation_steps}",
    )
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), **compile_arguments(data.task))
    return model


def ready_to_trace(model: keras.Model, sample) -> None:
    """Creates every variable training needs before the training step is traced.

    A ``tf.function`` that creates variables on its first call traces itself twice: the
    optimizer's slots and the compiled metrics' variables would be created in the first
    trace of the step. The slots are built here, the metrics by one evaluation of
    ``sample`` (a batched dataset shaped like the validation data: its test step is the one
    validation traces anyway).
    """
    model.optimizer.build(model.trainable_variables)
    model.evaluate(sample, verbose=0)
