"""Equivalence of GradientAccumulationModel with plain training on the whole batch."""

import contextlib
import warnings

import keras
import numpy as np
import pytest
from equivalence import (
    classification_data,
    clone_pair,
    dense_classifier,
    max_abs_diff,
    optimizer_state,
)

from tfx_accum.components import GradientAccumulationModel

try:
    import tensorflow as tf
except ModuleNotFoundError:  # tfx-accum[jax] alone (scripts/newest_stack.sh): no tf.data either
    tf = None

OPTIMIZERS = {
    "sgd": (lambda: keras.optimizers.SGD(0.1), 1e-5),
    "sgd_small": (lambda: keras.optimizers.SGD(0.002), 1e-5),
    "momentum": (lambda: keras.optimizers.SGD(0.1, momentum=0.9), 1e-5),
    "adam": (lambda: keras.optimizers.Adam(0.01), 1e-4),
}


# TensorFlow features (tf.distribute, SavedModel export), skipped on the JAX backend.
TF_ONLY = pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="a TensorFlow feature")

# Every equivalence test runs with and without XLA (Keras turns XLA on by default on a GPU).
# On PyTorch, jit_compile=True is torch.compile, minutes of compiling per case on a CPU:
# its stage (scripts/torch_stack.sh) deselects "xla" and runs test_torch_backend.py's.
JIT = pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])


def skip_torch_compile(jit_compile: bool) -> None:
    """Skips a ``jit_compile=True`` case on PyTorch (see ``JIT``)."""
    if jit_compile and keras.backend.backend() == "torch":
        pytest.skip("torch.compile: minutes per case on a CPU; test_torch_backend.py has its own")


def fit_both(build, steps, fit_kwargs, compile_kwargs, optimizer="sgd", jit=False, **ga_kwargs):
    make_optimizer, tol = OPTIMIZERS[optimizer]
    plain, ga = clone_pair(build, steps, **ga_kwargs)
    histories = []
    compile_kwargs = {"jit_compile": jit, **compile_kwargs}
    for model in (plain, ga):
        model.compile(optimizer=make_optimizer(), **compile_kwargs)
        try:
            histories.append(model.fit(shuffle=False, verbose=0, **fit_kwargs).history)
        except RuntimeError as error:
            if model is ga or not kerass_torch_step_fails(error):
                raise
            pytest.skip(f"no reference: plain Keras {keras.__version__} fails on this model")
    return plain, ga, histories, tol


def kerass_torch_step_fails(error: RuntimeError) -> bool:
    """Whether ``error`` is Keras's own torch step failing in its backward pass: a layer
    that assigns in place what the backward pass needs (a masked GlobalAveragePooling1D
    in Keras 3.8 to 3.12, a stateful LSTM in 3.15.1; torch 2.13)."""
    return keras.backend.backend() == "torch" and "modified by an inplace operation" in str(error)


def assert_equivalent(plain, ga, tol):
    assert max_abs_diff(plain.get_weights(), ga.get_weights()) < tol
    assert max_abs_diff(optimizer_state(plain), optimizer_state(ga)) < tol
    assert int(plain.optimizer.iterations) == int(ga.optimizer.iterations)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@JIT
def test_uneven_batches_sample_weights_and_regularizer(optimizer, jit):
    # 100 samples at batch 32: the last batch has 4 samples, split into 4 micro-batches of 1;
    # batch 32 with k=3 gives micro-batches of 10, 11, 11.
    x, y, sw = classification_data()
    for steps in (3, 4):
        plain, ga, hist, tol = fit_both(
            dense_classifier,
            steps,
            dict(x=x, y=y, sample_weight=sw, batch_size=32, epochs=2),
            dict(loss="sparse_categorical_crossentropy", metrics=["accuracy"]),
            optimizer,
            jit,
        )
        assert_equivalent(plain, ga, tol)
        # Logged loss and metrics are those of the whole batch, not divided by k.
        np.testing.assert_allclose(hist[0]["loss"], hist[1]["loss"], rtol=1e-5)
        np.testing.assert_allclose(hist[0]["accuracy"], hist[1]["accuracy"], rtol=1e-6)


