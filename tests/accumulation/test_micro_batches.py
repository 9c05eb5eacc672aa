"""What a step does with its micro-batches, observed, and its corner cases.

The equivalence tests elsewhere compare weights with plain training on the whole batch,
which a step that ignored ``k`` would match too. The tests here observe the micro-batches
themselves (forward passes per step, rows per pass, peak memory), so that replacing the
accumulation step with ``keras.Model.train_step`` fails them; and they cover XLA with
layers that loop (LSTM, GRU), sparse and ragged inputs, ``train_step`` overrides,
``reduction=None`` logs, metrics that are not sums over samples, and the Keras self-check.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from equivalence import classification_data, clone_pair, dense_classifier, max_abs_diff
from keras import ops
from packaging.version import Version
from test_accumulation import JIT, assert_equivalent, fit_both

from tfx_accum.components import GradientAccumulationModel
from tfx_accum.components.accumulation import keras_adapter
from tfx_accum.components.accumulation import model as accumulation

ROOT = Path(__file__).resolve().parents[2]


class PassCounter(keras.layers.Layer):
    """Identity that records, in training mode, each forward pass and its row count."""

    def build(self, shape):
        self.passes = self.add_weight(shape=(), initializer="zeros", trainable=False)
        self.rows = self.add_weight(shape=(), initializer="zeros", trainable=False)
        self.largest = self.add_weight(shape=(), initializer="zeros", trainable=False)

    def call(self, x, training=False):
        if training:
            rows = ops.cast(ops.shape(x)[0], "float32")
            self.passes.assign_add(1.0)
            self.rows.assign_add(rows)
            self.largest.assign(ops.maximum(self.largest, rows))
        return x


def counted_model(k: int) -> tuple[GradientAccumulationModel, PassCounter]:
    inputs = keras.Input((8,))
    counter = PassCounter()
    hidden = keras.layers.Dense(8, activation="tanh")(counter(inputs))
    outputs = keras.layers.Dense(3, activation="softmax")(hidden)
    return GradientAccumulationModel(inputs, outputs, gradient_accumulation_steps=k), counter


@JIT
@pytest.mark.parametrize(
    "n,k,passes,largest",
    [(32, 4, 4, 8), (70, 4, 4, 18), (6, 8, 6, 1), (33, 1, 1, 33)],
    ids=["even", "uneven", "smaller-than-k", "k1"],
)
def test_each_forward_pass_sees_one_micro_batch(n, k, passes, largest, jit):
    x, y, _ = classification_data(n=n)
    model, counter = counted_model(k)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", jit_compile=jit)
    model.fit(x, y, batch_size=n, epochs=1, verbose=0, shuffle=False)
    # One step over the whole batch: k forward passes (fewer if the batch has fewer
    # rows; under XLA on the CPU, where the k micro-batches are traced one after another,
    # the empty ones run on 0 rows), every row seen once, none with more than ceil(n / k).
    assert int(model.optimizer.iterations) == 1
    if jit and n < k and accumulation._xla_on_cpu():
        passes = k
    assert float(counter.passes) == passes
    assert float(counter.rows) == n
    assert float(counter.largest) == largest


@pytest.mark.e2e
def test_peak_memory_of_a_large_effective_batch_is_that_of_its_micro_batch():
    """Peak RSS of B=64 in 8 micro-batches vs plain B=64 (conv net, each in a process)."""

    def increase(method: str, steps: int) -> float:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.memory", method, "64", str(steps)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**__import__("os").environ, "MALLOC_MMAP_THRESHOLD_": "65536"},
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])["increase_mib"]

    plain, ga = increase("plain", 1), increase("tfx_accum", 8)
    # Activations of 8 rows instead of 64: well under half (measured about 0.2x).
    assert ga < 0.5 * plain, (ga, plain)


# ------------------------------------------------------------------- XLA, loops


def lstm_classifier():
    inputs = keras.Input((5, 3))
    hidden = keras.layers.LSTM(6)(inputs)
    return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(hidden))


def gru_classifier():
    inputs = keras.Input((5, 3))
    hidden = keras.layers.GRU(6)(inputs)
    return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(hidden))


def conv_classifier():
    inputs = keras.Input((6, 6, 2))
    hidden = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    hidden = keras.layers.GlobalAveragePooling2D()(hidden)
    return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(hidden))


def sequence_inputs(n: int, shape=(5, 3), seed: int = 5):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, *shape)).astype("float32"), rng.integers(0, 3, n)


@JIT
@pytest.mark.parametrize(
    "build,shape",
    [(lstm_classifier, (5, 3)), (gru_classifier, (5, 3)), (conv_classifier, (6, 6, 2))],
    ids=["lstm", "gru", "conv"],
)
def test_layers_with_loops_and_uneven_batches(build, shape, jit):
    # 70 samples at B=16, k=4: the last batch of 6 rows is cut 2, 2, 1, 1.
    x, y = sequence_inputs(70, shape)
    plain, ga, hist, tol = fit_both(
        build,
        4,
        dict(x=x, y=y, batch_size=16, epochs=1),
        dict(loss="sparse_categorical_crossentropy"),
        "adam",
        jit,
    )
    assert_equivalent(plain, ga, tol)
    np.testing.assert_allclose(hist[0]["loss"], hist[1]["loss"], rtol=1e-5)


def masked_lstm_two_outputs():
    inputs = keras.Input((6, 3))
    masked = keras.layers.Masking(0.0)(inputs)
    sequence = keras.layers.LSTM(5, return_sequences=True)(masked)
    tags = keras.layers.Dense(4, activation="softmax", name="tags")(sequence)
    pooled = keras.layers.LSTM(4)(sequence)
    label = keras.layers.Dense(3, activation="softmax", name="label")(pooled)
    return keras.Model(inputs, {"tags": tags, "label": label})


@JIT
def test_masking_lstm_two_outputs_uneven_batch(jit):
    rng = np.random.default_rng(6)
    n = 70
    x = rng.normal(size=(n, 6, 3)).astype("float32")
    lengths = rng.integers(1, 7, n)
    x[np.arange(6)[None, :] >= lengths[:, None]] = 0.0
    y = {"tags": rng.integers(0, 4, (n, 6)), "label": rng.integers(0, 3, n)}
    plain, ga, hist, tol = fit_both(
        masked_lstm_two_outputs,
        4,
        dict(x=x, y=y, batch_size=16, epochs=1),
        dict(
            loss={
                "tags": "sparse_categorical_crossentropy",
                "label": "sparse_categorical_crossentropy",
            },
            metrics={"tags": ["accuracy"]},
        ),
        "adam",
        jit,
    )
    assert_equivalent(plain, ga, tol)
    for key in ("loss", "tags_loss", "label_loss", "tags_accuracy"):
        np.testing.assert_allclose(hist[0][key], hist[1][key], rtol=1e-5, err_msg=key)


@pytest.mark.parametrize("case", ["passes", "lstm", "masked-two-outputs", "embedding"])
def test_xla_loops_as_on_a_gpu(case, monkeypatch):
    """Under XLA on a GPU or TPU the micro-batches run in two static-shape loops; on the
    CPU they are traced one after another (XLA's CPU loops are slow). Force the loops."""
    from test_exactness_matrix import N, test_embedding_sparse_gradients

    monkeypatch.setattr(accumulation, "_xla_on_cpu", lambda: False)
    if case == "passes":
        test_each_forward_pass_sees_one_micro_batch(70, 4, 4, 18, True)
    elif case == "lstm":
        test_layers_with_loops_and_uneven_batches(lstm_classifier, (5, 3), True)
    elif case == "masked-two-outputs":
        test_masking_lstm_two_outputs_uneven_batch(True)
    else:
        test_embedding_sparse_gradients(N, "adam", True)


@JIT
def test_a_batch_smaller_than_k_with_add_loss_and_batch_normalization(jit):
    """Empty micro-batches (XLA on the CPU, B < k) add nothing: a mean add_loss over 0 rows
    is NaN, and BatchNormalization would update its moving statistics from 0 rows."""
    from test_exactness_matrix import MeanKL, _with, regression_data

    x, y, _ = regression_data(n=3)
    plain, ga, hist, tol = fit_both(
        _with(MeanKL),
        4,
        dict(x=x, y=y, batch_size=3, epochs=2),
        dict(loss="mse"),
        "momentum",
        jit,
        add_loss_reduction="mean",
    )
    assert_equivalent(plain, ga, tol)
    np.testing.assert_allclose(hist[0]["loss"], hist[1]["loss"], rtol=1e-5)
    inputs = keras.Input((8,))
    norm = keras.layers.BatchNormalization()
    model = GradientAccumulationModel(
        inputs, keras.layers.Dense(2)(norm(inputs)), gradient_accumulation_steps=4
    )
    model.compile(optimizer="sgd", loss="mse", jit_compile=jit)
    with pytest.warns(UserWarning, match="BatchNormalization"):
        model.fit(x, y, batch_size=3, epochs=1, verbose=0)
    assert np.all(np.isfinite(norm.moving_mean.numpy()))
    assert np.all(np.isfinite(norm.moving_variance.numpy()))


# ------------------------------------------------------------ sparse and ragged


def sparse_data(n: int = 45):
    rng = np.random.default_rng(7)
    dense = ((rng.random((n, 10)) < 0.3) * rng.normal(size=(n, 10))).astype("float32")
    return tf.sparse.from_dense(dense), rng.integers(0, 3, n)


def sparse_model():
    inputs = keras.Input((10,), sparse=True)
    hidden = keras.layers.Dense(6, activation="tanh")(inputs)
    return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(hidden))


