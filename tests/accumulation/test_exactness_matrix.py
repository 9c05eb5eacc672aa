"""The exactness matrix: every loss pattern Keras can express, with and without XLA.

Each case trains a plain ``keras.Model`` on the whole batch and a GradientAccumulationModel
on the same batches (no shuffling) and asserts equal weights, optimizer slots and update
counts; or it asserts the documented warning. The rows are the loss patterns Keras offers.
"""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
from equivalence import classification_data, max_abs_diff, optimizer_state
from keras import ops
from test_accumulation import JIT, OPTIMIZERS, assert_equivalent, fit_both

from tfx_accum.components import GradientAccumulationModel

# 203 samples at batch 32: six full batches and a last one of 11 (micro-batches 2,3,3,3).
N, BATCH, K = 203, 32, 4


def regression_data(n: int = N, seed: int = 3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 2)) + rng.normal(size=(n, 2)) * 0.1).astype("float32")
    sample_weight = rng.uniform(0.1, 2.0, n).astype("float32")
    return x, y, sample_weight


def dense_regressor(activity: bool = False, regularized: bool = False) -> keras.Model:
    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(
        16,
        activation="tanh",
        activity_regularizer=keras.regularizers.L2(1e-3) if activity else None,
        kernel_regularizer=keras.regularizers.L2(1e-2) if regularized else None,
    )(inputs)
    return keras.Model(inputs, keras.layers.Dense(2)(hidden))


def fit_and_compare(build, fit_kwargs, compile_kwargs, optimizer, jit, **ga_kwargs):
    plain, ga, hist, tol = fit_both(
        build, K, fit_kwargs, compile_kwargs, optimizer, jit, **ga_kwargs
    )
    assert_equivalent(plain, ga, tol)
    return plain, ga, hist


# ----------------------------------------------------------------- loss reductions