@JIT
def test_batch_smaller_than_steps_and_class_weights(jit):
    x, y, _ = classification_data(n=21)
    plain, ga, _, tol = fit_both(
        dense_classifier,
        8,
        dict(x=x, y=y, batch_size=6, epochs=2, class_weight={0: 0.5, 1: 2.0, 2: 1.0}),
        dict(loss="sparse_categorical_crossentropy"),
        "momentum",
        jit,
    )
    assert_equivalent(plain, ga, tol)


def test_steps_one_is_plain_training():
    x, y, sw = classification_data()
    plain, ga, hist, _ = fit_both(
        dense_classifier,
        1,
        dict(x=x, y=y, sample_weight=sw, batch_size=32, epochs=1),
        dict(loss="sparse_categorical_crossentropy"),
        "adam",
    )
    assert max_abs_diff(plain.get_weights(), ga.get_weights()) == 0.0
    assert hist[0]["loss"] == hist[1]["loss"]


def masked_sequence_model():
    tokens = keras.Input((7,), dtype="int32")
    h = keras.layers.Embedding(20, 6, mask_zero=True)(tokens)
    h = keras.layers.Dense(8, activation="tanh")(h)
    return keras.Model(tokens, keras.layers.Dense(5, activation="softmax")(h))


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@JIT
def test_masked_sequence_loss_uses_whole_batch_valid_count(optimizer, jit):
    rng = np.random.default_rng(1)
    n, t = 30, 7
    lengths = rng.integers(1, t + 1, n)
    lengths[:8] = 1  # very uneven valid counts across micro-batches
    x = rng.integers(1, 20, (n, t))
    x[np.arange(t)[None, :] >= lengths[:, None]] = 0
    y = rng.integers(0, 5, (n, t))
    plain, ga, hist, tol = fit_both(
        masked_sequence_model,
        4,
        dict(x=x, y=y, batch_size=16, epochs=2),
        dict(loss="sparse_categorical_crossentropy"),
        optimizer,
        jit,
    )
    assert_equivalent(plain, ga, tol)
    np.testing.assert_allclose(hist[0]["loss"], hist[1]["loss"], rtol=1e-5)


def dict_io_model():
    a = keras.Input((4,), name="a")
    b = keras.Input((3,), name="b")
    h = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()([a, b]))
    cls = keras.layers.Dense(2, activation="softmax", name="cls")(h)
    reg = keras.layers.Dense(1, name="reg")(h)
    return keras.Model({"a": a, "b": b}, {"cls": cls, "reg": reg})


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
@JIT
def test_dict_inputs_and_multiple_outputs(optimizer, jit):
    rng = np.random.default_rng(2)
    n = 50
    x = {
        "a": rng.normal(size=(n, 4)).astype("float32"),
        "b": rng.normal(size=(n, 3)).astype("float32"),
    }
    y = {"cls": rng.integers(0, 2, n), "reg": rng.normal(size=(n, 1)).astype("float32")}
    batches = dict(x=x, y=y, batch_size=16)  # the same batches as the dataset, without TensorFlow
    if tf is not None:
        batches = dict(x=tf.data.Dataset.from_tensor_slices((x, y)).batch(16))
    plain, ga, hist, tol = fit_both(
        dict_io_model,
        4,
        dict(epochs=2, **batches),
        dict(
            loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"},
            loss_weights={"cls": 1.0, "reg": 0.5},
        ),
        optimizer,
        jit,
    )
    assert_equivalent(plain, ga, tol)
    np.testing.assert_allclose(hist[0]["loss"], hist[1]["loss"], rtol=1e-5)


@JIT
def test_schedule_iterations_and_callbacks_count_updates(jit):
    x, y, _ = classification_data()

    class CountBatches(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.batches = 0

        def on_train_batch_end(self, batch, logs=None):
            self.batches += 1

    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.9)
    counter = CountBatches()
    model = GradientAccumulationModel.from_model(dense_classifier(), gradient_accumulation_steps=4)
    model.compile(
        optimizer=keras.optimizers.SGD(schedule),
        loss="sparse_categorical_crossentropy",
        jit_compile=jit,
    )
    model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0, callbacks=[counter])
    # 4 batches per epoch (32, 32, 32, 4): 8 updates, whatever k is.
    assert int(model.optimizer.iterations) == 8
    assert counter.batches == 8
    np.testing.assert_allclose(float(model.optimizer.learning_rate), 0.1 * 0.9**8, rtol=1e-5)


