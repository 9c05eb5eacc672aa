"""What makes gradient accumulation inexact in a given model, found by probing it.

Accumulation is exact when the whole batch's loss is the sum of its micro-batches' shares
and the forward pass changes no state. Two kinds of models break that without any error,
so the model probes for them once, when its train step is traced, and warns by name:

- **layers that assign state in their training forward pass** (``SpectralNormalization``'s
  power iteration and kernel, a custom running mean): they would assign it once per
  micro-batch instead of once per step. Found by tracing the forward pass once more inside
  ``keras.StatelessScope``, which records every variable assignment instead of making it
  (Keras's own mechanism for stateless calls; tracing runs nothing). BatchNormalization has
  a warning of its own; a SeedGenerator's state (dropout) advancing is not an inexactness.
- **losses whose micro-batch shares do not add up to the whole batch's loss**: losses that
  couple the samples of a batch (``Dice``, ``Tversky`` with ``axis=None``, ``Circle``, an
  RMSE ``sqrt(mean(...))``, in-batch contrastive losses), whose value on a batch is neither
  the mean nor the sum (nor, per sample, the concatenation) of their values on its parts,
  and ``__call__`` overrides that are not proportional to the loss Keras reduces. Found by
  :func:`plan_loss`: the loss, through its own ``__call__``
  (``loss_split.split``), on 5 random rows shaped like the batch and on 2 + 3 of them. The
  same probe tells a loss whose ``call`` returns one value for the batch as a mean over the
  samples from one returning a sum (``loss_split.LossPlan``), which both split exactly, and
  checks that the shares of the 2 + 3 rows add up to Keras's loss on the 5.

A probe that cannot run on a model (an input it cannot build) finds nothing.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops, tree

from tfx_accum.components.accumulation import keras_adapter as adapter
from tfx_accum.components.accumulation import loss_split

_ROWS = 5  # the loss probe's batch, cut into 2 + 3 rows


def state_assigning_layers(
    model: keras.Model, x: Any, forward, values: list[tuple[Any, Any]] | None = None
) -> list[str]:
    """Names of the layers of ``model`` whose training forward pass on ``x`` assigns variables.

    ``x`` is the (symbolic) batch the train step was traced with; ``forward(x)`` runs the
    model in training mode. ``values`` maps variables to the values the step sees (JAX's
    stateless trainer: the variables themselves hold none during ``fit``). The outermost
    layer owning each assigned variable is named.
    """
    assigned: list[Any] = []
    given = dict((id(v), value) for v, value in values or [])

    def probe(inputs):
        with keras.StatelessScope(state_mapping=values) as scope:
            forward(inputs)
        for v in model.variables:
            current = scope.get_current_value(v)
            if current is not None and current is not given.get(id(v)):
                assigned.append(v)
        return ops.zeros(())

    try:
        _trace_only(probe, x)
    except Exception:  # noqa: BLE001 - a diagnostic: a model it cannot trace is left alone
        return []
    assigned_ids = {id(v) for v in assigned if not v.name.endswith("seed_generator_state")}
    names: list[str] = []
    for layer in model._flatten_layers(include_self=False):  # outermost first
        owned = {id(v) for v in layer.variables} & assigned_ids
        if not owned:
            continue
        assigned_ids -= owned
        if not isinstance(layer, keras.layers.BatchNormalization):
            names.append(layer.name)
    return names


def _trace_only(function, x: Any) -> None:
    """Traces ``function(x)`` into a throwaway graph (TensorFlow) or jaxpr (JAX); runs nothing.

    PyTorch has no tracing apart from running: ``function`` runs eagerly without gradients
    (its ``StatelessScope`` records assignments instead of making them).
    """
    if keras.backend.backend() == "torch":
        import torch

        with torch.no_grad():
            function(x)
        return
    if keras.backend.backend() == "jax":
        import jax

        specs = tree.map_structure(lambda t: jax.ShapeDtypeStruct(t.shape, t.dtype), x)
        jax.eval_shape(function, specs)
        return
    import tensorflow as tf

    specs = tf.nest.map_structure(tf.type_spec_from_value, x)
    with tf.init_scope():  # a graph of its own, whatever the caller's
        tf.function(function, autograph=False).get_concrete_function(specs)


def _random_like(value: Any, rows: int, rng: np.random.Generator, like: Any = None) -> np.ndarray:
    """Random rows shaped like ``value``; a dimension it does not know is taken from ``like``
    (the predictions: their leading dimensions, for targets, weights and masks), else 2."""
    dims = list(value.shape)[1:]
    known = list(getattr(like, "shape", ()))[: len(dims) + 1]
    if len(known) != len(dims) + 1:
        known = [None] * (len(dims) + 1)
    shape = [rows] + [d if d is not None else (k or 2) for d, k in zip(dims, known[1:])]
    dtype = np.dtype(keras.backend.standardize_dtype(value.dtype))
    if dtype.kind in "iub":
        # Every value in [0, classes) present (sparse labels of the predictions' classes,
        # both values of a mask), in random places.
        classes = 2
        if dtype.kind != "b" and like is not None and len(like.shape) == len(dims) + 2:
            classes = max(2, like.shape[-1] or 2)
        size = int(np.prod(shape))
        return (rng.permutation(size) % classes).reshape(shape).astype(dtype)
    return rng.uniform(0.05, 0.95, size=shape).astype(dtype)


# Why a loss's shares do not add up to the whole batch's loss, and the way out: the
# warning names the loss, then says both.
NEITHER_MEAN_NOR_SUM = (
    "returns one value for the batch that is neither the mean nor the sum of per-sample "
    "values, so it couples the samples of a batch (on 5 random rows it is neither the mean "
    "nor the sum of its values on 2 + 3 rows; e.g. Dice, Tversky, an RMSE)",
    "return per-sample values from the loss (Keras then weights and averages them)",
)
COUPLED_VALUES = (
    "computes each sample's value from the other samples of its batch, so it couples the "
    "samples of a batch (its values on 5 random rows differ from those on 2 + 3 rows; e.g. "
    "Circle, in-batch contrastive losses)",
    "use a loss of per-sample values",
)
NOT_LINEAR = (
    "overrides __call__ with a value that is not proportional to the loss Keras reduces "
    "(on 5 random rows it is not the sum of its shares on 2 + 3 rows; e.g. a square root "
    "of super().__call__(), or a term added to it)",
    "transform the per-sample values in call() instead",
)
CHANGING = (
    "reduces its values in other parts on 5 random rows than on 2 + 3 rows",
    "reduce the same way on every batch",
)
UNCHECKED = (
    "returns one value for the batch and could not be evaluated on random rows shaped like "
    "the batch ({error}), so it is split as a mean over the samples, which is exact only if "
    "it is one",
    "return per-sample values from the loss (Keras then weights and averages them)",
)

_SPLIT = (slice(0, 2), slice(2, _ROWS))


def plan_loss(
    loss: Any, y_true: Any, y_pred: Any, sample_weight: Any = None
) -> loss_split.LossPlan:
    """How ``loss`` splits into micro-batch shares, found on random rows (see module doc).

    ``y_true``, ``y_pred`` and ``sample_weight`` give the shapes and dtypes of one output's
    batch (and whether it has weights and a Keras mask). Runs eagerly, in a thread of its
    own (``keras_adapter.run_isolated``). A loss the random rows do not fit gives a plan
    with ``probed=False``.
    """
    if not hasattr(y_true, "shape") or not hasattr(y_pred, "shape"):
        return loss_split.LossPlan(probed=False)
    if len(y_true.shape) == 0 or len(y_pred.shape) == 0:
        return loss_split.LossPlan(probed=False)
    rng = np.random.default_rng(0)
    pred = _random_like(y_pred, _ROWS, rng)
    true = _random_like(y_true, _ROWS, rng, like=pred)
    weights = None
    if sample_weight is not None:
        weights = _random_like(sample_weight, _ROWS, rng, like=pred) * 2
    mask = adapter.keras_mask(y_pred)
    valid = None if mask is None else _random_like(mask, _ROWS, rng, like=pred).astype(bool)

    def piece(rows: slice):
        p = ops.convert_to_tensor(pred[rows])
        if valid is not None:
            adapter.set_keras_mask(p, ops.convert_to_tensor(valid[rows]))
        return ops.convert_to_tensor(true[rows]), p, None if weights is None else weights[rows]

    def probe() -> loss_split.LossPlan:
        return _probe(loss, piece(slice(0, _ROWS)), [piece(s) for s in _SPLIT])

    try:
        return adapter.run_isolated(probe)
    except Exception as error:  # noqa: BLE001 - a loss the random rows do not fit
        first = str(error).strip().splitlines()[0][:100] if str(error).strip() else ""
        return loss_split.LossPlan(probed=False, error=f"{type(error).__name__}: {first}")


def _probe(loss: Any, whole: tuple, halves: list[tuple]) -> loss_split.LossPlan:
    Plan = loss_split.LossPlan
    on_whole = loss_split.split(loss, *whole)
    on_halves = [loss_split.split(loss, *half) for half in halves]
    kinds = [tuple(p.kind for p in term.parts) for term in [on_whole, *on_halves]]
    if len(set(kinds)) != 1:
        return Plan(problem=CHANGING)
    scales = []
    for index, part in enumerate(on_whole.parts):
        pieces = [term.parts[index].values for term in on_halves]
        if part.kind == loss_split.SCALAR:
            scale = _scale_of(part.values, pieces)
            if scale is None:
                return Plan(problem=NEITHER_MEAN_NOR_SUM)
            scales.append(scale)
        else:
            scales.append(loss_split.MEAN_OF_SAMPLES)
            if not _same_rows(part.values, pieces):
                return Plan(problem=COUPLED_VALUES)
    output_scale = loss_split.MEAN_OF_SAMPLES
    if not on_whole.parts:  # a __call__ of its own: its value is all there is
        values = [term.value for term in on_halves]
        if len(np.shape(on_whole.value)) == 0:
            output_scale = _scale_of(on_whole.value, values)
            if output_scale is None:
                return Plan(problem=NEITHER_MEAN_NOR_SUM)
        elif not _same_rows(on_whole.value, values):
            return Plan(problem=COUPLED_VALUES)
    plan = Plan(scales=tuple(scales), output_scale=output_scale)
    try:
        shares, _, _ = loss_split.recombined(loss, halves, plan)
    except ValueError:
        return Plan(problem=CHANGING)
    keras_value = float(np.sum(loss_split.host_float64(on_whole.value)))
    if not np.isclose(shares, keras_value, rtol=1e-4, atol=1e-6):
        return Plan(problem=NOT_LINEAR if on_whole.parts else NEITHER_MEAN_NOR_SUM)
    return plan


def _scale_of(whole: Any, pieces: list[Any]) -> str | None:
    """Whether one value per batch is the mean of per-sample values (weighted by rows) or
    their sum, from its value on the whole rows and on the pieces; None if neither."""
    value = float(loss_split.host_float64(whole))
    parts = [float(loss_split.host_float64(p)) for p in pieces]
    rows = [s.stop - s.start for s in _SPLIT]
    mean = sum(r * p for r, p in zip(rows, parts)) / sum(rows)
    if np.isclose(value, mean, rtol=1e-4, atol=1e-6, equal_nan=True):
        return loss_split.MEAN_OF_SAMPLES
    if np.isclose(value, sum(parts), rtol=1e-4, atol=1e-6, equal_nan=True):
        return loss_split.SUM_OF_SAMPLES
    return None


def _same_rows(whole: Any, pieces: list[Any]) -> bool:
    """Whether per-sample values on the whole rows are those on the pieces, concatenated."""
    whole = loss_split.host_float64(whole)
    pieces = [loss_split.host_float64(p) for p in pieces]
    if any(p.ndim != whole.ndim for p in pieces) or whole.ndim == 0:
        return False
    together = np.concatenate(pieces)
    if together.shape != whole.shape:
        return False
    return bool(np.allclose(whole, together, rtol=1e-4, atol=1e-6, equal_nan=True))


def _users_class(loss: Any) -> bool:
    return type(loss).__module__.split(".")[0] != "keras"


def loss_name(loss: Any) -> str:
    """The name a user gave the loss: a function's (which Keras wraps), else its ``name``."""
    function = None if _users_class(loss) else getattr(loss, "fn", None)
    return getattr(function, "__name__", None) or getattr(loss, "name", type(loss).__name__)


def describe_loss(loss: Any) -> str:
    """The loss as a warning names it: ``'name'``, and its class when the user wrote the
    class (``'scaled_mse' (ScaledMSE)``)."""
    name = repr(loss_name(loss))
    return f"{name} ({type(loss).__name__})" if _users_class(loss) else name


class InexactAccumulationWarning(UserWarning):
    """The model trains, but not exactly as the whole batch would: a loss whose micro-batch
    shares do not add up to the whole batch's, a layer that assigns state in its training
    forward pass, BatchNormalization that trains. The message names the loss or layers,
    the cause and the way out."""
