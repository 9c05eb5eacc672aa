"""The loss matrix: every way a user writes a loss, with every weighting, against plain Keras.

Rows (``STYLES``): a built-in loss; functions returning per-sample values, a scalar mean,
a batch sum; ``keras.losses.Loss`` subclasses whose ``call`` returns per-sample values or a
scalar, and subclasses that override ``__call__`` (scaling ``super().__call__()``, adding
two Keras losses, or with a ``__call__`` of their own), with every ``reduction``; and two
losses whose micro-batch shares cannot add up to the batch's (an RMSE, a square root of
``super().__call__()``).
Columns (``COLUMNS``): no weights, ``sample_weight``, temporal ``sample_weight`` (a sequence
output), temporal ``sample_weight`` with a mask (``Masking``, sequences of 1 to 3 steps),
``class_weight``. Each cell trains ``GradientAccumulationModel`` with ``k`` in {1, 3} on 15
rows in batches of 8 and 7 (micro-batches 3+3+2 and 3+2+2), without XLA (id ``graph``) and
with it (``xla``; JAX runs these), and compares it with plain Keras ``fit`` on the whole
batches from the same initial weights: every weight within 1e-5 and the logged loss equal;
or, for the two inexact losses at ``k=3``, one ``InexactAccumulationWarning`` that names the
loss and the cause; or, where plain ``fit`` fails (reduction None on JAX), an error naming
the loss. At ``k=1`` every cell, the inexact losses included, is plain Keras's training.
``_cells`` says which cells run under XLA and which are in the fast tier;
``python -m bench.loss_matrix`` reports the figures of every cell.

Models are shared where Keras would not retrace: one plain model per loss and data layout
serves every column (reset to the same initial weights), and one accumulating model per
loss, layout and XLA setting serves every column and ``k`` (without XLA one traced step
serves every ``k``).
"""

from __future__ import annotations

import functools
import sys
import warnings

import keras
import numpy as np
import pytest
from equivalence import max_abs_diff
from keras import ops
from test_accumulation import kerass_torch_step_fails

from tfx_accum.components import GradientAccumulationModel
from tfx_accum.components.accumulation import InexactAccumulationWarning

N, BATCH, EPOCHS, STEPS, CLASSES = 15, 8, 2, 3, 3
TOL = 1e-5
REDUCTIONS = ("sum_over_batch_size", "sum", "mean", "mean_with_sample_weight", None)
CLASS_WEIGHT = {0: 0.5, 1: 2.0, 2: 1.0}


# ------------------------------------------------------------------------ the losses


def per_sample_mse(y_true, y_pred):
    return ops.mean(ops.square(y_true - y_pred), axis=-1)


def scalar_mse(y_true, y_pred):
    return ops.mean(ops.square(y_true - y_pred))


def summed_se(y_true, y_pred):
    return ops.sum(ops.square(y_true - y_pred))


def rmse(y_true, y_pred):
    return ops.sqrt(ops.mean(ops.square(y_true - y_pred)))


class PerSampleMSE(keras.losses.Loss):
    """``call`` returns a value per sample (and per time step)."""

    def call(self, y_true, y_pred):
        return per_sample_mse(y_true, y_pred)


class ScalarMSE(keras.losses.Loss):
    """``call`` returns one value for the batch: its own mean."""

    def call(self, y_true, y_pred):
        return scalar_mse(y_true, y_pred)


class ScaledMSE(keras.losses.MeanSquaredError):
    """``__call__`` scales the parent's value."""

    def __call__(self, y_true, y_pred, sample_weight=None):
        return 1.1 * super().__call__(y_true, y_pred, sample_weight)


class TwoLosses(keras.losses.Loss):
    """``__call__`` adds two Keras losses of other reductions: two reductions in one call."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.squared = keras.losses.MeanSquaredError()
        self.entropy = keras.losses.CategoricalCrossentropy(reduction="sum")

    def __call__(self, y_true, y_pred, sample_weight=None):
        return self.squared(y_true, y_pred, sample_weight) + 0.1 * self.entropy(
            y_true, y_pred, sample_weight
        )


class OwnCallMSE(keras.losses.Loss):
    """A ``__call__`` of its own: Keras's reduction is never used."""

    def __call__(self, y_true, y_pred, sample_weight=None):
        values = per_sample_mse(y_true, y_pred)
        if sample_weight is not None:
            values = values * ops.cast(sample_weight, values.dtype)
        return ops.mean(values)