@pytest.mark.parametrize("jit_compile,steps_per_execution", [(True, 1), (False, 3), (True, 3)])
def test_jit_compile_and_steps_per_execution(jit_compile, steps_per_execution):
    if steps_per_execution > 1 and keras.backend.backend() == "torch":
        pytest.skip("Keras's torch trainer refuses steps_per_execution > 1 (plain fit too)")
    skip_torch_compile(jit_compile)
    x, y, sw = classification_data()
    plain, ga, _, tol = fit_both(
        dense_classifier,
        4,
        dict(x=x, y=y, sample_weight=sw, batch_size=32, epochs=2),
        dict(
            loss="sparse_categorical_crossentropy",
            jit_compile=jit_compile,
            steps_per_execution=steps_per_execution,
        ),
        "adam",
    )
    assert_equivalent(plain, ga, tol)


@contextlib.contextmanager
def dtype_policy(name: str):
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy("float32")


@pytest.fixture
def mixed_precision():
    with dtype_policy("mixed_float16"):
        yield


@JIT
def test_mixed_float16_matches_plain(mixed_precision, jit):
    x, y, sw = classification_data()
    plain, ga, hist, _ = fit_both(
        dense_classifier,
        4,
        dict(x=x, y=y, sample_weight=sw, batch_size=32, epochs=2),
        dict(loss="sparse_categorical_crossentropy"),
        "sgd",
        jit,
    )
    assert isinstance(ga.optimizer, keras.optimizers.LossScaleOptimizer)
    # float16 activations: equal to float16 rounding, not float32 rounding.
    assert max_abs_diff(plain.get_weights(), ga.get_weights()) < 2e-3
    # The inner optimizer counts updates on every Keras version (3.8's wrapper does not).
    updates = [int(m.optimizer.inner_optimizer.iterations) for m in (plain, ga)]
    # On JAX, plain Keras's loss scale skips the first update (its scale starts too high).
    expected = 8 if keras.backend.backend() == "tensorflow" else updates[0]
    assert updates == [expected, expected]


@pytest.fixture
def bfloat16_policy():
    with dtype_policy("bfloat16"):
        yield


@JIT
def test_gradients_add_up_in_float32_when_the_weights_are_bfloat16(bfloat16_policy, jit):
    """16 micro-batches of one row: gradients 256 and 15 x 1. Summed in bfloat16 (8 bits of
    mantissa), 256 + 1 rounds back to 256 every time (w = 1 - 256 / 256 = 0); in float32 the
    sum is 271, which the update applies as 272 in bfloat16, or as 271 where the compiler
    computes bfloat16 in float32 (XLA on a CPU): w = 1 - 272 / 256 or 1 - 271 / 256."""
    inputs = keras.Input((1,))
    outputs = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")(inputs)
    model = GradientAccumulationModel(inputs, outputs, gradient_accumulation_steps=16)
    model.compile(
        optimizer=keras.optimizers.SGD(2.0**-8),
        loss=keras.losses.MeanAbsoluteError(reduction="sum"),  # gradient: x per row
        jit_compile=jit,
    )
    x = np.ones((16, 1), "float32")
    x[0] = 256.0
    model.fit(x, np.full((16, 1), -10.0, "float32"), batch_size=16, verbose=0, shuffle=False)
    (kernel,) = model.get_weights()
    assert keras.backend.standardize_dtype(kernel.dtype) == "bfloat16"
    assert float(kernel.astype("float32")[0, 0]) in (1.0 - 272.0 / 256.0, 1.0 - 271.0 / 256.0)


def test_mixed_float16_overflow_skips_whole_update(mixed_precision):
    x, y, _ = classification_data(n=32)
    y_reg = np.full((32, 1), 1e4, "float32")
    y_reg[-1] = 6e4  # only the last micro-batch overflows in float16

    def build():
        inputs = keras.Input((8,))
        return keras.Model(inputs, keras.layers.Dense(1)(inputs))

    plain, ga = clone_pair(build, 4)
    before = ga.get_weights()
    for model in (plain, ga):
        model.compile(optimizer=keras.optimizers.SGD(1e-9), loss="mse")
        model.optimizer.build(model.trainable_variables)
        scale_before = float(model.optimizer.dynamic_scale)
        model.fit(x, y_reg * 1e3, batch_size=32, epochs=1, verbose=0, shuffle=False)
    # The update was skipped as a whole, and the loss scale went down, as for the big batch.
    assert max_abs_diff(before, ga.get_weights()) == 0.0
    assert max_abs_diff(plain.get_weights(), ga.get_weights()) == 0.0
    assert float(ga.optimizer.dynamic_scale) < scale_before
    assert float(ga.optimizer.dynamic_scale) == float(plain.optimizer.dynamic_scale)


