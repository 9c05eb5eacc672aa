"""Exactness on the loss patterns that break accumulation, for each implementation.

Each pattern trains plain ``fit`` on the whole batch (the reference) and each accumulation
method on the same data order (203 samples, B=32, k=4, so the last batch of an epoch is
uneven; 2 epochs; SGD with momentum), and reports the largest weight difference from the
reference, or how the method failed:

- ``sum loss``: ``MeanSquaredError(reduction="sum")`` with sample weights;
- ``masked + plain outputs``: a masked sequence output (``Embedding(mask_zero=True)``) and
  a plain classification output, each with its own loss denominator;
- ``Embedding under XLA``: sparse embedding gradients with ``jit_compile=True`` (Keras's
  default on a single GPU), Adam.

Run alone with ``python -m bench.loss_patterns``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

N, BATCH, STEPS, EPOCHS = 203, 32, 4, 2
METHODS = ("tfx_accum", "keras_option", "stackoverflow")
PATTERNS = {
    "sum_loss": 'sum loss (`reduction="sum"`, sample weights)',
    "masked_plain": "masked + plain outputs (own denominators)",
    "embedding_xla": "Embedding, `jit_compile=True`, Adam",
}


@dataclass
class PatternRow:
    pattern: str
    results: dict[str, str]  # method -> max weight diff, or "fails (...)"


def _pattern(name: str):
    """(build, data, loss, optimizer factory, jit) for one pattern."""
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    if name == "sum_loss":
        x = rng.normal(size=(N, 8)).astype("float32")
        y = (x @ rng.normal(size=(8, 2))).astype("float32")
        sw = rng.uniform(0.1, 2.0, N).astype("float32")

        def build(cls=keras.Model, **kwargs):
            inputs = keras.Input((8,))
            hidden = keras.layers.Dense(16, activation="tanh")(inputs)
            return cls(inputs, keras.layers.Dense(2)(hidden), **kwargs)

        def optimizer(**kwargs):
            return keras.optimizers.SGD(0.002, momentum=0.9, **kwargs)

        return build, (x, y, sw), keras.losses.MeanSquaredError(reduction="sum"), optimizer, False
    if name == "masked_plain":
        lengths = rng.integers(1, 8, N)
        lengths[:40] = 1
        x = rng.integers(1, 20, (N, 7))
        x[np.arange(7)[None, :] >= lengths[:, None]] = 0
        y = {"tags": rng.integers(0, 5, (N, 7)), "label": rng.integers(0, 3, N)}

        def build(cls=keras.Model, **kwargs):
            tokens = keras.Input((7,), dtype="int32")
            hidden = keras.layers.Dense(8, activation="tanh")(
                keras.layers.Embedding(20, 6, mask_zero=True)(tokens)
            )
            tags = keras.layers.Dense(5, activation="softmax", name="tags")(hidden)
            pooled = keras.layers.GlobalAveragePooling1D()(hidden)
            label = keras.layers.Dense(3, activation="softmax", name="label")(pooled)
            return cls(tokens, {"tags": tags, "label": label}, **kwargs)

        def optimizer(**kwargs):
            return keras.optimizers.SGD(0.1, momentum=0.9, **kwargs)

        loss = dict.fromkeys(("tags", "label"), "sparse_categorical_crossentropy")
        return build, (x, y, None), loss, optimizer, False
    x = rng.integers(0, 10, (N, 6))
    y = rng.integers(0, 3, N)

    def build(cls=keras.Model, **kwargs):
        tokens = keras.Input((6,), dtype="int32")
        pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(30, 8)(tokens))
        return cls(tokens, keras.layers.Dense(3, activation="softmax")(pooled), **kwargs)

    def optimizer(**kwargs):
        return keras.optimizers.Adam(0.01, **kwargs)

    return build, (x, y, None), "sparse_categorical_crossentropy", optimizer, True


def _train(pattern: str, method: str, initial_weights=None):
    import keras

    from bench.anchors import StackOverflowAccumulationModel
    from tfx_accum.components import GradientAccumulationModel

    build, (x, y, sw), loss, optimizer, jit = _pattern(pattern)
    keras.utils.set_random_seed(0)
    batch = BATCH
    if method == "tfx_accum":
        model = build(GradientAccumulationModel, gradient_accumulation_steps=STEPS)
        opt = optimizer()
    elif method == "stackoverflow":
        model = build(StackOverflowAccumulationModel, n_gradients=STEPS)
        opt, batch = optimizer(), BATCH // STEPS
    elif method == "keras_option":
        model, opt, batch = build(), optimizer(gradient_accumulation_steps=STEPS), BATCH // STEPS
    else:
        model, opt = build(), optimizer()
    if initial_weights is not None:
        model.set_weights(initial_weights)
    model.compile(optimizer=opt, loss=loss, jit_compile=jit)
    model.fit(x, y, sample_weight=sw, batch_size=batch, epochs=EPOCHS, shuffle=False, verbose=0)
    return model


def run_loss_patterns(log=print) -> list[PatternRow]:
    import numpy as np

    rows = []
    for pattern in PATTERNS:
        log(f"[exactness] pattern {pattern} ...")
        start = _initial_weights(pattern)
        reference = _train(pattern, "plain", start)
        results = {}
        for method in METHODS:
            try:
                model = _train(pattern, method, start)
                diff = max(
                    float(np.max(np.abs(a - b)))
                    for a, b in zip(reference.get_weights(), model.get_weights())
                )
                results[method] = f"{diff:.2e}"
            except Exception as error:  # noqa: BLE001 - reported, not hidden
                first = str(error).strip().splitlines()[0][:70] if str(error).strip() else ""
                results[method] = f"fails ({type(error).__name__}: {first})"
        rows.append(PatternRow(pattern, results))
    return rows


def _initial_weights(pattern: str):
    import keras

    build = _pattern(pattern)[0]
    keras.utils.set_random_seed(0)
    return build().get_weights()


def to_markdown(rows: list[PatternRow]) -> str:
    lines = [
        "| pattern (203 samples, B=32, k=4) | tfx-accum | Keras 3 optimizer option "
        "| StackOverflow `train_step` |",
        "| --- | --- | --- | --- |",
    ]
    for r in rows:
        cells = " | ".join(r.results[m] for m in METHODS)
        lines.append(f"| {PATTERNS[r.pattern]} | {cells} |")
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    result = run_loss_patterns()
    print(to_markdown(result))
    print(json.dumps([asdict(r) for r in result]))