class RootMSE(keras.losses.MeanSquaredError):
    """``__call__`` takes the square root of the parent's value: not a sum of shares."""

    def __call__(self, y_true, y_pred, sample_weight=None):
        return ops.sqrt(super().__call__(y_true, y_pred, sample_weight))


def _tag(reduction) -> str:
    return "none" if reduction is None else reduction


# "mean" is Keras's other name of "sum_over_batch_size" (every reduction helper treats the
# two alike): once, for call; the other rows take the four distinct reductions.
DISTINCT = tuple(r for r in REDUCTIONS if r != "mean")
STYLES = {
    "builtin": lambda: "categorical_crossentropy",
    "fn_per_sample": lambda: per_sample_mse,
    "fn_scalar_mean": lambda: scalar_mse,
    "fn_sum": lambda: summed_se,
    **{
        f"call_{_tag(r)}": functools.partial(PerSampleMSE, reduction=r, name=f"call_{_tag(r)}")
        for r in REDUCTIONS
    },
    **{
        f"scalar_call_{_tag(r)}": functools.partial(
            ScalarMSE, reduction=r, name=f"scalar_call_{_tag(r)}"
        )
        for r in DISTINCT
    },
    **{
        f"dunder_call_{_tag(r)}": functools.partial(
            ScaledMSE, reduction=r, name=f"dunder_call_{_tag(r)}"
        )
        for r in DISTINCT
    },
    "two_losses_dunder_call": lambda: TwoLosses(name="two_losses_dunder_call"),
    "own_dunder_call": lambda: OwnCallMSE(name="own_dunder_call"),
    # Inexact at k > 1, warned.
    "rmse": lambda: rmse,
    "root_dunder_call": lambda: RootMSE(name="root_dunder_call"),
}
# What the warning of each inexact loss says: the name it gives, and the cause.
WARNED = {
    "rmse": ("'rmse'", "neither the mean nor the sum of per-sample values"),
    "root_dunder_call": (
        "'root_dunder_call' (RootMSE)",
        "overrides __call__ with a value that is not proportional",
    ),
}
COLUMNS = ("none", "sample_weight", "temporal", "masked", "class_weight")


# -------------------------------------------------------------------------- the data


def _data():
    rng = np.random.default_rng(45)
    labels = rng.integers(0, CLASSES, (N, STEPS))
    flat_y = np.eye(CLASSES, dtype="float32")[labels[:, 0]]
    sequences = rng.normal(size=(N, STEPS, 4)).astype("float32")
    # Sequences of 1 to STEPS steps, padded with zeros that a Masking layer masks.
    lengths = rng.integers(1, STEPS + 1, N)
    padded = np.where((np.arange(STEPS) < lengths[:, None])[..., None], sequences, 0.0)
    return {
        "flat": (rng.normal(size=(N, 4)).astype("float32"), flat_y),
        "temporal": (sequences, np.eye(CLASSES, dtype="float32")[labels]),
        "masked": (padded.astype("float32"), np.eye(CLASSES, dtype="float32")[labels]),
        "sample_weight": rng.uniform(0.1, 2.0, N).astype("float32"),
        "temporal_weight": rng.uniform(0.1, 2.0, (N, STEPS)).astype("float32"),
    }


DATA = _data()


def _layout(column: str) -> str:
    return column if column in ("temporal", "masked") else "flat"


def _fit_kwargs(column: str) -> dict:
    x, y = DATA[_layout(column)]
    kwargs = dict(x=x, y=y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    if column == "sample_weight":
        kwargs["sample_weight"] = DATA["sample_weight"]
    elif column in ("temporal", "masked"):
        kwargs["sample_weight"] = DATA["temporal_weight"]
    elif column == "class_weight":
        kwargs["class_weight"] = CLASS_WEIGHT
    return kwargs


# ------------------------------------------------------------------------- the models


def _layers(layout: str):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,) if layout == "flat" else (STEPS, 4))
    hidden = keras.layers.Masking(0.0)(inputs) if layout == "masked" else inputs
    return inputs, keras.layers.Dense(CLASSES, activation="softmax")(hidden)


def _compiled(model: keras.Model, style: str, jit: bool) -> keras.Model:
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=STYLES[style](), jit_compile=jit)
    return model


