"""Model functions as TFX modules write them, for ``custom_config['model'] =
'tfx_model_functions:NAME'`` in the tests (tests/ is on the path): ``tf.keras`` or Keras 3,
functional, Sequential and subclassed, dict and list inputs, several dtypes, sigmoid,
softmax, logits and regression outputs. Each is written as its TFX example writes it."""

from __future__ import annotations

import keras
import keras_tuner
import tensorflow as tf

DENSE = ["trip_miles_xf", "fare_xf"]
BUCKETS = ["pickup_latitude_xf"]
CATEGORIES = ["trip_start_hour_xf", "pickup_census_tract_xf"]  # the second is never read


def taxi_like(hidden_units=None):
    """TFX's taxi example's ``_build_keras_model``, in its own words: ``tf.keras``, dict
    inputs, int32 category inputs one of which no layer reads, an adapted-never
    Normalization, one sigmoid unit, compiled."""
    deep_input = {
        name: tf.keras.layers.Input(name=name, shape=(1,), dtype=tf.float32) for name in DENSE
    }
    wide_input = {
        name: tf.keras.layers.Input(name=name, shape=(1,), dtype="int32")
        for name in BUCKETS + CATEGORIES
    }
    input_layers = {**deep_input, **wide_input}
    deep = tf.keras.layers.concatenate(
        [tf.keras.layers.Normalization()(layer) for layer in deep_input.values()]
    )
    for units in hidden_units or [8, 4]:
        deep = tf.keras.layers.Dense(units)(deep)
    wide = tf.keras.layers.concatenate(
        [tf.keras.layers.CategoryEncoding(num_tokens=10)(input_layers[BUCKETS[0]])]
        + [tf.keras.layers.CategoryEncoding(num_tokens=24)(input_layers[CATEGORIES[0]])]
    )
    output = tf.keras.layers.Dense(1, activation="sigmoid")(
        tf.keras.layers.concatenate([deep, wide])
    )
    output = tf.keras.layers.Reshape((1,))(output)
    model = tf.keras.Model(input_layers, output)
    model.compile(
        loss="binary_crossentropy",
        optimizer=tf.keras.optimizers.Adam(learning_rate=0.001),
        metrics=[tf.keras.metrics.BinaryAccuracy()],
    )
    return model


def penguin_hyperparameters() -> keras_tuner.HyperParameters:
    """TFX's penguin example's ``_get_hyperparameters``."""
    hp = keras_tuner.HyperParameters()
    hp.Choice("learning_rate", [1e-2, 1e-3], default=1e-2)
    hp.Int("num_layers", 1, 3, default=2)
    return hp


def penguin_like(hparams: keras_tuner.HyperParameters) -> tf.keras.Model:
    """TFX's penguin example's ``_make_keras_model``: a list of inputs, hyperparameters it
    reads but declares elsewhere, three logits."""
    from tensorflow import keras as tf_keras

    inputs = [tf_keras.layers.Input(shape=(1,), name=name) for name in ("a_xf", "b_xf")]
    d = tf_keras.layers.concatenate(inputs)
    for _ in range(int(hparams.get("num_layers"))):
        d = tf_keras.layers.Dense(8, activation="relu")(d)
    outputs = tf_keras.layers.Dense(3)(d)
    model = tf_keras.Model(inputs=inputs, outputs=outputs)
    model.compile(
        optimizer=tf_keras.optimizers.Adam(hparams.get("learning_rate")),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[tf_keras.metrics.SparseCategoricalAccuracy()],
    )
    return model


def mnist_like() -> tf.keras.Model:
    """TFX's MNIST example's ``build_keras_model``: Sequential, one vector input, logits,
    RMSprop."""
    model = tf.keras.Sequential()
    model.add(tf.keras.layers.InputLayer(input_shape=(4,), name="pixels_xf"))
    model.add(tf.keras.layers.Dense(16, activation="relu"))
    model.add(tf.keras.layers.Dense(3))
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.RMSprop(learning_rate=0.0015),
        metrics=["sparse_categorical_accuracy"],
    )
    return model


def regression_like():
    """Keras 3, a float and an integer input, one linear unit, MSE and MAE."""
    x = keras.Input((1,), name="a_xf")
    count = keras.Input((1,), name="count", dtype="int64")
    joined = keras.layers.Concatenate()([x, keras.ops.cast(count, "float32")])
    model = keras.Model({"a_xf": x, "count": count}, keras.layers.Dense(1)(joined))
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", metrics=["mae"])
    return model


class ByKey(keras.Model):
    """A subclassed model that reads two features from a dict; a softmax."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(3, activation="softmax")

    def call(self, features):
        x = keras.ops.concatenate([features["a_xf"], features["b_xf"]], axis=-1)
        return self.out(self.hidden(x))


def subclassed():
    model = ByKey()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    return model


def mixed_dtypes():
    """Text, an integer index and a vector of numbers, each in its own dtype and shape."""
    city = keras.Input((1,), name="city", dtype="string")
    bucket = keras.Input((1,), name="bucket_xf", dtype="int64")
    vector = keras.Input((4,), name="pixels_xf")
    looked_up = keras.layers.StringLookup(vocabulary=["x", "y"], output_mode="one_hot")(city)
    parts = [
        keras.layers.Flatten()(looked_up),
        keras.layers.CategoryEncoding(num_tokens=10, output_mode="one_hot")(bucket),
        vector,
    ]
    x = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()(parts))
    return keras.Model([city, bucket, vector], keras.layers.Dense(3, activation="softmax")(x))


def takes_two(a, b):
    raise AssertionError("never called")


def wrong_output():
    x = keras.Input((1,), name="a_xf")
    return keras.Model(x, keras.layers.Dense(5, activation="softmax")(x))


def unknown_input():
    x = keras.Input((1,), name="tip")
    return keras.Model(x, keras.layers.Dense(3, activation="softmax")(x))


def keras_2_model():
    """A model of Keras 2 itself (``tf_keras``), which cannot be wrapped."""
    import tf_keras

    x = tf_keras.Input((1,), name="a_xf")
    return tf_keras.Model(x, tf_keras.layers.Dense(3, activation="softmax")(x))


def by_index_sizes(features, num_classes, index_sizes):
    """tfx-accum's contract: an embedding per category input, as many rows as indices."""
    inputs = {name: keras.Input(f.shape, name=name, dtype=f.dtype) for name, f in features.items()}
    parts = [
        keras.layers.Flatten()(keras.layers.Embedding(index_sizes[name], 2)(inputs[name]))
        if name in index_sizes
        else inputs[name]
        for name in sorted(inputs)
    ]
    x = keras.layers.Concatenate()(parts)
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))


def squeezed_regression():
    """One value per example as ``(batch,)``, returned in a dict of one output."""
    x = keras.Input((1,), name="a_xf")
    value = keras.layers.Reshape(())(keras.layers.Dense(1)(x))
    model = keras.Model({"a_xf": x}, {"price": value})
    model.compile(optimizer="adam", loss={"price": "mse"})
    return model
