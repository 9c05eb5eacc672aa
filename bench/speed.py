"""Time per epoch: tfx-accum (k=4, micro 32) vs plain fit at batch 32 vs Keras 3's option.

Single-threaded TensorFlow, interleaved repetitions and the minimum of each, so that the
ratios hold on a noisy shared 2-core machine. Run with ``python -m bench.speed``; prints
JSON on the last line.
"""

from __future__ import annotations

import json
import os
import sys
import time

SAMPLES, MICRO, STEPS, REPEATS = 2048, 32, 4, 5
METHODS = ("tfx_accum", "plain", "keras_option")


def main(repeats: int = REPEATS) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras
    import numpy as np

    from components import GradientAccumulationModel

    rng = np.random.default_rng(0)
    x = rng.normal(size=(SAMPLES, 256)).astype("float32")
    y = rng.integers(0, 10, SAMPLES)

    def build(method):
        keras.utils.set_random_seed(0)
        inputs = keras.Input((256,))
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
            start = time.perf_counter()
            model.fit(x, y, batch_size=batch[method], epochs=1, verbose=0, shuffle=False)
            times[method].append(time.perf_counter() - start)
    best = {m: min(t) for m, t in times.items()}
    return {
        "seconds_per_epoch_min": best,
        "ratio_vs_plain_batch32": best["tfx_accum"] / best["plain"],
        "ratio_vs_keras_option": best["tfx_accum"] / best["keras_option"],
        "samples": SAMPLES,
        "repeats": repeats,
    }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else REPEATS)))