def test_keras_save_load_round_trip_and_export(tmp_path):
    x, y, _ = classification_data()
    model = GradientAccumulationModel.from_model(dense_classifier(), gradient_accumulation_steps=4)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored, GradientAccumulationModel)
    assert restored.gradient_accumulation_steps == 4
    assert restored.get_config()["gradient_accumulation_steps"] == 4
    np.testing.assert_allclose(
        restored.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-6
    )
    # The optimizer state came back too, so training resumes where it stopped.
    assert int(restored.optimizer.iterations) == int(model.optimizer.iterations)
    restored.fit(x, y, batch_size=32, epochs=1, verbose=0)
    if keras.backend.backend() != "tensorflow":
        return  # a SavedModel export from JAX (jax2tf) or PyTorch: not this model's concern

    export_dir = str(tmp_path / "serving")
    model.export(export_dir, verbose=False)
    served = tf.saved_model.load(export_dir)
    np.testing.assert_allclose(served.serve(x).numpy(), model.predict(x, verbose=0), atol=1e-6)


def test_batch_normalization_warns_once():
    x = np.ones((8, 8), "float32")
    y = np.ones((8, 4), "float32")

    def caught_messages(steps):
        inputs = keras.Input((8,))
        h = keras.layers.BatchNormalization()(keras.layers.Dense(4)(inputs))
        model = GradientAccumulationModel(inputs, h, gradient_accumulation_steps=steps)
        model.compile(optimizer="sgd", loss="mse")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.fit(x, y, batch_size=4, epochs=2, verbose=0)
            model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        return [str(w.message) for w in caught if "BatchNormalization" in str(w.message)]

    messages = caught_messages(2)
    assert len(messages) == 1
    assert "LayerNormalization" in messages[0]
    assert caught_messages(1) == []


@pytest.mark.parametrize(
    "value,error",
    [
        (0, ValueError),
        (-2, ValueError),
        (2.5, TypeError),
        ("4", TypeError),
        (True, TypeError),
        (None, TypeError),
    ],
)
def test_bad_accumulation_steps_name_the_argument(value, error):
    inputs = keras.Input((2,))
    with pytest.raises(error, match="gradient_accumulation_steps") as info:
        GradientAccumulationModel(
            inputs, keras.layers.Dense(1)(inputs), gradient_accumulation_steps=value
        )
    assert repr(value) in str(info.value) or str(value) in str(info.value)


def test_clone_model_keeps_the_accumulation_settings_and_trains_the_same():
    """Keras.models.clone_model built the copy with k=1 (Keras passes only inputs,
    outputs and name), so the clone trained on whole batches without a word."""
    x, y, sw = classification_data(n=70)
    keras.utils.set_random_seed(0)
    original = GradientAccumulationModel.from_model(
        dense_classifier(),
        gradient_accumulation_steps=4,
        add_loss_reduction="sum",
        compute_loss_reduction="mean",
    )
    clone = keras.models.clone_model(original)
    assert isinstance(clone, GradientAccumulationModel)
    assert clone.get_config() == original.get_config()  # every constructor argument
    assert clone.gradient_accumulation_steps == 4 and clone.add_loss_reduction == "sum"
    assert clone.compute_loss_reduction == "mean"
    clone.set_weights(original.get_weights())
    for model in (original, clone):
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
        model.fit(x, y, sample_weight=sw, batch_size=32, epochs=2, shuffle=False, verbose=0)
    assert max_abs_diff(original.get_weights(), clone.get_weights()) < 1e-6
    # An explicit k still wins, and a model built outside a clone defaults to 1.
    inputs = keras.Input((8,))
    plain = GradientAccumulationModel(inputs, keras.layers.Dense(3)(inputs))
    assert plain.gradient_accumulation_steps == 1


