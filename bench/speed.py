"""Time per epoch: tfx-accum against plain ``fit`` at the same effective batch and at the
micro-batch, and against Keras 3's optimizer option, with and without XLA.

Two models, each timed in its own process: ``conv``, a small convolutional network on
32x32x3 inputs where compute (convolutions over activations) dominates; and ``dense``, a
1.3M-parameter MLP where per-update work (the Adam update, step dispatch) and the
per-micro-batch weight gradients are visible. Methods (all Adam, the same data):

- ``tfx_accum``: GradientAccumulationModel, B=128 in k=4 micro-batches of 32;
- ``plain_big``: plain ``fit`` at B=128, the same updates (the cost accumulation adds);
- ``plain_micro``: plain ``fit`` at B=32, 4x the updates (what fits without accumulation);
- ``keras_option``: ``Adam(gradient_accumulation_steps=4)`` fed batches of 32;
- ``floor``: the least any exact accumulation can do, as a hand-written ``train_step``:
  the k=4 micro-batches of B=128 unrolled, their gradients summed, one update; no sample
  weights, no uneven batches, no loss bookkeeping, no checks. It is what
  computing k weight gradients instead of one costs, and tfx-accum / floor what tfx-accum's
  own machinery adds on top.

Single-threaded TensorFlow, timed in process CPU time (``time.process_time``), with the
methods interleaved in each round. The ratios are the median over rounds of the per-round
ratios: a paired comparison, so that the drift of a shared, noisy 2-core machine cancels
out (the range over rounds is reported too). Run with ``python -m bench.speed MODEL
[REPEATS] [--jit]``; prints JSON on the last line.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

MICRO, STEPS, REPEATS = 32, 4, 9
SAMPLES = {"conv": 512, "dense": 2048}
METHODS = ("tfx_accum", "plain_big", "plain_micro", "keras_option", "floor")
BATCH = {"tfx_accum": MICRO * STEPS, "plain_big": MICRO * STEPS, "plain_micro": MICRO}
BATCH["keras_option"] = MICRO
BATCH["floor"] = MICRO * STEPS


def main(model_kind: str = "conv", repeats: int = REPEATS, jit: bool = False) -> dict:
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

    class Floor(keras.Model):
        """k equal micro-batches unrolled, gradients summed, one update (even batches only)."""

        def train_step(self, data):
            x, y = data
            size = tf.shape(x)[0] // STEPS
            total, loss_sum = None, 0.0
            for j in range(STEPS):
                xj, yj = x[j * size : (j + 1) * size], y[j * size : (j + 1) * size]
                with tf.GradientTape() as tape:
                    loss = self.compute_loss(xj, yj, self(xj, training=True)) / STEPS
                grads = tape.gradient(loss, self.trainable_weights)
                total = grads if total is None else [a + b for a, b in zip(total, grads)]
                loss_sum += loss
            self.optimizer.apply_gradients(zip(total, self.trainable_weights))
            return {"loss": loss_sum}

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
        optimizer = keras.optimizers.Adam(1e-3)
        if method == "tfx_accum":
            model = GradientAccumulationModel(inputs, outputs, gradient_accumulation_steps=STEPS)
        elif method == "floor":
            model = Floor(inputs, outputs)
        else:
            model = keras.Model(inputs, outputs)
            if method == "keras_option":
                optimizer = keras.optimizers.Adam(1e-3, gradient_accumulation_steps=STEPS)
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=jit,
        )
        return model

    models = {m: build(m) for m in METHODS}
    warm_up = {}
    for method, model in models.items():  # trace (and compile) and warm up
        start = time.process_time()
        model.fit(x, y, batch_size=BATCH[method], epochs=1, verbose=0, shuffle=False)
        warm_up[method] = time.process_time() - start
    times: dict[str, list[float]] = {m: [] for m in METHODS}
    for _ in range(repeats):
        for method, model in models.items():
            start = time.process_time()
            model.fit(x, y, batch_size=BATCH[method], epochs=1, verbose=0, shuffle=False)
            times[method].append(time.process_time() - start)

    def paired(other, method="tfx_accum"):
        ratios = sorted(a / b for a, b in zip(times[method], times[other]))
        return {"median": statistics.median(ratios), "range": [ratios[0], ratios[-1]]}

    return {
        "model": model_kind,
        "jit_compile": jit,
        "samples": samples,
        "repeats": repeats,
        "seconds_per_epoch_min": {m: min(t) for m, t in times.items()},
        "first_epoch_seconds": warm_up,
        "ratio": {other: paired(other) for other in METHODS[1:]},
        "floor_ratio": {"plain_big": paired("plain_big", "floor")},
    }


def profile(repeats: int = 20) -> dict:
    """Where the dense net's accumulation step spends its time beyond the big batch's.

    Times, in one process (single-threaded, process CPU time, best of rounds), pieces of
    one training step at B=128 without the optimizer update or Keras's step overhead:
    the big batch's forward and backward pass; k=4 micro-batches' forward and backward
    passes without adding their gradients (the cost of smaller matrix products: each
    micro-batch writes a whole weight gradient); the k-1 accumulator adds alone; and the
    whole accumulated gradient (loop, per-micro-batch loss split and adds) as
    GradientAccumulationModel computes it. Then the Dense layers' three matrix products
    alone (forward, input gradient, weight gradient), 128 rows once against 32 rows 4
    times: the same arithmetic, which the CPU's matrix kernels do not do at the same speed
    when it is split. Returns milliseconds per step.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    inputs = keras.Input((256,))
    h = keras.layers.Dense(1024, activation="relu")(inputs)
    h = keras.layers.Dense(1024, activation="relu")(h)
    model = keras.Model(inputs, keras.layers.Dense(10)(h))
    weights = model.trainable_weights
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    rng = np.random.default_rng(0)
    batch = MICRO * STEPS
    x = tf.constant(rng.normal(size=(batch, 256)).astype("float32"))
    y = tf.constant(rng.integers(0, 10, batch))

    def gradient(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        return tape.gradient(loss, weights)

    def part(j):
        return x[j * MICRO : (j + 1) * MICRO], y[j * MICRO : (j + 1) * MICRO]

    @tf.function
    def big_batch():
        return gradient(x, y)

    @tf.function
    def micro_batches_no_adds():
        return [g for j in range(STEPS) for g in gradient(*part(j))]

    grads = micro_batches_no_adds()

    @tf.function
    def adds_only():
        total = grads[: len(weights)]
        for j in range(1, STEPS):
            chunk = grads[j * len(weights) : (j + 1) * len(weights)]
            total = [a + b for a, b in zip(total, chunk)]
        return total

    @tf.function
    def micro_batches_with_adds():
        total = gradient(*part(0))
        for j in range(1, STEPS):
            total = [a + b for a, b in zip(total, gradient(*part(j)))]
        return total

    # The Dense layers' matrix products alone, outside Keras (no loss, activations or
    # bias): the forward x @ W, the input gradient dy @ W^T and the weight gradient
    # x^T @ dy, for 128 rows once or for 32 rows 4 times: the same arithmetic, split as
    # accumulation splits it.
    kernels = [w for w in weights if len(w.shape) == 2]
    products = {
        "forward_x_W": lambda x, dy, w: tf.linalg.matmul(x, w),
        "input_gradient_dy_Wt": lambda x, dy, w: tf.linalg.matmul(dy, w, transpose_b=True),
        "weight_gradient_xt_dy": lambda x, dy, w: tf.linalg.matmul(x, dy, transpose_a=True),
    }

    def operands(rows):
        return [
            (
                tf.constant(rng.normal(size=(rows, w.shape[0])).astype("float32")),
                tf.constant(rng.normal(size=(rows, w.shape[1])).astype("float32")),
                tf.convert_to_tensor(w),
            )
            for w in kernels
        ]

    whole, split = operands(batch), [operands(MICRO) for _ in range(STEPS)]

    def product_pieces(product):
        @tf.function
        def rows_once():
            return [product(*layer) for layer in whole]

        @tf.function
        def rows_split():
            return [product(*layer) for part in split for layer in part]

        return rows_once, rows_split

    pieces = {
        "big_batch_forward_backward": big_batch,
        "micro_batches_forward_backward_no_adds": micro_batches_no_adds,
        "accumulator_adds_only": adds_only,
        "micro_batches_with_adds_unrolled": micro_batches_with_adds,
    }

    def best_ms(function) -> float:
        function()
        function()
        best = float("inf")
        for _ in range(5):
            start = time.process_time()
            for _ in range(repeats):
                function()
            best = min(best, (time.process_time() - start) / repeats)
        return best * 1000.0

    result = {name: best_ms(function) for name, function in pieces.items()}
    matrix_products = {}
    for name, product in products.items():
        rows_once, rows_split = product_pieces(product)
        matrix_products[name] = {
            f"{batch}_rows_once": best_ms(rows_once),
            f"{MICRO}_rows_{STEPS}_times": best_ms(rows_split),
        }
    return {
        "model": "dense",
        "batch": batch,
        "steps": STEPS,
        "milliseconds": result,
        "matrix_products_milliseconds": matrix_products,
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["profile"]:
        print(json.dumps(profile()))
        sys.exit(0)
    args = [a for a in sys.argv[1:] if a != "--jit"]
    print(
        json.dumps(
            main(
                args[0] if args else "conv",
                int(args[1]) if len(args) > 1 else REPEATS,
                "--jit" in sys.argv[1:],
            )
        )
    )
