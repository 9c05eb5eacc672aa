"""The accumulation step of :class:`GradientAccumulationModel` on the JAX backend.

Keras's JAX trainer is stateless: ``train_step(state, data)`` gets the variables' values
and returns new ones, inside one ``jax.jit``-compiled function. This step keeps that
contract and replaces the single ``value_and_grad`` of the whole batch with:

1. the batch's ``n`` rows cut into ``min(n, k)`` micro-batches whose sizes differ by at
   most one row (the same cut as TensorFlow's static schedule, ``micro_batches``): the
   ``n mod k`` long ones first, then the short ones. Every size is a Python int (JAX
   compiles one step per batch shape), so each group of equal micro-batches runs in one
   ``jax.lax.scan``: one micro-batch's activations are alive at a time;
2. per micro-batch, ``value_and_grad`` of its exactly weighted *share* of the whole
   batch's loss (the model's own ``compute_loss`` in its collecting mode: the same
   split as on TensorFlow, ``loss_split``), summed
   into float32 accumulators; masked and sample-weight-averaged losses divide by the whole
   batch's denominator, from a forward-only pass over the micro-batches first;
3. weight regularizers differentiated once, the optimizer applied once
   (``optimizer.stateless_apply``), and the loss tracker, the per-output losses and every
   compiled metric updated once with the whole batch's predictions, as plain Keras does.

Non-trainable state (BatchNormalization's moving statistics, dropout's seed) flows from
one micro-batch to the next. Nothing else survives between steps, so ``iterations``,
learning-rate schedules and callbacks count updates.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import keras
from keras import ops, tree

from tfx_accum.components.accumulation import keras_adapter as adapter
from tfx_accum.components.accumulation import loss_split
from tfx_accum.components.accumulation.micro_batch_sizes import micro_batch_groups

__all__ = ["micro_batch_groups", "train_step"]


def _rows(structure: Any) -> int:
    leaf = next(t for t in tree.flatten(structure) if t is not None)
    return int(leaf.shape[0])


def _group(structure: Any, start: int, size: int, count: int) -> Any:
    """Rows ``start .. start + size * count`` as ``count`` stacked micro-batches of ``size``."""

    def cut(t):
        if t is None:
            return None
        t = jnp.asarray(t)
        return t[start : start + size * count].reshape((count, size) + t.shape[1:])

    return tree.map_structure(cut, structure)


def _is_tracing(structure: Any) -> bool:
    return any(isinstance(t, jax.core.Tracer) for t in tree.flatten(structure))


def train_step(model: Any, state: tuple, data: Any, plain_step) -> tuple[dict, tuple]:
    """``JAXTrainer.train_step`` with exact accumulation over ``model``'s ``k`` micro-batches.

    ``plain_step(state, data)`` is Keras's own step (the model's ``super().train_step``),
    used where accumulation does not apply (``k = 1``, no trainable weights).
    """
    trainable, non_trainable, optimizer_values, metrics_values = state
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    k = model._steps_value
    if _is_tracing(x):
        object.__setattr__(model, "_train_step_traces", model.train_step_trace_count + 1)
    object.__setattr__(model, "_traced_static_steps", k)  # k shapes the compiled step
    if k == 1 or not model.trainable_weights:
        return plain_step(state, data)
    model._refuse_stateful_rnn(k)
    model._warn_if_batch_normalization()
    variables = model.trainable_variables + model.non_trainable_variables
    model._find_inexact_cases(x, list(zip(variables, list(trainable) + list(non_trainable))))
    n = _rows(x)
    logs_and_state = _accumulate(
        model, micro_batch_groups(n, k), n, trainable, non_trainable, optimizer_values,
        metrics_values, x, y, sample_weight,
    )  # fmt: skip
    model._warn_inexact_cases()
    return logs_and_state


def _accumulate(
    model, groups, n, trainable, non_trainable, optimizer_values, metrics_values, x, y, sw
):
    from tfx_accum.components.accumulation.model import _Step

    samples = float(n)
    totals = _global_totals(model, groups, trainable, non_trainable, x, y, sw)
    step = _Step(jnp.asarray(samples, "float32"), totals)
    step.static_n = n
    optimizer_mapping = list(zip(model.optimizer.variables, optimizer_values))
    found: dict[str, Any] = {}

    def share_of_loss(trainable_values, non_trainable_values, xj, yj, swj, share):
        """A micro-batch's share of the whole batch's loss, scaled as the optimizer wants."""
        step.share = jnp.asarray(share, "float32")
        step.super_called, step.own_value = False, None
        step.per_output, step.per_output_weights, step.log_delta = [], [], 0.0
        kwargs = {"training": True} if adapter.call_has_training_arg(model) else {}
        with adapter.recording_activity_losses(model) as activity_kinds:
            y_pred, non_trainable_values, losses = model.stateless_call(
                trainable_values, non_trainable_values, xj, return_losses=True, **kwargs
            )
            step.activity_kinds = activity_kinds
            if losses:
                model._losses_override.clear()
                model._losses_override = losses
            step.collecting = True
            model._step = step
            try:
                value, (_, non_trainable_values, _) = model.stateless_compute_loss(
                    trainable_values,
                    non_trainable_values,
                    metrics_values,
                    x=xj,
                    y=yj,
                    y_pred=y_pred,
                    sample_weight=swj,
                    training=True,
                )
            finally:
                step.collecting = False
                model._step = None
                if losses:
                    model._losses_override.clear()
        objective = model._objective(step, value)
        logged = objective + step.log_delta
        with keras.StatelessScope(state_mapping=optimizer_mapping):
            scaled = model.optimizer.scale_loss(objective)
        per_output = (
            jnp.stack([jnp.asarray(v, "float32") for v in step.per_output])
            if step.per_output
            else jnp.zeros([0], "float32")
        )
        found["weights"] = list(step.per_output_weights)
        found["uses_super"] = step.super_called or not model._overrides("compute_loss")
        return scaled, (logged, per_output, y_pred, non_trainable_values)

    gradient_of_share = jax.value_and_grad(share_of_loss, has_aux=True)
    zeros = [jnp.zeros(jnp.shape(v), "float32") for v in trainable]
    carry = (list(non_trainable), zeros, jnp.zeros((), "float32"), None)
    predictions, start = [], 0
    for size, count in groups:
        batch = _group((x, y, sw), start, size, count)
        share = size / samples

        def body(carry, micro_batch, share=share):
            non_trainable_values, accumulated, loss_sum, outputs_sum = carry
            xj, yj, swj = micro_batch
            (_, aux), grads = gradient_of_share(trainable, non_trainable_values, xj, yj, swj, share)
            logged, per_output, y_pred, non_trainable_values = aux
            accumulated = [a + g.astype("float32") for a, g in zip(accumulated, grads)]
            outputs_sum = per_output if outputs_sum is None else outputs_sum + per_output
            return (non_trainable_values, accumulated, loss_sum + logged, outputs_sum), y_pred

        if carry[3] is None:
            # The first micro-batch fixes the per-output vector's length: run it alone.
            first = tree.map_structure(lambda t: None if t is None else t[0], batch)
            carry, pred = body(carry, first)
            predictions.append(tree.map_structure(lambda t: t[None], pred))
            batch = tree.map_structure(lambda t: None if t is None else t[1:], batch)
            count -= 1
            start += size
        if count:
            carry, pred = jax.lax.scan(body, carry, batch)
            predictions.append(pred)
        start += size * count
    non_trainable, accumulated, batch_loss, outputs_sum = carry

    regularized = [
        (i, v.regularizer)
        for i, v in enumerate(model.trainable_variables)
        if getattr(v, "regularizer", None) is not None
    ]
    if regularized and found["uses_super"]:
        # Weight regularizers count once per update.
        def regularization(trainable_values):
            total = sum(
                ops.cast(ops.sum(r(trainable_values[i])), "float32") for i, r in regularized
            )
            with keras.StatelessScope(state_mapping=optimizer_mapping):
                return model.optimizer.scale_loss(total), total

        (_, reg), reg_grads = jax.value_and_grad(regularization, has_aux=True)(list(trainable))
        accumulated = [a + g.astype("float32") for a, g in zip(accumulated, reg_grads)]
        batch_loss = batch_loss + reg
    grads = [a.astype(v.dtype) for a, v in zip(accumulated, trainable)]
    trainable, optimizer_values = model.optimizer.stateless_apply(
        optimizer_values, grads, trainable
    )

    y_pred = _whole_batch(predictions)
    with keras.StatelessScope(
        state_mapping=list(zip(model.metrics_variables, metrics_values))
    ) as scope:
        model._update_loss_metrics(batch_loss, outputs_sum, found["weights"], n)
        logs = model.compute_metrics(x, y, y_pred, sample_weight=sw)
    metrics_values = [
        scope.get_current_value(v) if scope.get_current_value(v) is not None else v.value
        for v in model.metrics_variables
    ]
    return logs, (trainable, non_trainable, optimizer_values, metrics_values)


def _whole_batch(predictions: list[Any]) -> Any:
    """The micro-batches' predictions (stacked per group) as one batch, for the metrics.

    Without Keras masks, as Keras's own JAX step gives its metrics: its ``y_pred`` comes
    out of ``value_and_grad``'s aux, which carries no mask (Keras 3.15.1; on TensorFlow
    the metrics see the mask, and so they do there in this model too).
    """

    def join(*parts):
        return jnp.concatenate([p.reshape((-1,) + p.shape[2:]) for p in parts], axis=0)

    return tree.map_structure(join, *predictions)


def _global_totals(model, groups, trainable, non_trainable, x, y, sw) -> dict[int, dict]:
    """The whole batch's sums that shares need (masks' valid counts, sums of sample weights;
    ``loss_split.Part.summed``), per output and part.

    Which outputs need them is found by tracing the first micro-batch in inference mode
    (abstractly: nothing runs); their sums come from a forward-only pass over the
    micro-batches, before the first backward pass.
    """
    kwargs = {"training": False} if adapter.call_has_training_arg(model) else {}
    layout: list[tuple[int, int, int]] = []

    def summed(xj, yj, swj):
        y_pred, _ = model.stateless_call(trainable, non_trainable, xj, **kwargs)
        return loss_split.summed(model._recorded_terms(yj, y_pred, swj))

    size, _ = groups[0]
    first = tree.map_structure(lambda t: None if t is None else jnp.asarray(t)[:size], (x, y, sw))

    def record_layout(*micro_batch):
        layout.extend(summed(*micro_batch)[0])
        return jnp.zeros(())

    jax.eval_shape(record_layout, *first)
    if not layout:
        return {}

    def body(sums, micro_batch):
        values = summed(*micro_batch)[1]
        return sums + jnp.stack([jnp.asarray(v, "float32") for v in values]), None

    sums, start = jnp.zeros([sum(count for _, _, count in layout)], "float32"), 0
    for size, count in groups:
        sums, _ = jax.lax.scan(body, sums, _group((x, y, sw), start, size, count))
        start += size * count
    return loss_split.totals_of(layout, sums)