def test_from_model_wraps_sequential_and_shares_weights():
    seq = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)])
    ga = GradientAccumulationModel.from_model(seq, gradient_accumulation_steps=2)
    assert ga.layers[-1] is seq.layers[-1]
    with pytest.raises(ValueError, match="built functional or Sequential"):
        GradientAccumulationModel.from_model(keras.Sequential([keras.layers.Dense(3)]), 2)
    with pytest.raises(TypeError, match="model"):
        GradientAccumulationModel.from_model("not a model", 2)


@TF_ONLY
@pytest.mark.e2e
def test_mirrored_strategy_two_replicas_is_exact():
    """Under MirroredStrategy (2 logical CPUs, in a subprocess) GA equals one-device training."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    worker = Path(__file__).resolve().parents[1] / "mirrored_worker.py"
    proc = subprocess.run(
        [sys.executable, str(worker)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    refused = results.pop("synchronized_batch_normalization")
    assert refused["error"] is not None and "\n" not in refused["error"], refused
    assert "synchronized=True" in refused["error"] and "'sync_bn'" in refused["error"], refused
    assert "LayerNormalization" in refused["error"] and refused["unchanged"], refused
    for name, result in results.items():
        assert result["replicas"] == 2, name
        assert result["iterations"][0] == result["iterations"][1], (name, result)
        tol = 1e-4 if name.startswith("adam") else 1e-5
        assert result["weights"] < tol, (name, result)
        assert result["slots"] < tol, (name, result)


@TF_ONLY
@pytest.mark.e2e
@pytest.mark.parametrize("replicas", [2, 3])
def test_a_fresh_process_fits_inside_a_mirrored_scope_exactly(replicas):
    """Built, compiled and fit inside the scope, in a process where nothing ran before
    (the Keras self-check once misfired there: Keras scales losses inside a strategy's
    scope). GA equals plain Keras under the same strategy on whole batches, and the large
    batch on one device with an uneven last batch and sample weights, for k = 4, 3 and 1."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    worker = Path(__file__).resolve().parents[1] / "fresh_mirrored_worker.py"
    proc = subprocess.run(
        [sys.executable, str(worker), str(replicas)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "error" not in results, results["error"]
    assert results.pop("replicas") == replicas
    results.pop("plain_mirrored_uneven_vs_one_device")  # Keras's own, for the record
    assert len(results) == 4
    for name, result in results.items():
        assert result["iterations"][0] == result["iterations"][1], (name, result)
        for key in ("weights", "slots", "logs"):
            assert result[key] < 1e-5, (name, key, result)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_static_batch_shapes_use_fixed_micro_batches(jit_compile):
    # drop_remainder=True gives a static batch dimension (as on TPU): k fixed-size slices.
    skip_torch_compile(jit_compile)
    x, y, sw = classification_data(n=96)

    batches = dict(x=x, y=y, sample_weight=sw, batch_size=32)  # without TensorFlow (JAX: static)
    if tf is not None:
        batches = dict(
            x=tf.data.Dataset.from_tensor_slices((x, y, sw)).batch(32, drop_remainder=True)
        )

    plain, ga, _, tol = fit_both(
        dense_classifier,
        4,
        dict(epochs=2, **batches),
        dict(loss="sparse_categorical_crossentropy", jit_compile=jit_compile),
        "adam",
    )
    assert_equivalent(plain, ga, tol)


class _DenseWithRegularizedSpare(keras.layers.Layer):
    """A dense layer with one more weight that only its regularizer reaches."""

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], 3), initializer="glorot_uniform")
        self.spare = self.add_weight(
            shape=(4,), initializer="ones", regularizer=keras.regularizers.L2(0.1)
        )

    def call(self, x):
        return keras.ops.softmax(keras.ops.matmul(x, self.kernel))


@JIT
def test_weight_reached_only_by_its_regularizer_is_updated_too(jit):
    def build():
        inputs = keras.Input((8,))
        return keras.Model(inputs, _DenseWithRegularizedSpare()(inputs))

    x, y, _ = classification_data(n=40)
    plain, ga, _, tol = fit_both(
        build,
        4,
        dict(x=x, y=y, batch_size=16, epochs=1),
        dict(loss="sparse_categorical_crossentropy"),
        "momentum",
        jit,
    )
    assert_equivalent(plain, ga, tol)
    assert not np.allclose(ga.layers[-1].spare.numpy(), 1.0)
