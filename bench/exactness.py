"""Exactness of each accumulation method against plain training on the big batch.

Same scenario for every method: 100 samples with sample weights, effective batch B=32
cut into k=4 micro-batches of 8 (so the last batch of each epoch has 4 samples),
SGD with momentum and an exponentially decaying learning rate, 2 epochs, no shuffling.

Run alone with ``python -m bench.exactness``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import asdict, dataclass

SAMPLES, BATCH, STEPS, EPOCHS = 100, 32, 4, 2
LR0, DECAY = 0.1, 0.95
METHODS = ("plain", "tfx_accum", "keras_option", "stackoverflow")
LABELS = {
    "plain": "plain fit at B=32 (reference)",
    "tfx_accum": "tfx-accum GradientAccumulationModel (k=4)",
    "keras_option": "Keras 3 optimizer `gradient_accumulation_steps=4`",
    "stackoverflow": "StackOverflow `train_step` override (k=4)",
}


@dataclass
class ExactnessRow:
    method: str
    max_weight_diff: float
    updates: int
    expected_updates: int
    schedule_step: float
    mirrored: str


def _data():
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(SAMPLES, 8)).astype("float32")
    y = rng.integers(0, 3, SAMPLES)
    sw = rng.uniform(0.1, 2.0, SAMPLES).astype("float32")
    return x, y, sw


def _build(method: str):
    import keras

    from bench.anchors import StackOverflowAccumulationModel, keras_optimizer_option
    from tfx_accum.components import GradientAccumulationModel

    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(16, activation="tanh")(inputs)
    outputs = keras.layers.Dense(3, activation="softmax")(hidden)
    schedule = keras.optimizers.schedules.ExponentialDecay(LR0, decay_steps=1, decay_rate=DECAY)
    optimizer_kwargs = dict(learning_rate=schedule, momentum=0.9)
    if method == "tfx_accum":
        model = GradientAccumulationModel(inputs, outputs, gradient_accumulation_steps=STEPS)
    elif method == "stackoverflow":
        model = StackOverflowAccumulationModel(inputs, outputs, n_gradients=STEPS)
    else:
        model = keras.Model(inputs, outputs)
    if method == "keras_option":
        optimizer = keras_optimizer_option(keras.optimizers.SGD, STEPS, **optimizer_kwargs)
    else:
        optimizer = keras.optimizers.SGD(**optimizer_kwargs)
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
    return model


def _fit_batch_size(method: str) -> int:
    # The two anchors are fed micro-batches; tfx-accum and the reference get the big batch.
    return BATCH // STEPS if method in ("keras_option", "stackoverflow") else BATCH


def _train(method: str):
    import keras
    import numpy as np

    class CountUpdates(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.updates = 0
            self._last = None

        def on_train_batch_end(self, batch, logs=None):
            current = self.model.get_weights()
            if self._last is not None and any(
                not np.array_equal(a, b) for a, b in zip(current, self._last)
            ):
                self.updates += 1
            self._last = current

        def on_train_begin(self, logs=None):
            self._last = self.model.get_weights()

    x, y, sw = _data()
    model = _build(method)
    counter = CountUpdates()
    model.fit(
        x,
        y,
        sample_weight=sw,
        batch_size=_fit_batch_size(method),
        epochs=EPOCHS,
        shuffle=False,
        verbose=0,
        callbacks=[counter],
    )
    return model, counter.updates


def _schedule_step(model) -> float:
    lr = float(model.optimizer.learning_rate)
    return math.log(lr / LR0) / math.log(DECAY)


def _mirrored_worker(method: str) -> None:
    """Subprocess body: try training under MirroredStrategy over two logical CPUs."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
    )
    x, y, sw = _data()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    try:
        with strategy.scope():
            model = _build(method)
        model.fit(
            x,
            y,
            sample_weight=sw,
            batch_size=_fit_batch_size(method),
            epochs=1,
            shuffle=False,
            verbose=0,
        )
        print(json.dumps({"status": "runs"}))
    except Exception as error:  # noqa: BLE001 - reported, not hidden
        message = f"{type(error).__name__}: {str(error).splitlines()[0][:80]}"
        print(json.dumps({"status": f"fails ({message})"}))


def _mirrored_status(method: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.exactness", "--mirrored", method],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)["status"]
    return f"fails (exit {proc.returncode})"


def run_exactness(log=print) -> list[ExactnessRow]:
    import numpy as np

    reference, reference_updates = _train("plain")
    expected = EPOCHS * math.ceil(SAMPLES / BATCH)
    rows = []
    for method in METHODS:
        log(f"[exactness] {method}: training and MirroredStrategy check ...")
        if method == "plain":
            model, updates = reference, reference_updates
        else:
            model, updates = _train(method)
        diff = max(
            float(np.max(np.abs(a - b)))
            for a, b in zip(reference.get_weights(), model.get_weights())
        )
        rows.append(
            ExactnessRow(
                method, diff, updates, expected, _schedule_step(model), _mirrored_status(method)
            )
        )
    return rows


def to_markdown(rows: list[ExactnessRow]) -> str:
    lines = [
        "| method | max abs weight diff vs reference | optimizer updates (expected) "
        "| LR-schedule step | MirroredStrategy (2 replicas) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {LABELS[r.method]} | {r.max_weight_diff:.2e} | {r.updates} ({r.expected_updates}) "
            f"| {r.schedule_step:.0f} | {r.mirrored} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if len(sys.argv) == 3 and sys.argv[1] == "--mirrored":
        _mirrored_worker(sys.argv[2])
    else:
        result = run_exactness()
        print(to_markdown(result))
        print(json.dumps([asdict(r) for r in result]))
