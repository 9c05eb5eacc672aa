"""The model architectures the Trainer and Tuner can build, all as GA models.

Every model takes a dict of numeric features (what TFX feeds: one ``(batch, 1)`` tensor per
CSV column), normalises them with statistics of the training split, and outputs class
probabilities.

- ``cnn`` (default): a small convolutional network on the features as a square image
  (the 8x8 digits); no BatchNormalization, so accumulation is exact.
- ``mlp``: two dense layers, for tabular CSVs of any width.
- ``package.module:function``: your own model (components/custom_model.py).
- ``densenet121``: the StackOverflow question's setup: DenseNet121 (``weights=None``) on
  the image resized to 32x32x3. It has BatchNormalization, so accumulation is not exact
  (a warning says so).
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np

from tfx_accum.components.accumulation import GradientAccumulationModel
from tfx_accum.components.custom_model import as_accumulation_model, call_model_function
from tfx_accum.components.settings import MODEL_NAMES, image_side, is_model_function


def build_model(
    model_name: str,
    feature_keys: Sequence[str],
    num_classes: int,
    accumulation_steps: int,
    learning_rate: float,
    mean: np.ndarray | None = None,
    variance: np.ndarray | None = None,
    hp=None,
) -> GradientAccumulationModel:
    """Builds and compiles one of ``MODEL_NAMES``, or the user's model function's model,
    as a GradientAccumulationModel.

    ``mean``/``variance`` (one value per feature, in ``feature_keys`` order) come from the
    training split; without them the features pass through unscaled. ``hp``: the trial's
    ``keras_tuner.HyperParameters``, for a model function that declares its own.
    """
    # model_name and num_classes come validated (settings.ModelSettings).
    if is_model_function(model_name):
        model = call_model_function(
            model_name, feature_keys, num_classes, hp, mean=mean, variance=variance
        )
        return as_accumulation_model(model, accumulation_steps, learning_rate)
    assert model_name in MODEL_NAMES, model_name
    inputs = {key: keras.Input((1,), name=key, dtype="float32") for key in feature_keys}
    x = keras.layers.Concatenate(name="features")([inputs[k] for k in feature_keys])
    if mean is not None and variance is not None:
        x = keras.layers.Normalization(
            mean=np.asarray(mean, "float32"), variance=np.asarray(variance, "float32")
        )(x)
    if model_name == "mlp":
        x = keras.layers.Dense(128, activation="relu")(x)
        x = keras.layers.Dense(64, activation="relu")(x)
    else:
        side = image_side(len(feature_keys), model_name)
        x = keras.layers.Reshape((side, side, 1))(x)
        if model_name == "cnn":
            x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(x)
            x = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(x)
            x = keras.layers.MaxPooling2D(2)(x)
            x = keras.layers.Flatten()(x)
            x = keras.layers.Dense(128, activation="relu")(x)
        else:
            x = keras.layers.Resizing(32, 32)(x)
            x = keras.layers.Concatenate()([x, x, x])
            backbone = keras.applications.DenseNet121(
                weights=None, include_top=False, input_shape=(32, 32, 3), pooling="avg"
            )
            x = backbone(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax", name="scores")(x)
    model = GradientAccumulationModel(
        inputs=inputs,
        outputs=outputs,
        gradient_accumulation_steps=accumulation_steps,
        name=f"{model_name}_ga{accumulation_steps}",
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model
