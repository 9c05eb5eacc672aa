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

import contextlib
from typing import Any

import keras
import numpy as np
from keras import ops, tree

_ROWS = 4  # the loss probe's batch; its halves are 2 + 2 rows


def _eager():
    """A context in which ops run now, even inside the traced train step."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.init_scope()
    if backend == "jax":
        import jax

        return jax.ensure_compile_time_eval()
    return contextlib.nullcontext()


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


def _random_like(value: Any, rows: int, rng: np.random.Generator) -> np.ndarray:
    shape = [rows] + [d if d is not None else 2 for d in list(value.shape)[1:]]
    dtype = np.dtype(keras.backend.standardize_dtype(value.dtype))
    if dtype.kind in "iub":
        return rng.integers(0, 2, size=shape).astype(dtype)
    return rng.uniform(0.05, 0.95, size=shape).astype(dtype)


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
    tensor = ops.convert_to_tensor
    with _eager():
        try:
            true, pred = _random_like(y_true, _ROWS, rng), _random_like(y_pred, _ROWS, rng)
            half = _ROWS // 2
            whole = np.asarray(call(tensor(true), tensor(pred)), dtype=np.float64)
            parts = [
                np.asarray(call(tensor(true[s]), tensor(pred[s])), dtype=np.float64)
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
