"""What accumulation changes for BatchNormalization: ghost batches, measured.

A BatchNormalization layer that trains normalises each micro-batch with that micro-batch's
mean and variance, so accumulating ``k`` micro-batches of ``m`` rows is not the same as one
batch of ``k * m`` rows (it is "ghost batch normalisation" with ghost batches of ``m``), and
its moving statistics are updated ``k`` times per optimizer update. This benchmark trains
the same small network on the digits (64 features, 10 classes; 1,198 training rows, 599
held out), once without and once with a BatchNormalization layer, as plain Keras at batch
128 and as ``GradientAccumulationModel`` at the same effective batch 128 split ``k x m`` for
several ``k``, all from the same initial weights and in the same data order, and reports the
largest weight difference from plain Keras and the held-out accuracy.

Run with ``python -m bench.batchnorm [--epochs N]``; it prints a markdown table and writes
``bench/results/batchnorm.md``.
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tfx_accum.components import GradientAccumulationModel  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BATCH = 128
SPLITS = (1, 4, 16)  # k; m = BATCH / k


def digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    data = load_digits()
    order = np.random.default_rng(0).permutation(len(data.target))
    x = (data.data[order] / 16.0).astype("float32")
    y = data.target[order].astype("int64")
    held = len(y) // 3
    return x[held:], y[held:], x[:held], y[:held]


def network(batchnorm: bool, k: int | None) -> keras.Model:
    """The same layers (and, by the seed, the same initial weights) as plain Keras
    (``k=None``) or as a GradientAccumulationModel with ``k`` steps."""
    keras.utils.set_random_seed(1)
    inputs = keras.Input((64,))
    x = keras.layers.Dense(64, use_bias=not batchnorm)(inputs)
    if batchnorm:
        x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Activation("relu")(x)
    outputs = keras.layers.Dense(10, activation="softmax")(x)
    if k is None:
        model = keras.Model(inputs, outputs)
    else:
        model = GradientAccumulationModel(inputs, outputs, gradient_accumulation_steps=k)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def train(batchnorm: bool, k: int | None, epochs: int, data) -> tuple[list[np.ndarray], float]:
    x, y, x_test, y_test = data
    model = network(batchnorm, k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the model's own BatchNormalization warning
        model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0)
    _, accuracy = model.evaluate(x_test, y_test, batch_size=256, verbose=0)
    return [w.numpy() for w in model.weights], float(accuracy)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batchnorm", description=__doc__)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    data = digits()
    lines = [
        f"| network | training (effective batch {BATCH}, {args.epochs} epochs) "
        "| max abs weight diff vs plain | held-out accuracy |",
        "| --- | --- | --- | --- |",
    ]
    for batchnorm in (False, True):
        name = "Dense-BatchNormalization-Dense" if batchnorm else "Dense-Dense (no BatchNorm)"
        reference, accuracy = train(batchnorm, None, args.epochs, data)
        lines.append(f"| {name} | plain Keras, batch {BATCH} | 0 | {accuracy:.4f} |")
        for k in SPLITS:
            weights, accuracy = train(batchnorm, k, args.epochs, data)
            diff = max(float(np.max(np.abs(a - b))) for a, b in zip(weights, reference))
            lines.append(f"| {name} | GA k={k} x m={BATCH // k} | {diff:.2e} | {accuracy:.4f} |")
    table = "\n".join(lines)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "batchnorm.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
