"""Helpers to train a plain Keras model and a GradientAccumulationModel side by side.

Both start from identical weights and see identical batches (no shuffling, no dropout);
the tests then compare every weight and optimizer slot.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import numpy as np

from tfx_accum.components import GradientAccumulationModel


def clone_pair(
    build: Callable[[], keras.Model], steps: int, **ga_kwargs
) -> tuple[keras.Model, GradientAccumulationModel]:
    """Builds the same architecture twice; the GA copy gets the plain copy's weights."""
    keras.utils.set_random_seed(0)
    plain = build()
    keras.utils.set_random_seed(0)
    ga = GradientAccumulationModel.from_model(
        build(), gradient_accumulation_steps=steps, **ga_kwargs
    )
    ga.set_weights(plain.get_weights())
    return plain, ga


def optimizer_state(model: keras.Model) -> list[np.ndarray]:
    return [np.asarray(v) for v in model.optimizer.variables]


def max_abs_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    assert len(a) == len(b), (len(a), len(b))
    return max(
        (float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b)), default=0.0
    )


def dense_classifier(regularized: bool = True) -> keras.Model:
    inputs = keras.Input((8,), name="features")
    reg = keras.regularizers.L2(0.01) if regularized else None
    hidden = keras.layers.Dense(16, activation="tanh", kernel_regularizer=reg)(inputs)
    outputs = keras.layers.Dense(3, activation="softmax")(hidden)
    return keras.Model(inputs, outputs)


def classification_data(n: int = 100, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype("float32")
    y = rng.integers(0, 3, n).astype("int32")  # JAX warns on int64 without x64
    sample_weight = rng.uniform(0.1, 2.0, n).astype("float32")
    return x, y, sample_weight