def test_sparse_inputs_are_split_along_their_rows():
    x, y = sparse_data()
    plain, ga, hist, tol = fit_both(
        sparse_model,
        4,
        dict(x=x, y=y, batch_size=16, epochs=2),
        dict(loss="sparse_categorical_crossentropy"),
        "momentum",
    )
    assert_equivalent(plain, ga, tol)
    np.testing.assert_allclose(hist[0]["loss"], hist[1]["loss"], rtol=1e-5)


def test_sparse_inputs_under_xla_are_refused_in_one_line():
    x, y = sparse_data()
    model = GradientAccumulationModel.from_model(sparse_model(), gradient_accumulation_steps=4)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", jit_compile=True)
    before = model.get_weights()
    with pytest.raises(ValueError, match="tf.SparseTensor.*jit_compile=False") as info:
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    assert "\n" not in str(info.value)
    assert max_abs_diff(before, model.get_weights()) == 0.0


RAGGED = pytest.mark.skipif(
    Version(keras.__version__) < Version("3.10"), reason="keras.Input(ragged=True) is newer"
)


def ragged_data(n: int = 45):
    rng = np.random.default_rng(8)
    rows = [list(rng.integers(1, 20, rng.integers(1, 7))) for _ in range(n)]
    return tf.ragged.constant(rows), rng.integers(0, 3, n)


