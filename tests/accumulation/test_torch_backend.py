"""The model on the PyTorch backend: what only PyTorch has, and TensorFlow not needed at all.

The exactness matrix itself (test_accumulation.py, test_exactness_matrix.py,
test_keras_surprises.py) runs on PyTorch unchanged in scripts/torch_stack.sh
(``KERAS_BACKEND=torch``); these tests add the PyTorch-only points: the model without
TensorFlow, one micro-batch's activations alive at a time, ``torch.compile``
(``jit_compile=True``), and the GPU bench. Where a test needs a backend chosen before Keras
is imported, it runs in a fresh process.
"""

from __future__ import annotations

import backend_runs
import keras
import numpy as np
import pytest
from equivalence import max_abs_diff

from tfx_accum.components import GradientAccumulationModel

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(keras.backend.backend() != "torch", reason="KERAS_BACKEND=torch")


def test_exact_on_torch_without_tensorflow_and_k_changes_between_fits():
    """Plain Keras on the whole batch vs the model at k=3, then k=5 on the same model, in a
    fresh process that never imports TensorFlow (torch.compile's own checks look for it
    with ``find_spec``, so it is not blocked, only asserted not imported)."""
    result = backend_runs.result(backend_runs.run(backend_runs.EXACT_AS_K_CHANGES, "torch"))
    assert result["backend"] == "torch" and result["tensorflow"] is False
    assert max(result["diffs"]) < 1e-4, result["diffs"]
    assert result["iterations"] == [16, 16]
    plain_logs, ga_logs = result["logs"]
    for key in ("loss", "accuracy"):
        np.testing.assert_allclose(ga_logs[key], plain_logs[key], rtol=1e-5, err_msg=key)
    assert result["traces"] == [0, 0]  # eager: each step reads k, nothing is traced


class _SavedActivations:
    """Bytes that autograd keeps for backward (parameters aside), now and at most.

    ``torch.autograd.graph.saved_tensors_hooks`` hands every tensor saved for a backward
    pass to ``pack``; what ``pack`` returns lives exactly as long as the graph keeps it.
    """

    def __init__(self, parameters):
        self.parameters = {p.data_ptr() for p in parameters}
        self.now = self.peak = 0

    def pack(self, tensor):
        counter = self

        class Held:
            size = 0 if tensor.data_ptr() in self.parameters else tensor.nbytes

            def __init__(self):
                counter.now += self.size
                counter.peak = max(counter.peak, counter.now)

            def __del__(self):
                counter.now -= self.size

        held = Held()
        held.tensor = tensor
        return held

    @staticmethod
    def unpack(held):
        return held.tensor


def test_one_micro_batch_of_activations_is_alive_at_a_time():
    """A batch of 256 rows at k=4: autograd keeps about a quarter of plain Keras's activations."""

    def build():
        inputs = keras.Input((32,))
        hidden = inputs
        for _ in range(4):
            hidden = keras.layers.Dense(256, activation="relu")(hidden)
        return keras.Model(inputs, keras.layers.Dense(4, activation="softmax")(hidden))

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 32)).astype("float32")
    y = rng.integers(0, 4, 256)
    peaks = []
    for k in (None, 4):
        keras.utils.set_random_seed(0)
        model = build()
        if k is not None:
            model = GradientAccumulationModel.from_model(model, gradient_accumulation_steps=k)
        model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
        saved = _SavedActivations(v.value for v in model.trainable_variables)
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
            model.fit(x, y, batch_size=256, epochs=1, verbose=0)
        peaks.append(saved.peak)
    plain, accumulated = peaks
    assert plain > 256 * 256 * 4 * 4  # four hidden layers' activations of 256 rows, float32
    assert accumulated <= 0.3 * plain, peaks


def test_whole_batch_denominators_are_found_again_when_the_loss_or_the_weights_change():
    """The step remembers when no loss needs whole-batch denominators (a forward pass saved
    per step); a new compile, or sample weights given, must look again."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 8)).astype("float32")
    y = rng.normal(size=(40, 2)).astype("float32")
    sw = rng.uniform(0.1, 2.0, 40).astype("float32")

    def build():
        inputs = keras.Input((8,))
        return keras.Model(inputs, keras.layers.Dense(2)(inputs))

    keras.utils.set_random_seed(0)
    plain = build()
    ga = GradientAccumulationModel.from_model(build(), gradient_accumulation_steps=3)
    ga.set_weights(plain.get_weights())
    steps = [
        ("sum_over_batch_size", None),  # no denominator needed: remembered
        ("mean_with_sample_weight", sw),  # a new compiled loss, with weights: needs one
        ("mean_with_sample_weight", None),  # no weights: none again
        ("mean_with_sample_weight", sw),  # weights given again: needs one
    ]
    for reduction, weights in steps:
        for model in (plain, ga):
            if getattr(model, "optimizer", None) is None or reduction != model.loss.reduction:
                loss = keras.losses.MeanSquaredError(reduction=reduction)
                model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss)
            model.fit(x, y, sample_weight=weights, batch_size=16, shuffle=False, verbose=0)
        assert max_abs_diff(plain.get_weights(), ga.get_weights()) < 1e-6, reduction


def test_torch_compile_is_exact():
    """``jit_compile=True`` (``torch.compile`` of Keras's train function) against plain
    Keras's eager step: one batch shape, so one compilation."""

    def build():
        inputs = keras.Input((8,))
        hidden = keras.layers.Dense(16, activation="tanh")(inputs)
        return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(hidden))

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype("float32")
    y = rng.integers(0, 3, 64)
    sw = rng.uniform(0.1, 2.0, 64).astype("float32")
    keras.utils.set_random_seed(0)
    plain = build()
    ga = GradientAccumulationModel.from_model(build(), gradient_accumulation_steps=4)
    ga.set_weights(plain.get_weights())
    logs = []
    for model, jit in ((plain, False), (ga, True)):
        model.compile(
            optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
            jit_compile=jit,
        )
        logs.append(
            model.fit(x, y, sample_weight=sw, batch_size=32, epochs=2, shuffle=False, verbose=0)
        )
    assert ga.jit_compile is True
    assert max_abs_diff(plain.get_weights(), ga.get_weights()) < 1e-5
    assert int(ga.optimizer.iterations) == int(plain.optimizer.iterations) == 4
    for key in ("loss", "accuracy"):
        np.testing.assert_allclose(logs[1].history[key], logs[0].history[key], rtol=1e-5)


def test_the_gpu_bench_runs_on_torch_and_reports_exactness(tmp_path):
    """bench/gpu_jax.py with --backend torch, ready for a GPU: its smoke shapes on this CPU."""
    backend_runs.check_gpu_bench(tmp_path, "torch")
