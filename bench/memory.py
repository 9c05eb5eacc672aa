"""Peak memory of one training configuration, in a process of its own.

``python -m bench.memory plain 256`` trains a plain model at batch 256;
``python -m bench.memory tfx_accum 256 8`` trains the GA model at batch 256 in 8
micro-batches (``--jit``: with ``jit_compile=True``). The model is convolutional, so
activations dominate. The process first builds the model and runs one warm-up step on a
single sample (tracing, allocator set-up), takes that peak RSS as its idle baseline, then
trains 3 steps and reports the increase of
peak RSS over the baseline. Prints JSON on the last line.
"""

from __future__ import annotations

import json
import os
import resource
import sys


def _peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM), in MiB.

    Not ``getrusage``: Linux carries a parent's peak RSS into the ``ru_maxrss`` of a child
    it forks and execs, so a child of the (large) benchmark process would report the
    parent's peak as its own.
    """
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # not Linux


def _rss_mib() -> float:
    """This process's resident set size now (VmRSS), in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS in /proc/self/status")


def main(method: str, batch: int, steps: int = 1, jit: bool = False) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras
    import numpy as np

    from tfx_accum.components import GradientAccumulationModel

    keras.utils.set_random_seed(0)
    inputs = keras.Input((64, 64, 3))
    h = inputs
    for _ in range(3):
        h = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    outputs = keras.layers.Dense(10)(h)
    if method == "tfx_accum":
        model = GradientAccumulationModel(inputs, outputs, gradient_accumulation_steps=steps)
    else:
        model = keras.Model(inputs, outputs)
    model.compile(
        optimizer="sgd",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit,
    )
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch * 3, 64, 64, 3)).astype("float32")
    y = rng.integers(0, 10, batch * 3)
    # A plain tf.data pipeline without prefetching, so that each configuration holds one
    # input batch at a time and the figure is about the training step itself.
    data = tf.data.Dataset.from_tensor_slices((x, y))
    if jit:
        # XLA compiles a program per batch shape, and compiling peaks higher than the
        # step runs: compile at the measured batch first, then reset the peak (Linux
        # clear_refs) and measure from the resident size after it.
        model.fit(data.take(batch).batch(batch), epochs=1, verbose=0)
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        idle = _rss_mib()
    else:
        model.fit(data.take(1).batch(1), epochs=1, verbose=0)
        idle = _peak_rss_mib()
    model.fit(data.batch(batch), epochs=1, verbose=0)
    peak = _peak_rss_mib()
    return {
        "method": method,
        "batch": batch,
        "steps": steps,
        "jit_compile": jit,
        "idle_mib": idle,
        "peak_mib": peak,
        "increase_mib": peak - idle,
    }


if __name__ == "__main__":
    jit = "--jit" in sys.argv[1:]
    args = [a for a in sys.argv[1:] if a != "--jit"]
    print(json.dumps(main(args[0], int(args[1]), int(args[2]) if len(args) > 2 else 1, jit)))
