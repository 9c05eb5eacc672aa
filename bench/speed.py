"""Time per epoch: tfx-accum (k=4, micro 32) vs plain fit at batch 32 vs Keras 3's option.

Two models, each timed in its own process: ``conv``, a small convolutional network on
32x32x3 inputs where compute (convolutions over activations) dominates; and ``dense``, a
1.3M-parameter MLP where per-update work (the Adam update, step dispatch) is visible.

Single-threaded TensorFlow, timed in process CPU time (``time.process_time``), with the
three methods interleaved in each round. The ratios are the median over rounds of the
per-round ratios: a paired comparison, so that the drift of a shared, noisy 2-core machine
cancels out (the range over rounds is reported too). Run with ``python -m bench.speed``; prints
JSON on the last line.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

MICRO, STEPS, REPEATS = 32, 4, 9
SAMPLES = {"conv": 512, "dense": 2048}
METHODS = ("tfx_accum", "plain", "keras_option")


def main(model_kind: str = "conv", repeats: int = REPEATS) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras
    import numpy as np

    from tfx_accum.components import GradientAccumulationModel

    rng = np.random.default_rng(0)
    samples = SAMPLES[model_kind]
    shape = (32, 32, 3) if model_kind == "conv" else (256,)
    x = rng.normal(size=(samples, *shape)).astype("float32")
    y = rng.integers(0, 10, samples)

    def build(method):
        keras.utils.set_random_seed(0)
        inputs = keras.Input(shape)
        if model_kind == "conv":
            h = inputs
            for _ in range(3):
                h = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(h)
            h = keras.layers.GlobalAveragePooling2D()(h)
        else:
            h = keras.layers.Dense(1024, activation="relu")(inputs)
            h = keras.layers.Dense(1024, activation="relu")(h)
        outputs = keras.layers.Dense(10)(h)
        if method == "tfx_accum":
            model = GradientAccumulationModel(inputs, outputs, gradient_accumulation_steps=STEPS)
            optimizer = keras.optimizers.Adam(1e-3)
        elif method == "keras_option":
            model = keras.Model(inputs, outputs)
            optimizer = keras.optimizers.Adam(1e-3, gradient_accumulation_steps=STEPS)
        else:
            model = keras.Model(inputs, outputs)
            optimizer = keras.optimizers.Adam(1e-3)
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=False,
        )
        return model

    batch = {"tfx_accum": MICRO * STEPS, "plain": MICRO, "keras_option": MICRO}
    models = {m: build(m) for m in METHODS}
    for method, model in models.items():  # trace and warm up
        model.fit(x, y, batch_size=batch[method], epochs=1, verbose=0, shuffle=False)
    times: dict[str, list[float]] = {m: [] for m in METHODS}
    for _ in range(repeats):
        for method, model in models.items():
            start = time.process_time()
            model.fit(x, y, batch_size=batch[method], epochs=1, verbose=0, shuffle=False)
            times[method].append(time.process_time() - start)
    best = {m: min(t) for m, t in times.items()}

    def paired(other):
        ratios = sorted(a / b for a, b in zip(times["tfx_accum"], times[other]))
        return statistics.median(ratios), ratios[0], ratios[-1]

    vs_plain, vs_keras = paired("plain"), paired("keras_option")
    return {
        "seconds_per_epoch_min": best,
        "ratio_vs_plain_batch32": vs_plain[0],
        "ratio_vs_keras_option": vs_keras[0],
        "ratio_range_vs_plain_batch32": vs_plain[1:],
        "ratio_range_vs_keras_option": vs_keras[1:],
        "model": model_kind,
        "samples": samples,
        "repeats": repeats,
    }


if __name__ == "__main__":
    kind = sys.argv[1] if len(sys.argv) > 1 else "conv"
    print(json.dumps(main(kind, int(sys.argv[2]) if len(sys.argv) > 2 else REPEATS)))
