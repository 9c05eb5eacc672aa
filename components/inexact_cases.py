"""What makes gradient accumulation inexact in a given model, found by probing it (#30).

Accumulation is exact when the whole batch's loss is the sum of its micro-batches' shares
and the forward pass changes no state. Two kinds of models break that without any error,
so the model probes for them once, when its train step is traced, and warns by name:

- **layers that assign state in their training forward pass** (``SpectralNormalization``'s
  power iteration and kernel, a custom running mean): they would assign it once per
  micro-batch instead of once per step. Found by tracing the forward pass once more inside
  ``keras.StatelessScope``, which records every variable assignment instead of making it
  (Keras's own mechanism for stateless calls; tracing runs nothing). BatchNormalization has
  a warning of its own; a SeedGenerator's state (dropout) advancing is not an inexactness.
- **losses that couple the samples of a batch** (``Dice``, ``Tversky`` with ``axis=None``,
  ``Circle``, an RMSE ``sqrt(mean(...))``, in-batch contrastive losses): their value on a
  batch is not the mean (or, per sample, the concatenation) of their values on its parts.
  Found by evaluating the loss's unreduced ``call`` eagerly on 4 random rows shaped like the
  batch, and on its two halves: a per-sample loss gives the same values both ways.

A probe that cannot run on a model (an input it cannot build) finds nothing.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

_ROWS = 4  # the loss probe's batch; its halves are 2 + 2 rows


def state_assigning_layers(model: keras.Model, x: Any, forward) -> list[str]:
    """Names of the layers of ``model`` whose training forward pass on ``x`` assigns variables.

    ``x`` is the (symbolic) batch the train step was traced with; ``forward(x)`` runs the
    model in training mode. The outermost layer owning each assigned variable is named.
    """
    try:
        specs = tf.nest.map_structure(tf.type_spec_from_value, x)
    except (TypeError, ValueError):
        return []
    assigned: list[Any] = []

    def probe(inputs):
        with keras.StatelessScope() as scope:
            forward(inputs)
        assigned.extend(v for v in model.variables if scope.get_current_value(v) is not None)
        return tf.constant(0)

    try:
        with tf.init_scope():  # a throwaway graph of its own: traced, never run
            tf.function(probe, autograph=False).get_concrete_function(specs)
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


def _random_like(value: Any, rows: int, rng: np.random.Generator) -> np.ndarray:
    shape = [rows] + [d if d is not None else 2 for d in list(value.shape)[1:]]
    dtype = tf.as_dtype(value.dtype)
    if dtype.is_integer or dtype.is_bool:
        return rng.integers(0, 2, size=shape).astype(dtype.as_numpy_dtype)
    return rng.uniform(0.05, 0.95, size=shape).astype(dtype.as_numpy_dtype)


def couples_samples(loss: Any, y_true: Any, y_pred: Any) -> bool:
    """Whether ``loss``'s value on a batch depends on how the batch is cut (see module doc).

    ``loss`` is a compiled ``keras.losses.Loss`` (a function is wrapped in one by Keras);
    ``y_true`` and ``y_pred`` give the shapes and dtypes of one output's batch.
    """
    call = getattr(loss, "call", None)
    if call is None or not hasattr(y_true, "shape") or not hasattr(y_pred, "shape"):
        return False
    if len(y_true.shape) == 0 or len(y_pred.shape) == 0:
        return False
    rng = np.random.default_rng(0)
    with tf.init_scope():
        try:
            true, pred = _random_like(y_true, _ROWS, rng), _random_like(y_pred, _ROWS, rng)
            half = _ROWS // 2
            whole = np.asarray(call(tf.constant(true), tf.constant(pred)), dtype=np.float64)
            parts = [
                np.asarray(call(tf.constant(true[s]), tf.constant(pred[s])), dtype=np.float64)
                for s in (slice(0, half), slice(half, _ROWS))
            ]
        except Exception:  # noqa: BLE001 - a loss the random rows do not fit: no finding
            return False
    if any(part.ndim != whole.ndim for part in parts):
        return True  # a value per sample on some rows, one value on others
    if whole.ndim == 0:  # one value for the batch: a mean over samples, or coupled
        together = np.mean(parts)
    else:
        together = np.concatenate(parts)
        if together.shape != whole.shape:
            return True
    return not np.allclose(whole, together, rtol=1e-4, atol=1e-6, equal_nan=True)


def loss_name(loss: Any) -> str:
    """The name a user gave the loss: its ``name``, or its function's."""
    function = getattr(loss, "fn", None)
    return getattr(function, "__name__", None) or getattr(loss, "name", type(loss).__name__)