class RaggedMean(keras.layers.Layer):
    def call(self, x):
        return tf.reduce_mean(x, axis=1)


def ragged_model():
    inputs = keras.Input((None,), ragged=True, dtype="int32")
    embedded = keras.layers.Embedding(20, 4)(inputs)
    return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(RaggedMean()(embedded)))


@RAGGED
@JIT
def test_ragged_inputs_split_along_their_rows_or_refused_under_xla(jit):
    x, y = ragged_data()

    def data():
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(16)

    if not jit:
        plain, ga, _, tol = fit_both(
            ragged_model,
            4,
            dict(x=data(), epochs=2),
            dict(loss="sparse_categorical_crossentropy"),
            "adam",
        )
        assert_equivalent(plain, ga, tol)
        return
    model = GradientAccumulationModel.from_model(ragged_model(), gradient_accumulation_steps=4)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", jit_compile=True)
    with pytest.raises(ValueError, match="tf.RaggedTensor.*jit_compile=False"):
        model.fit(data(), epochs=1, verbose=0)


# ------------------------------------------------------------- train_step overrides


class OwnStep(GradientAccumulationModel):
    """Overrides train_step without calling super(): accumulation would be bypassed."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x, y, self(x, training=True))
        grads = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        return {"loss": loss}


class WrappingStep(GradientAccumulationModel):
    def train_step(self, data):
        logs = super().train_step(data)
        return {**logs, "wrapped": 1.0}


def _subclassed(cls, k):
    inputs = keras.Input((8,))
    return cls(
        inputs, keras.layers.Dense(3, activation="softmax")(inputs), gradient_accumulation_steps=k
    )


@JIT
def test_train_step_override_without_super_is_refused(jit):
    x, y, _ = classification_data(n=32)
    model = _subclassed(OwnStep, 4)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", jit_compile=jit)
    before = model.get_weights()
    with pytest.raises(ValueError, match="OwnStep.train_step does not call.*compute_loss"):
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    assert max_abs_diff(before, model.get_weights()) == 0.0  # refused before any update
    # k=1 is plain training anyway; a later k > 1 is refused when it is set.
    plain = _subclassed(OwnStep, 1)
    plain.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", jit_compile=jit)
    plain.fit(x, y, batch_size=16, epochs=1, verbose=0)
    with pytest.raises(ValueError, match="does not call"):
        plain.gradient_accumulation_steps = 2


def test_train_step_override_calling_super_accumulates():
    x, y, _ = classification_data(n=32)
    model = _subclassed(WrappingStep, 4)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    history = model.fit(x, y, batch_size=32, epochs=1, verbose=0).history
    assert history["wrapped"] == [1.0]


# --------------------------------------------------------------- logged values


@JIT
@pytest.mark.parametrize("sample_weights", [False, True], ids=["plain", "weighted"])
def test_unreduced_compiled_loss_logs_what_plain_keras_logs(sample_weights, jit):
    x, y, sw = classification_data(n=70)
    fit_kwargs = dict(x=x, y=y, batch_size=16, epochs=2)
    if sample_weights:
        fit_kwargs["sample_weight"] = sw
    # No regularizer: plain Keras cannot add a scalar to an unreduced loss vector.
    plain, ga, hist, tol = fit_both(
        lambda: dense_classifier(regularized=False),
        4,
        fit_kwargs,
        dict(loss=keras.losses.SparseCategoricalCrossentropy(reduction=None)),
        "sgd_small",
        jit,
    )
    assert_equivalent(plain, ga, tol)
    np.testing.assert_allclose(hist[0]["loss"], hist[1]["loss"], rtol=1e-5)


@JIT
def test_unreduced_losses_of_two_outputs_log_like_plain_keras(jit):
    rng = np.random.default_rng(2)
    n = 70
    x = {
        "a": rng.normal(size=(n, 4)).astype("float32"),
        "b": rng.normal(size=(n, 3)).astype("float32"),
    }
    y = {"cls": rng.integers(0, 2, n), "reg": rng.normal(size=(n, 1)).astype("float32")}
    from test_accumulation import dict_io_model

    plain, ga, hist, tol = fit_both(
        dict_io_model,
        4,
        dict(x=x, y=y, batch_size=16, epochs=2),
        dict(
            loss={
                "cls": keras.losses.SparseCategoricalCrossentropy(reduction=None),
                "reg": keras.losses.MeanSquaredError(reduction=None),
            },
            loss_weights={"cls": 1.0, "reg": 0.5},
        ),
        "sgd_small",
        jit,
    )
    assert_equivalent(plain, ga, tol)
    for key in ("loss", "cls_loss", "reg_loss"):
        np.testing.assert_allclose(hist[0][key], hist[1][key], rtol=1e-5, err_msg=key)


class MeanOfBatchAccuracies(keras.metrics.Metric):
    """Averages one value per update_state call: not a sum over samples."""

    def __init__(self, name="batch_mean_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.calls = self.add_variable(shape=(), initializer="zeros", name="calls")

    def update_state(self, y_true, y_pred, sample_weight=None):
        hits = ops.cast(ops.equal(ops.argmax(y_pred, -1), ops.cast(y_true, "int64")), "float32")
        self.total.assign_add(ops.mean(hits))
        self.calls.assign_add(1.0)

    def result(self):
        return self.total / ops.maximum(self.calls, 1.0)


@JIT
def test_every_metric_sees_the_whole_batch_once_per_step(jit):
    x, y, sw = classification_data(n=70)
    plain, ga = clone_pair(dense_classifier, 4)
    histories = []
    for model in (plain, ga):  # metric objects of its own for each model
        model.compile(
            optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
            loss="sparse_categorical_crossentropy",
            metrics=[MeanOfBatchAccuracies(), "accuracy"],
            weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="weighted_acc")],
            jit_compile=jit,
        )
        fit = model.fit(x, y, sample_weight=sw, batch_size=16, epochs=2, shuffle=False, verbose=0)
        histories.append(fit.history)
    assert_equivalent(plain, ga, 1e-5)
    assert set(histories[0]) == set(histories[1])
    assert {"batch_mean_accuracy", "accuracy", "weighted_acc"} <= set(histories[0])
    for key in histories[0]:
        np.testing.assert_allclose(histories[0][key], histories[1][key], rtol=1e-6, err_msg=key)


# ------------------------------------------------------------------ Keras check


def test_self_check_fails_loudly_on_a_keras_that_reduces_differently(monkeypatch):
    keras_adapter.self_check()  # this Keras passes
    original = keras_adapter._loss_lib.reduce_values

    def changed(values, sample_weight=None, reduction="sum_over_batch_size"):
        # e.g. a Keras that divides a mean by the batch size plus one
        value = original(values, sample_weight, reduction)
        return value * 0.9 if reduction == "sum_over_batch_size" else value

    monkeypatch.setattr(keras_adapter._loss_lib, "reduce_values", changed)
    monkeypatch.setattr(keras_adapter, "_SELF_CHECKED", False)
    model = GradientAccumulationModel.from_model(dense_classifier(), gradient_accumulation_steps=2)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    x, y, _ = classification_data(n=8)
    before = model.get_weights()
    # The installed Keras is the tested one: the message blames tfx-accum, not the user's Keras,
    # and says what was compared.
    with pytest.raises(RuntimeError) as raised:
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    message = str(raised.value)
    assert message.startswith(f"tfx-accum: Keras {keras.__version__} computes mean_squared_error")
    assert "not be exact" in message and "micro-batches of 2 and 5" in message
    assert "outside any tf.distribute strategy" in message and "\n" not in message
    assert "tfx-accum fault" in message and "pip install" not in message
    assert max_abs_diff(before, model.get_weights()) == 0.0
    # A Keras outside the tested range is told which one to install.
    monkeypatch.setattr(keras, "__version__", "3.99.0")
    with pytest.raises(RuntimeError, match=r"Keras 3\.99\.0 .*pip install 'keras>=3\.8,<3\.16'"):
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)


# ------------------------------------------------------------- one trace, every k


def test_one_traced_step_serves_every_k_and_batch_size():
    """Without XLA, k is read from a variable: changing it (and the batch) never retraces."""
    x, y, _ = classification_data(n=128)
    model, counter = counted_model(1)
    keras.utils.set_random_seed(0)
    plain = keras.Model(model.inputs, model.outputs)  # shares the layers: for its weights
    reference = keras.models.clone_model(plain)
    reference.set_weights(plain.get_weights())
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    reference.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    for k, batch in [(1, 16), (4, 64), (2, 32), (8, 64), (3, 50)]:
        model.gradient_accumulation_steps = k
        passes = float(counter.passes)
        # tf.data batches have an unknown batch dimension (as the Tuner's are); numpy
        # arrays that divide evenly get a static one, which costs one more trace.
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)
        model.fit(data, epochs=1, verbose=0)
        reference.fit(data, epochs=1, verbose=0)
        steps = -(-128 // batch)
        last = 128 - (steps - 1) * batch
        assert float(counter.passes) - passes == (steps - 1) * k + min(k, last), k
        # Same weights as plain training on the same batches, whatever k was.
        trained = [[np.asarray(v) for v in m.trainable_weights] for m in (reference, model)]
        assert max_abs_diff(*trained) < 1e-5, k
    assert model.train_step_trace_count == 1
    assert model.get_config()["gradient_accumulation_steps"] == 3


def test_under_xla_a_new_k_retraces_the_step():
    x, y, _ = classification_data(n=64)
    model, counter = counted_model(2)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", jit_compile=True)
    model.fit(x, y, batch_size=64, epochs=1, verbose=0)
    traces = model.train_step_trace_count
    assert float(counter.passes) == 2
    model.fit(x, y, batch_size=64, epochs=1, verbose=0)
    assert model.train_step_trace_count == traces  # same k: the compiled step is reused
    model.set_accumulation_steps(4)
    model.fit(x, y, batch_size=64, epochs=1, verbose=0)
    assert model.train_step_trace_count == traces + 1
    assert float(counter.passes) == 2 + 2 + 4