@functools.cache
def _initial(layout: str) -> tuple:
    return tuple(keras.Model(*_layers(layout)).get_weights())


def _train(model: keras.Model, column: str) -> tuple[list[np.ndarray], list[float]]:
    """Trains ``model`` from the layout's initial weights; its weights and logged losses."""
    model.set_weights(list(_initial(_layout(column))))
    if model.optimizer.built:
        model.optimizer.iterations.assign(0)
    history = model.fit(**_fit_kwargs(column)).history
    return model.get_weights(), history["loss"]


@functools.cache
def _plain_model(style: str, layout: str) -> keras.Model:
    # Plain Keras without XLA is the reference of both paths: with and without XLA, plain
    # Keras agrees with itself to float rounding (far below TOL) on these models.
    return _compiled(keras.Model(*_layers(layout)), style, False)


# How plain fit fails where Keras's trainer differentiates only a scalar loss (reduction
# None): JAX's value_and_grad raises TypeError or ValueError, torch's backward() RuntimeError.
ON_TORCH = keras.backend.backend() == "torch"
FIT_FAILS = (TypeError, ValueError, RuntimeError) if ON_TORCH else (TypeError, ValueError)


@functools.cache
def reference(style: str, column: str) -> tuple[list[np.ndarray], list[float]] | Exception:
    """Plain Keras's weights and logged losses, or the error with which plain fit fails
    (Keras's JAX and PyTorch trainers differentiate only a scalar loss: reduction None fails
    there)."""
    try:
        return _train(_plain_model(style, _layout(column)), column)
    except FIT_FAILS as error:
        return error


@functools.cache
def _accumulating(style: str, layout: str, jit: bool) -> GradientAccumulationModel:
    return _compiled(GradientAccumulationModel(*_layers(layout)), style, jit)


# -------------------------------------------------------------------------- the cells


def _cell(style: str, column: str, k: int, jit: bool):
    """Trains the accumulating model of one cell: its weights, logged losses and warnings."""
    # A model of its own where the cell's outcome is once per model: a warning (given once),
    # an error (after a failed fit, Keras's JAX trainer fails the next one otherwise).
    if style in WARNED or isinstance(reference(style, column), Exception):
        model = _compiled(GradientAccumulationModel(*_layers(_layout(column))), style, jit)
    else:
        model = _accumulating(style, _layout(column), jit)
    model.gradient_accumulation_steps = k
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        weights, losses = _train(model, column)
    inexact = [str(w.message) for w in caught if issubclass(w.category, InexactAccumulationWarning)]
    return weights, losses, inexact


def check_cell(style: str, column: str, k: int, jit: bool) -> None:
    expected = reference(style, column)
    if isinstance(expected, Exception):
        # Where plain fit fails, so does the accumulation: at k=1 as Keras does, above with
        # one line naming the loss.
        with pytest.raises(FIT_FAILS) as raised:
            _cell(style, column, k, jit)
        if kerass_torch_step_fails(expected):
            # Keras's own loss failing on torch (two losses in one __call__, each masking
            # the same sample weights in place): the model's step fails with the same error.
            assert kerass_torch_step_fails(raised.value), raised.value
        elif k > 1:
            assert f"loss '{style}'" in str(raised.value) and "reduction=" in str(raised.value)
        return
    weights, losses, inexact = _cell(style, column, k, jit)
    plain_weights, plain_losses = expected
    if style in WARNED and k > 1:
        name, cause = WARNED[style]
        (message,) = inexact
        assert f"loss {name} " in message and cause in message, message
        assert "gradient_accumulation_steps=1" in message and "\n" not in message
        return
    assert not inexact, inexact
    difference = max_abs_diff(plain_weights, weights)
    assert difference <= TOL, f"{style} x {column}, k={k}: max weight difference {difference:.2e}"
    np.testing.assert_allclose(losses, plain_losses, rtol=1e-5, atol=1e-7, err_msg="logged loss")


# Every cell without XLA. Under XLA (and on JAX, which runs the "xla" cells), where the
# split is the same code and what differs is the compiled step (static micro-batches, the
# probe of static shapes), the columns without weights, with a mask and temporal weights,
# and with class weights; and k=1, which is Keras's own step there, in the class_weight
# column. The fast tier: the sample_weight column without XLA and three XLA cells; the rest
# is the slow tier's sweep.
XLA_COLUMNS = ("none", "masked", "class_weight")
FAST_COLUMN = "sample_weight"
FAST_XLA = {("fn_scalar_mean", "masked"), ("dunder_call_none", "masked"), ("fn_sum", "none")}


