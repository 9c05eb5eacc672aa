"""Model functions for ``--model custom_models:NAME`` in the tests (tests/ on PYTHONPATH)."""

from __future__ import annotations

import keras


def small_mlp(features, num_classes, hp, feature_stats):
    """An uncompiled functional MLP with a hyperparameter of its own, normalised inputs."""
    names = sorted(features)
    inputs = {name: keras.Input((1,), name=name) for name in names}
    x = keras.layers.Concatenate()([inputs[name] for name in names])
    x = keras.layers.Normalization(
        mean=[feature_stats["mean"][n] for n in names],
        variance=[max(feature_stats["variance"][n], 1e-6) for n in names],
    )(x)
    x = keras.layers.Dense(hp.Choice("units", [32, 64]), activation="relu")(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs)


def not_a_model(features, num_classes, hp):
    return "a string"


def wrong_inputs(features, num_classes, hp):
    inputs = keras.Input((64,), name="pixels")
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(inputs))


def wrong_classes(features, num_classes, hp):
    inputs = {name: keras.Input((1,), name=name) for name in features}
    x = keras.layers.Concatenate()(list(inputs.values()))
    return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(x))


def all_but_ash(features, num_classes, hp, feature_stats):
    """A model of every wine feature but ``ash``, on a list of inputs (Keras would match a
    dict of all the columns to it by sorted position if the pipeline did not feed it by
    name)."""
    names = sorted(n for n in features if n != "ash")
    inputs = [keras.Input((1,), name=name) for name in names]
    x = keras.layers.Concatenate()(inputs)
    x = keras.layers.Normalization(
        mean=[feature_stats["mean"][n] for n in names],
        variance=[feature_stats["variance"][n] for n in names],
    )(x)
    x = keras.layers.Dense(64, activation="relu")(x)
    x = keras.layers.Dense(64, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))


def logits_mlp(features, num_classes, hp):
    """TFX's penguin example's way: a linear last layer and a from_logits loss."""
    inputs = {name: keras.Input((1,), name=name) for name in sorted(features)}
    x = keras.layers.Concatenate()(list(inputs.values()))
    x = keras.layers.Dense(16, activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(num_classes)(x))
    model.compile(
        optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


def own_learning_rate(features, num_classes, hp):
    """Declares a hyperparameter under a name tfx-accum searches itself."""
    inputs = {name: keras.Input((1,), name=name) for name in sorted(features)}
    x = keras.layers.Concatenate()(list(inputs.values()))
    hp.Choice("learning_rate", [1e-2, 1e-3])
    x = keras.layers.Dense(hp.Int("units", 8, 16, step=8), activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))