@JIT
@pytest.mark.parametrize("reduction", ["sum", "mean_with_sample_weight", "sum_over_batch_size"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_every_loss_reduction_with_sample_weights(reduction, optimizer, jit):
    x, y, sw = regression_data()
    if reduction == "sum" and optimizer == "sgd":
        optimizer = "sgd_small"  # a sum is ~64x larger than a mean per step
    _, _, hist = fit_and_compare(
        dense_regressor,
        dict(x=x, y=y, sample_weight=sw, batch_size=BATCH, epochs=3),
        dict(loss=keras.losses.MeanSquaredError(reduction=reduction)),
        optimizer,
        jit,
    )
    np.testing.assert_allclose(hist[0]["loss"], hist[1]["loss"], rtol=1e-5)


@JIT
def test_sum_reduction_crossentropy_with_class_weights(jit):
    x, y, _ = classification_data(n=N)

    def build():
        inputs = keras.Input((8,))
        return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(inputs))

    _, _, hist = fit_and_compare(
        build,
        dict(x=x, y=y, batch_size=BATCH, epochs=2, class_weight={0: 0.5, 1: 2.0, 2: 1.0}),
        dict(loss=keras.losses.SparseCategoricalCrossentropy(reduction="sum")),
        "momentum",
        jit,
    )
    np.testing.assert_allclose(hist[0]["loss"], hist[1]["loss"], rtol=1e-5)


class UnreducedLossPlain(keras.Model):
    """reduction=None losses handed to a compute_loss override that reduces them itself."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        per_sample = keras.losses.MeanSquaredError(reduction=None)(y, y_pred)
        return ops.mean(per_sample * 2.0)


class UnreducedLossGA(GradientAccumulationModel):
    compute_loss = UnreducedLossPlain.compute_loss


@JIT
def test_unreduced_loss_returned_to_a_custom_compute_loss(jit):
    x, y, _ = regression_data()

    def layers():
        inputs = keras.Input((8,))
        return inputs, keras.layers.Dense(2)(keras.layers.Dense(16, activation="tanh")(inputs))

    keras.utils.set_random_seed(0)
    plain = UnreducedLossPlain(*layers())
    keras.utils.set_random_seed(0)
    ga = UnreducedLossGA(*layers(), gradient_accumulation_steps=K, compute_loss_reduction="mean")
    ga.set_weights(plain.get_weights())
    for model in (plain, ga):
        model.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=jit)
        model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    assert_equivalent(plain, ga, 1e-5)


# ------------------------------------------------------------ losses added in call()


class MeanKL(keras.layers.Layer):
    """The VAE pattern: add_loss of a mean over the batch."""

    def call(self, h):
        self.add_loss(0.1 * ops.mean(ops.sum(ops.square(h), axis=-1)))
        return h


class SumPenalty(keras.layers.Layer):
    def call(self, h):
        self.add_loss(0.01 * ops.sum(ops.square(h)))
        return h


class WeightPenalty(keras.layers.Layer):
    """A penalty that does not depend on the batch: on the layer's own weight."""

    def build(self, shape):
        self.scale = self.add_weight(shape=(shape[-1],), initializer="ones")

    def call(self, h):
        self.add_loss(0.5 * ops.sum(ops.square(self.scale - 2.0)))
        return h * self.scale


def _with(layer_class):
    def build():
        inputs = keras.Input((8,))
        hidden = layer_class()(keras.layers.Dense(16, activation="tanh")(inputs))
        return keras.Model(inputs, keras.layers.Dense(2)(hidden))

    return build


@JIT
@pytest.mark.parametrize(
    "layer_class,reduction",
    [(MeanKL, "mean"), (SumPenalty, "sum"), (WeightPenalty, "mean")],
    ids=["vae-mean-kl", "sum-penalty", "batch-independent"],
)
def test_add_loss_with_declared_reduction(layer_class, reduction, jit):
    x, y, sw = regression_data()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a declared reduction gives no warning
        _, _, hist = fit_and_compare(
            _with(layer_class),
            dict(x=x, y=y, sample_weight=sw, batch_size=BATCH, epochs=2),
            dict(loss="mse"),
            "momentum",
            jit,
            add_loss_reduction=reduction,
        )
    np.testing.assert_allclose(hist[0]["loss"], hist[1]["loss"], rtol=1e-5)


def test_add_loss_without_declared_reduction_warns_once_and_means():
    x, y, _ = regression_data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit_and_compare(
            _with(MeanKL),
            dict(x=x, y=y, batch_size=BATCH, epochs=2),
            dict(loss="mse"),
            "sgd",
            False,
        )
    messages = [str(w.message) for w in caught if "add_loss" in str(w.message)]
    assert len(messages) == 1 and "add_loss_reduction='sum'" in messages[0]


@JIT
def test_activity_regularizer_is_a_sum_over_the_batch(jit):
    x, y, sw = regression_data()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # known to be a sum: no warning
        _, _, hist = fit_and_compare(
            lambda: dense_regressor(activity=True),
            dict(x=x, y=y, sample_weight=sw, batch_size=BATCH, epochs=2),
            dict(loss="mse"),
            "adam",
            jit,
        )
    np.testing.assert_allclose(hist[0]["loss"], hist[1]["loss"], rtol=1e-5)


# ---------------------------------------------------------------- several outputs


def masked_and_plain_outputs() -> keras.Model:
    tokens = keras.Input((7,), dtype="int32", name="tokens")
    embedded = keras.layers.Embedding(20, 6, mask_zero=True)(tokens)
    hidden = keras.layers.Dense(8, activation="tanh")(embedded)
    tags = keras.layers.Dense(5, activation="softmax", name="tags")(hidden)
    pooled = keras.layers.GlobalAveragePooling1D()(hidden)
    label = keras.layers.Dense(3, activation="softmax", name="label")(pooled)
    return keras.Model(tokens, {"tags": tags, "label": label})


def sequence_data(n: int = N, seed: int = 1):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 8, n)
    lengths[:40] = 1  # very uneven valid counts across micro-batches
    x = rng.integers(1, 20, (n, 7))
    x[np.arange(7)[None, :] >= lengths[:, None]] = 0
    return x, {"tags": rng.integers(0, 5, (n, 7)), "label": rng.integers(0, 3, n)}