def _cells():
    for jit in (False, True):
        for style in STYLES:
            for column in XLA_COLUMNS if jit else COLUMNS:
                for k in (3, 1) if not jit or column == "class_weight" else (3,):
                    if jit:
                        fast = k == 3 and (style, column) in FAST_XLA
                    else:
                        fast = column == FAST_COLUMN
                    yield pytest.param(
                        style,
                        column,
                        k,
                        jit,
                        id=f"{style}-{column}-k{k}-{'xla' if jit else 'graph'}",
                        marks=() if fast else (pytest.mark.e2e,),
                    )


@pytest.mark.parametrize("style, column, k, jit", list(_cells()))
def test_loss_matrix(style, column, k, jit):
    check_cell(style, column, k, jit)


# ------------------------------------------------------------------------- the probe


def centred(y_true, y_pred):
    """Per-sample values that depend on the batch: each sample against the batch's mean."""
    return ops.mean(ops.square(y_pred - ops.mean(y_pred, axis=0)), axis=-1)


class SummedSE(keras.losses.Loss):
    def call(self, y_true, y_pred):
        return summed_se(y_true, y_pred)


class ShiftedMSE(keras.losses.MeanSquaredError):
    """``__call__`` adds a constant: counted once per micro-batch, not once per batch."""

    def __call__(self, y_true, y_pred, sample_weight=None):
        return super().__call__(y_true, y_pred, sample_weight) + 1.0


def _traced(tensor) -> bool:
    if keras.backend.backend() == "jax":
        import jax

        return isinstance(tensor, jax.core.Tracer)
    import tensorflow as tf

    return not tf.executing_eagerly()


class OnlyTraced(keras.losses.Loss):
    """A scalar mean that fails on concrete values (the probe's random rows), not in a step."""

    def call(self, y_true, y_pred):
        if not _traced(y_pred):
            raise ValueError("only in a traced step")
        return scalar_mse(y_true, y_pred)


@pytest.mark.parametrize(
    "loss, weighted, scales, output_scale, problem",
    [
        (keras.losses.MeanSquaredError(), True, ("mean",), "mean", None),
        (keras.losses.MeanSquaredError(reduction="sum"), False, ("mean",), "mean", None),
        (ScalarMSE(), True, ("mean",), "mean", None),
        (SummedSE(), True, ("sum",), "mean", None),
        (OwnCallMSE(), True, (), "mean", None),
        (ScaledMSE(reduction=None), True, ("mean",), "mean", None),
        (RootMSE(), True, None, None, "NOT_LINEAR"),
        (ShiftedMSE(), False, None, None, "NOT_LINEAR"),
        (keras.losses.Dice(), False, None, None, "NEITHER_MEAN_NOR_SUM"),
        (keras.losses.Circle(), False, None, None, "COUPLED_VALUES"),
    ],
    ids=[
        "per_sample",
        "per_sample_sum",
        "scalar_mean",
        "scalar_sum",
        "own_call",
        "scaled_unreduced",
        "root",
        "shifted",
        "dice",
        "circle",
    ],
)
def test_the_probe_tells_how_a_loss_splits(loss, weighted, scales, output_scale, problem):
    from tfx_accum.components.accumulation import inexact_cases

    integer = isinstance(loss, keras.losses.Circle)
    y_true = keras.KerasTensor((None,) if integer else (None, 3), "int32" if integer else "float32")
    y_pred = keras.KerasTensor((None, 3), "float32")
    weights = keras.KerasTensor((None,), "float32") if weighted else None
    plan = inexact_cases.plan_loss(loss, y_true, y_pred, weights)
    assert plan.probed, plan.error
    if problem is None:
        assert plan.problem is None, plan.problem
        assert (plan.scales, plan.output_scale) == (scales, output_scale)
    else:
        assert plan.problem == getattr(inexact_cases, problem)


