"""The model on a Keras backend chosen for a fresh process: what the JAX and PyTorch tests share.

Keras reads ``KERAS_BACKEND`` once, when it is first imported, so each backend's own points
run in a process of their own (tests/accumulation/test_jax_backend.py,
tests/accumulation/test_torch_backend.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

# Plain Keras on the whole batch vs the model at k=3, then k=5 on the same model: the
# weights' differences, the last fits' logs, the update counts and traces, and whether
# TensorFlow was imported.
EXACT_AS_K_CHANGES = """
import json, sys
import keras, numpy as np
from tfx_accum.components import GradientAccumulationModel

def build():
    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(
        16, activation="tanh", kernel_regularizer=keras.regularizers.L2(1e-2)
    )(inputs)
    return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(hidden))

rng = np.random.default_rng(0)
x = rng.normal(size=(100, 8)).astype("float32")
y = rng.integers(0, 3, 100).astype("int32")
sw = rng.uniform(0.1, 2.0, 100).astype("float32")
keras.utils.set_random_seed(0)
plain = build()
ga = GradientAccumulationModel.from_model(build(), gradient_accumulation_steps=3)
ga.set_weights(plain.get_weights())
diffs, traces = [], []
for k in (3, 5):
    ga.gradient_accumulation_steps = k
    for model in (plain, ga):
        if getattr(model, "optimizer", None) is None:
            model.compile(
                optimizer=keras.optimizers.Adam(0.01),
                loss="sparse_categorical_crossentropy",
                metrics=["accuracy"],
            )
    logs = [
        m.fit(x, y, sample_weight=sw, batch_size=32, epochs=2, shuffle=False,
              verbose=0).history
        for m in (plain, ga)
    ]
    diffs.append(max(float(np.max(np.abs(a - b)))
                     for a, b in zip(plain.get_weights(), ga.get_weights())))
    traces.append(ga.train_step_trace_count)
print(json.dumps({
    "diffs": diffs, "traces": traces, "logs": logs,
    "iterations": [int(m.optimizer.iterations) for m in (plain, ga)],
    "tensorflow": "tensorflow" in sys.modules,
    "backend": keras.backend.backend(),
}))
"""


def run(code: str, backend: str, prelude: str = "", **env_vars: str) -> subprocess.CompletedProcess:
    """``code`` (dedented, after ``prelude``) in a fresh Python with ``KERAS_BACKEND=backend``."""
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3", **env_vars}
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def result(proc: subprocess.CompletedProcess) -> dict:
    """The JSON object a successful :func:`run` printed last."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_gpu_bench(tmp_path: Path, backend: str, prelude: str = "") -> None:
    """bench/gpu_jax.py's smoke shapes on this CPU for ``backend``: its report is written and
    the model is exact there."""
    script = Path(__file__).resolve().parents[1] / "bench" / "gpu_jax.py"
    proc = run(
        f"""
        import runpy, sys
        sys.argv = [{str(script)!r}, "--backend", {backend!r}, "--smoke", "--models",
                    "convnet", "--steps", "2", "--out", {str(tmp_path)!r}]
        runpy.run_path(sys.argv[0], run_name="__main__")
        """,
        backend,
        prelude,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / f"gpu_{backend}.json").read_text())
    assert report["backend"] == backend
    (row,) = report["rows"]
    assert row["model"] == "convnet" and row["k"] == 4
    assert row["max_abs_diff"] < 1e-5
    assert row["ga_over_plain"] > 0 and row["ga_over_k_micro_steps"] > 0
    assert (
        report["largest_batch"]["convnet"]["accumulated"]
        >= 2 * report["largest_batch"]["convnet"]["plain"]
    )
    assert (tmp_path / f"gpu_{backend}.md").read_text().startswith("# GradientAccumulationModel on")