@JIT
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_masked_and_plain_outputs_each_with_their_own_denominator(optimizer, jit):
    x, y = sequence_data()
    _, _, hist = fit_and_compare(
        masked_and_plain_outputs,
        dict(x=x, y=y, batch_size=BATCH, epochs=2),
        dict(
            loss={
                "tags": "sparse_categorical_crossentropy",
                "label": "sparse_categorical_crossentropy",
            },
            loss_weights={"tags": 1.0, "label": 0.3},
            # A masked output's metric: with its mask on TensorFlow, without on JAX (as
            # each backend's plain Keras gives it).
            metrics={"tags": ["accuracy"], "label": ["accuracy"]},
        ),
        optimizer,
        jit,
    )
    # The history's loss, per-output losses and metrics are the whole batch's, as plain
    # Keras logs them.
    assert sorted(hist[0]) == sorted(hist[1])
    for key in hist[0]:
        np.testing.assert_allclose(hist[0][key], hist[1][key], rtol=1e-5, err_msg=key)


@JIT
def test_per_output_losses_in_history_with_an_uneven_last_batch(jit):
    rng = np.random.default_rng(2)
    x = {
        "a": rng.normal(size=(N, 4)).astype("float32"),
        "b": rng.normal(size=(N, 3)).astype("float32"),
    }
    y = {"cls": rng.integers(0, 2, N), "reg": rng.normal(size=(N, 1)).astype("float32")}
    from test_accumulation import dict_io_model

    _, _, hist = fit_and_compare(
        dict_io_model,
        dict(x=x, y=y, batch_size=BATCH, epochs=2),
        dict(loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"}),
        "momentum",
        jit,
    )
    for key in ("loss", "cls_loss", "reg_loss"):
        np.testing.assert_allclose(hist[0][key], hist[1][key], rtol=1e-5, err_msg=key)


# ------------------------------------------------- compute_loss / compute_metrics overrides


def _regularized_layers():
    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(
        16, activation="tanh", kernel_regularizer=keras.regularizers.L2(0.05)
    )(inputs)
    return inputs, keras.layers.Dense(2)(hidden)


class ExtraLossPlain(keras.Model):
    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(x, y, y_pred, sample_weight, training=training)
        return loss + 0.1 * ops.mean(ops.abs(y_pred))


class ExtraLossGA(GradientAccumulationModel):
    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(x, y, y_pred, sample_weight, training=training)
        return loss + 0.1 * ops.mean(ops.abs(y_pred))


@JIT
def test_compute_loss_override_calling_super_counts_regularizers_once(jit):
    x, y, sw = regression_data()
    keras.utils.set_random_seed(0)
    plain = ExtraLossPlain(*_regularized_layers())
    keras.utils.set_random_seed(0)
    ga = ExtraLossGA(*_regularized_layers(), gradient_accumulation_steps=K)
    ga.compute_loss_reduction = "mean"
    ga.set_weights(plain.get_weights())
    histories = []
    for model in (plain, ga):
        model.compile(
            optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse", jit_compile=jit
        )
        histories.append(
            model.fit(x, y, sample_weight=sw, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
        )
    assert_equivalent(plain, ga, 1e-5)
    np.testing.assert_allclose(
        histories[0].history["loss"], histories[1].history["loss"], rtol=1e-5
    )


class CountingMetricsGA(GradientAccumulationModel):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = keras.metrics.Sum(name="seen")

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        results = super().compute_metrics(x, y, y_pred, sample_weight)
        self.seen.update_state(ops.cast(ops.shape(y_pred)[0], "float32"))
        return {**results, "seen": self.seen.result()}


@JIT
def test_compute_metrics_override_is_called_for_every_sample(jit):
    x, y, _ = classification_data(n=N)
    inputs = keras.Input((8,))
    model = CountingMetricsGA(
        inputs, keras.layers.Dense(3, activation="softmax")(inputs), gradient_accumulation_steps=K
    )
    model.compile(
        optimizer="sgd",
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        jit_compile=jit,
    )
    history = model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0).history
    # Keras resets metrics each epoch: every sample of the epoch passed through the override.
    assert history["seen"] == [N, N]
    assert "accuracy" in history and "loss" in history


# ------------------------------------------------------------ XLA and sparse gradients


def embedding_classifier() -> keras.Model:
    tokens = keras.Input((6,), dtype="int32")
    embedded = keras.layers.Embedding(30, 8)(tokens)
    pooled = keras.layers.GlobalAveragePooling1D()(embedded)
    return keras.Model(tokens, keras.layers.Dense(3, activation="softmax")(pooled))


@JIT
@pytest.mark.parametrize("n", [192, N], ids=["even", "uneven"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_embedding_sparse_gradients(n, optimizer, jit):
    rng = np.random.default_rng(4)
    x = rng.integers(0, 10, (n, 6))  # few distinct ids: many duplicate indices per batch
    y = rng.integers(0, 3, n)
    fit_and_compare(
        embedding_classifier,
        dict(x=x, y=y, batch_size=BATCH, epochs=2),
        dict(loss="sparse_categorical_crossentropy"),
        optimizer,
        jit,
    )


# ----------------------------------------------------------- subclassing, BatchNorm


class SubclassedPlain(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(16, activation="tanh")
        self.out = keras.layers.Dense(3, activation="softmax")

    def call(self, x):
        return self.out(self.hidden(x))


@JIT
def test_subclass_after_a_functional_instance_exists(jit):
    inputs = keras.Input((8,))
    GradientAccumulationModel(inputs, keras.layers.Dense(2)(inputs), gradient_accumulation_steps=2)

    class MyModel(GradientAccumulationModel):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.hidden = keras.layers.Dense(16, activation="tanh")
            self.out = keras.layers.Dense(3, activation="softmax")

        def call(self, x):
            return self.out(self.hidden(x))

    x, y, sw = classification_data(n=N)
    keras.utils.set_random_seed(0)
    plain = SubclassedPlain()
    plain(x[:1])
    keras.utils.set_random_seed(0)
    ga = MyModel(gradient_accumulation_steps=K)
    ga(x[:1])
    ga.set_weights(plain.get_weights())
    make_optimizer, tol = OPTIMIZERS["adam"]
    for model in (plain, ga):
        model.compile(
            optimizer=make_optimizer(), loss="sparse_categorical_crossentropy", jit_compile=jit
        )
        model.fit(x, y, sample_weight=sw, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    assert_equivalent(plain, ga, tol)
    # And functional instances still work after the subclass exists.
    again = GradientAccumulationModel(
        inputs, keras.layers.Dense(2)(inputs), gradient_accumulation_steps=2
    )
    assert isinstance(again, GradientAccumulationModel) and again.inputs


@JIT
def test_frozen_batch_normalization_is_exact_and_silent(jit):
    def build():
        inputs = keras.Input((8,))
        norm = keras.layers.BatchNormalization()
        norm.trainable = False
        hidden = norm(keras.layers.Dense(16, activation="tanh")(inputs))
        return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(hidden))

    x, y, _ = classification_data(n=N)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        fit_and_compare(
            build,
            dict(x=x, y=y, batch_size=BATCH, epochs=2),
            dict(loss="sparse_categorical_crossentropy"),
            "momentum",
            jit,
        )


def test_reductions_are_validated_and_saved(tmp_path):
    inputs = keras.Input((2,))
    outputs = keras.layers.Dense(1)(inputs)
    with pytest.raises(ValueError, match="add_loss_reduction.*'max'"):
        GradientAccumulationModel(inputs, outputs, add_loss_reduction="max")
    model = GradientAccumulationModel(
        inputs, outputs, gradient_accumulation_steps=3, add_loss_reduction="sum"
    )
    model.compile(optimizer="sgd", loss="mse")
    model.save(tmp_path / "m.keras")
    restored = keras.saving.load_model(tmp_path / "m.keras")
    assert isinstance(restored, GradientAccumulationModel)
    assert (restored.gradient_accumulation_steps, restored.add_loss_reduction) == (3, "sum")
    assert max_abs_diff(optimizer_state(model), optimizer_state(restored)) == 0.0