@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="PyTorch runs every step eagerly: no traced step to tell from the probe's rows",
)
def test_a_scalar_loss_the_probe_cannot_evaluate_is_named_and_split_as_a_mean():
    expected = reference("fn_scalar_mean", "sample_weight")  # the same loss, which probes
    model = GradientAccumulationModel(*_layers("flat"), gradient_accumulation_steps=3)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=OnlyTraced(name="only_traced"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        weights, losses = _train(model, "sample_weight")
    (message,) = [str(w.message) for w in caught if w.category is InexactAccumulationWarning]
    assert "loss 'only_traced' (OnlyTraced) returns one value" in message
    assert "could not be evaluated on random rows" in message and "only in a traced step" in message
    assert max_abs_diff(expected[0], weights) <= TOL  # it is a mean: the split is exact


def test_masked_mean_denominator_is_kerass_own():
    """Keras 3.8 to 3.12 divide a masked mean by valid + epsilon, Keras 3.15 by valid: the
    split reads which from Keras's own apply_mask."""
    from keras.src.losses import loss as keras_loss  # the helper the split mirrors

    from tfx_accum.components.accumulation.keras_adapter import masked_mean_epsilon

    # One valid entry: 1 + epsilon is not 1 in float32 (2 + epsilon would be 2).
    mask = ops.convert_to_tensor(np.array([1, 0, 0, 0, 0], "float32"))
    weights = keras_loss.apply_mask(None, mask, "float32", "sum_over_batch_size")
    expected = np.float32(5.0) / (np.float32(1.0) + np.float32(masked_mean_epsilon()))
    assert np.asarray(weights)[0] == expected


@pytest.mark.skipif(
    keras.backend.backend() in ("jax", "torch"),
    reason="plain fit on JAX and PyTorch differentiates a scalar only",
)
@pytest.mark.parametrize("k", [3, 1])
def test_unreduced_and_reduced_outputs_add_up_as_keras_adds_them(k):
    """Keras adds the outputs' losses with ``+``: a scalar next to unreduced values is
    broadcast to each of their elements, and its gradient counted once per element."""
    x, y = DATA["temporal"]
    targets = {"steps": y, "last": y[:, -1]}
    weights = {"steps": DATA["temporal_weight"], "last": DATA["sample_weight"]}
    trained = []
    for cls in (keras.Model, GradientAccumulationModel):
        keras.utils.set_random_seed(0)
        inputs = keras.Input((STEPS, 4))
        steps = keras.layers.Dense(CLASSES, activation="softmax", name="steps")(inputs)
        last = keras.layers.Dense(CLASSES, activation="softmax", name="last")(
            keras.layers.Flatten()(inputs)
        )
        model = cls(inputs, {"steps": steps, "last": last})
        if isinstance(model, GradientAccumulationModel):
            model.gradient_accumulation_steps = k
        model.compile(
            optimizer=keras.optimizers.SGD(0.05),
            loss={"steps": PerSampleMSE(reduction=None), "last": ScalarMSE(reduction="sum")},
            loss_weights={"steps": 0.7, "last": 1.3},
        )
        history = model.fit(
            x, targets, sample_weight=weights, batch_size=BATCH, epochs=EPOCHS, shuffle=False,
            verbose=0,
        ).history  # fmt: skip
        trained.append((model.get_weights(), history))
    (plain, plain_history), (ours, history) = trained
    assert max_abs_diff(plain, ours) <= TOL
    assert set(history) == set(plain_history) == {"loss", "steps_loss", "last_loss"}
    for key in history:
        np.testing.assert_allclose(history[key], plain_history[key], rtol=1e-5, err_msg=key)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TensorFlow's XLA loops")
@pytest.mark.e2e
@pytest.mark.parametrize(
    "style", ["fn_scalar_mean", "fn_sum", "scalar_call_none", "two_losses_dunder_call"]
)
def test_xla_loops_as_on_a_gpu(style, monkeypatch):
    """On a GPU or TPU, XLA runs equal micro-batches in loops (on the CPU, one after
    another): the same cells with the loops forced, the masked column (the mask's and the
    weights' whole-batch sums come from the forward-only pass's loops)."""
    from tfx_accum.components.accumulation import model as accumulation

    monkeypatch.setattr(accumulation, "_xla_on_cpu", lambda: False)
    monkeypatch.setattr(
        sys.modules[__name__], "_accumulating", _accumulating.__wrapped__
    )  # a model traced with the loops, not one the other cells traced inline
    check_cell(style, "masked", 3, True)
