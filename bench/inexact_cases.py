"""How far the cases the model warns about are from the big batch (README, "Limits").

``python -m bench.inexact_cases``: for each case, a plain ``keras.Model`` and a
``GradientAccumulationModel`` (k=4) with the same initial weights train 2 epochs on 96 rows
(B=32, Adam 0.01, unshuffled); prints the largest absolute weight difference, as a
Markdown table. A per-sample loss (``mse``) gives the float-rounding scale of an exact case.
"""

from __future__ import annotations

import os
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tfx_accum import GradientAccumulationModel  # noqa: E402


def rmse(y_true, y_pred):
    return keras.ops.sqrt(keras.ops.mean(keras.ops.square(y_true - y_pred)))


def _spectral(inputs):
    return keras.layers.SpectralNormalization(keras.layers.Dense(8))(inputs)


def cases(labels, targets) -> dict:
    """name -> (hidden layer or None, output units, activation, loss, targets)."""
    return {
        "`mse` (per sample, for scale)": (None, 1, None, "mse", targets),
        "`SpectralNormalization`": (
            _spectral,
            2,
            "softmax",
            "sparse_categorical_crossentropy",
            labels,
        ),
        "RMSE `sqrt(mean(...))`": (None, 1, None, rmse, targets),
        "`Dice`": (None, 1, "sigmoid", keras.losses.Dice(), targets),
        "`Tversky`": (None, 1, "sigmoid", keras.losses.Tversky(), targets),
        "`Circle`": (None, 4, None, keras.losses.Circle(), labels),
    }


def difference(hidden, units, activation, loss, y, x, k: int = 4) -> float:
    def build():
        keras.utils.set_random_seed(0)
        inputs = keras.Input((x.shape[1],))
        h = keras.layers.Dense(8)(inputs) if hidden is None else hidden(inputs)
        return inputs, keras.layers.Dense(units, activation=activation)(h)

    plain = keras.Model(*build())
    accumulating = GradientAccumulationModel(*build(), gradient_accumulation_steps=k)
    accumulating.set_weights(plain.get_weights())
    for model in (plain, accumulating):
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss=loss)
        model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    return max(
        float(np.abs(a - b).max()) for a, b in zip(plain.get_weights(), accumulating.get_weights())
    )


def main() -> None:
    warnings.simplefilter("ignore")  # the warnings are the subject; the table says it
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 6)).astype("float32")
    labels = rng.integers(0, 2, 96)
    targets = labels.reshape(-1, 1).astype("float32")
    print("| case | max abs weight difference |\n| --- | --- |")
    for name, case in cases(labels, targets).items():
        print(f"| {name} | {difference(*case, x=x):.1e} |")


if __name__ == "__main__":
    main()
