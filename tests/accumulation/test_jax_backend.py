"""The model on the JAX backend: what only JAX has, and TensorFlow not needed at all.

The exactness matrix itself (test_accumulation.py, test_exactness_matrix.py,
test_keras_surprises.py) runs on JAX unchanged in scripts/newest_stack.sh
(``KERAS_BACKEND=jax``); these tests add the JAX-only points. Each runs its model in a
fresh process, whose backend is chosen before Keras is imported.
"""

from __future__ import annotations

import subprocess

import backend_runs
import pytest

pytest.importorskip("jax")

# A process in which `import tensorflow` fails, as on a machine without it.
NO_TENSORFLOW = """
import sys
class _NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ModuleNotFoundError("No module named 'tensorflow' (blocked by the test)")
        return None
sys.meta_path.insert(0, _NoTensorFlow())
"""


def _run(code: str, backend: str = "jax", **env_vars: str) -> subprocess.CompletedProcess:
    return backend_runs.run(code, backend, NO_TENSORFLOW, **env_vars)


_result = backend_runs.result


def test_exact_on_jax_without_tensorflow_and_k_changes_rebuild_the_step():
    """Plain Keras on the whole batch vs the model at k=3, then k=5 on the same model."""
    result = _result(_run(backend_runs.EXACT_AS_K_CHANGES))
    assert result["backend"] == "jax" and result["tensorflow"] is False
    assert max(result["diffs"]) < 1e-4, result["diffs"]
    assert result["iterations"] == [16, 16]
    plain_logs, ga_logs = result["logs"]
    for key in ("loss", "accuracy"):
        assert ga_logs[key] == pytest.approx(plain_logs[key], rel=1e-5), key
    # Batches of 32 and a last one of 4: two traces at k=3, and two more once k is 5 (k
    # shapes the compiled step on JAX: a new k builds a new one).
    assert result["traces"] == [2, 4]


def test_data_parallel_over_two_devices_equals_plain_keras():
    """keras.distribution.DataParallel (JAX's MirroredStrategy): 2 CPU devices, sharded batch."""
    result = _result(
        _run(
            """
            import json
            import jax, keras, numpy as np
            from tfx_accum.components import GradientAccumulationModel

            keras.distribution.set_distribution(
                keras.distribution.DataParallel(devices=jax.devices())
            )

            def build():
                inputs = keras.Input((8,))
                hidden = keras.layers.Dense(16, activation="relu")(inputs)
                return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(hidden))

            rng = np.random.default_rng(0)
            x = rng.normal(size=(96, 8)).astype("float32")
            y = rng.integers(0, 3, 96).astype("int32")
            keras.utils.set_random_seed(0)
            plain = build()
            ga = GradientAccumulationModel.from_model(build(), gradient_accumulation_steps=4)
            ga.set_weights(plain.get_weights())
            logs = []
            for model in (plain, ga):
                model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
                logs.append(model.fit(x, y, batch_size=32, epochs=2, shuffle=False,
                                      verbose=0).history)
            print(json.dumps({
                "devices": len(jax.devices()),
                "diff": max(float(np.max(np.abs(a - b)))
                            for a, b in zip(plain.get_weights(), ga.get_weights())),
                "logs": logs,
            }))
            """,
            XLA_FLAGS="--xla_force_host_platform_device_count=2",
        )
    )
    assert result["devices"] == 2
    assert result["diff"] < 1e-5
    plain_logs, ga_logs = result["logs"]
    for key in ("loss", "accuracy"):
        assert ga_logs[key] == pytest.approx(plain_logs[key], rel=1e-5), key


def test_a_micro_batch_cut_covers_the_batch_long_ones_first():
    from tfx_accum.components.accumulation.jax_step import micro_batch_groups

    assert micro_batch_groups(32, 3) == [(11, 2), (10, 1)]
    assert micro_batch_groups(32, 4) == [(8, 4)]
    assert micro_batch_groups(2, 4) == [(1, 2)]  # a batch smaller than k: rows of one
    for n in range(1, 40):
        for k in range(1, 9):
            groups = micro_batch_groups(n, k)
            assert sum(size * count for size, count in groups) == n
            assert sum(count for _, count in groups) == min(n, k)
            sizes = [size for size, _ in groups]
            assert sizes == sorted(sizes, reverse=True) and sizes[0] - sizes[-1] <= 1


def test_another_backend_is_refused_in_one_line():
    proc = _run(
        """
        from tfx_accum.components.accumulation.model import GradientAccumulationModel
        """,
        backend="numpy",
    )
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: GradientAccumulationModel: the Keras backend 'numpy'")
    assert "KERAS_BACKEND=jax" in last


def test_the_gpu_bench_runs_and_reports_exactness(tmp_path):
    """bench/gpu_jax.py, ready for a GPU: its smoke shapes on this CPU, TensorFlow blocked."""
    backend_runs.check_gpu_bench(tmp_path, "jax", NO_TENSORFLOW)
