"""The accumulation step of :class:`GradientAccumulationModel` on the PyTorch backend.

Keras's torch trainer runs ``train_step(data)`` eagerly (``jit_compile=True`` wraps it in
``torch.compile``): one forward pass, ``loss.backward()``, ``optimizer.apply``. This step
keeps that contract and replaces the single backward pass of the whole batch with:

1. the batch's ``n`` rows cut into ``min(n, k)`` micro-batches whose sizes differ by at
   most one row, long ones first (``micro_batch_sizes``: the same cut as on JAX);
2. per micro-batch, a forward pass and ``torch.autograd.grad`` of its exactly weighted
   *share* of the whole batch's loss (the model's own ``compute_loss`` in its collecting
   mode: ``loss_split``, the split every backend shares), added into float32 accumulators;
   the micro-batch's graph is freed before the next forward pass, so one micro-batch's
   activations are alive at a time. Masked and sample-weight-averaged losses divide by the
   whole batch's sums, from a forward-only pass (``torch.no_grad``, inference mode) over
   the micro-batches first;
3. weight regularizers differentiated once, the optimizer applied once, and the loss
   tracker, the per-output losses and every compiled metric updated once with the whole
   batch's predictions (their Keras masks included, as plain Keras's torch step gives its
   metrics).

Non-trainable state (BatchNormalization's moving statistics, dropout's seed) advances
micro-batch by micro-batch, as on the other backends. Nothing else survives between steps,
so ``iterations``, learning-rate schedules and callbacks count updates.
"""

from __future__ import annotations

from typing import Any

import keras
import torch
from keras import ops, tree

from tfx_accum.components.accumulation import keras_adapter as adapter
from tfx_accum.components.accumulation import loss_split
from tfx_accum.components.accumulation.micro_batch_sizes import micro_batch_cuts

__all__ = ["train_step"]


def _rows(structure: Any) -> int:
    leaf = next(t for t in tree.flatten(structure) if t is not None)
    return int(leaf.shape[0])


def _cut(structure: Any, start: int, size: int) -> Any:
    """Rows ``start .. start + size`` of every tensor in ``structure`` (views)."""
    return tree.map_structure(lambda t: None if t is None else t[start : start + size], structure)


def _micro_batch(x, y, sample_weight, start: int, size: int) -> tuple:
    """One micro-batch of the batch: views of the inputs and targets, and a copy of the
    sample weights. Keras's ``Loss.__call__`` on torch multiplies the sample weights by a
    mask in place (``apply_mask``: ``sample_weight *= float_mask``, Keras 3.8 to 3.15), so
    each loss evaluation needs weights of its own; the batch's stay as given (for the
    metrics, and for the next micro-batch)."""
    xj, yj = _cut((x, y), start, size)
    swj = tree.map_structure(
        lambda t: None if t is None else t[start : start + size].clone(), sample_weight
    )
    return xj, yj, swj


def train_step(model: Any, data: Any, plain_step) -> dict:
    """``TorchTrainer.train_step`` with exact accumulation over ``model``'s ``k`` micro-batches.

    ``plain_step(data)`` is Keras's own step (the model's ``super().train_step``), used where
    accumulation does not apply (``k = 1``, no trainable weights).
    """
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    k = model._steps_value
    if k == 1 or not model.trainable_weights:
        return plain_step(data)
    model._refuse_stateful_rnn(k)
    model._warn_if_batch_normalization()
    n = _rows(x)
    cuts = micro_batch_cuts(n, k)
    model._find_inexact_cases(_cut(x, *cuts[0]))  # once per model: one micro-batch's pass
    with adapter.recording_activity_losses(model) as activity_kinds:
        try:
            logs = _accumulate(model, cuts, n, x, y, sample_weight, activity_kinds)
        finally:
            model._step = None
    model._warn_inexact_cases()
    return logs


def _accumulate(model, cuts, n, x, y, sw, activity_kinds) -> dict:
    from tfx_accum.components.accumulation.model import _Step

    trainable = model.trainable_weights
    parameters = [v.value for v in trainable]
    samples = ops.convert_to_tensor(float(n), "float32")
    step = _Step(samples, _global_totals(model, cuts, x, y, sw))
    step.static_n = n
    step.activity_kinds = activity_kinds
    model._step = step
    # Metrics are updated once per step with the whole batch's predictions (any metric then
    # equals plain Keras's); they are kept only where a metric needs them.
    keep_predictions = adapter.has_compiled_metrics(model) or model._overrides("compute_metrics")
    accumulated: list[Any] = [None] * len(parameters)
    loss_sum, outputs_sum, predictions = None, None, []
    metric_weights, uses_super = [], True
    for start, size in cuts:
        xj, yj, swj = _micro_batch(x, y, sw, start, size)
        y_pred = model._forward(xj)
        share = ops.convert_to_tensor(size / n, "float32")
        objective, logged = model._micro_batch_share(step, share, xj, yj, y_pred, swj)
        logged = logged.detach()
        grads = torch.autograd.grad(
            model.optimizer.scale_loss(objective), parameters, allow_unused=True
        )
        _add(accumulated, grads)
        per_output = (
            torch.stack([ops.convert_to_tensor(v, "float32").detach() for v in step.per_output])
            if step.per_output
            else torch.zeros([0], dtype=torch.float32, device=logged.device)
        )
        loss_sum = logged if loss_sum is None else loss_sum + logged
        outputs_sum = per_output if outputs_sum is None else outputs_sum + per_output
        if keep_predictions:
            predictions.append(_detached(y_pred))
            structure = y_pred
        metric_weights = list(step.per_output_weights)
        uses_super = step.super_called or not model._overrides("compute_loss")

    regularized = [
        (i, v, v.regularizer)
        for i, v in enumerate(trainable)
        if getattr(v, "regularizer", None) is not None
    ]
    if regularized and uses_super:
        # Weight regularizers count once per update.
        reg = sum(ops.cast(ops.sum(r(v)), "float32") for _, v, r in regularized)
        reg_grads = torch.autograd.grad(
            model.optimizer.scale_loss(reg), parameters, allow_unused=True
        )
        _add(accumulated, reg_grads)
        loss_sum = loss_sum + reg.detach()
    gradients = [None if g is None else g.to(p.dtype) for g, p in zip(accumulated, parameters)]
    with torch.no_grad():
        model.optimizer.apply(gradients, trainable)

    model._update_loss_metrics(loss_sum, outputs_sum, metric_weights, n)
    if keep_predictions:
        return model.compute_metrics(x, y, _whole_batch(structure, predictions), sample_weight=sw)
    return model.get_metrics_result()


def _add(accumulated: list[Any], grads) -> None:
    """Adds ``grads`` into the float32 accumulators (a ``None`` gradient adds nothing)."""
    for i, g in enumerate(grads):
        if g is None:
            continue
        g = g.to(torch.float32)
        accumulated[i] = g if accumulated[i] is None else accumulated[i] + g


def _detached(y_pred: Any) -> list[tuple[Any, Any]]:
    """A micro-batch's predictions, flat, without their graph: ``(value, Keras mask)``."""
    parts = []
    for t in tree.flatten(y_pred):
        mask = adapter.keras_mask(t)
        parts.append((t.detach(), None if mask is None else mask.detach()))
    return parts


def _whole_batch(structure: Any, predictions: list[list[tuple[Any, Any]]]) -> Any:
    """The micro-batches' predictions as one batch shaped like ``structure``, their Keras
    masks joined alike."""
    whole = []
    for parts in zip(*predictions):
        joined = torch.cat([value for value, _ in parts])
        if all(mask is not None for _, mask in parts):
            adapter.set_keras_mask(joined, torch.cat([mask for _, mask in parts]))
        whole.append(joined)
    return tree.pack_sequence_as(structure, whole)


def _global_totals(model, cuts, x, y, sw) -> dict[int, dict[int, list[Any]]]:
    """The whole batch's sums that the micro-batches' shares need (masks' valid counts, sums
    of sample weights; ``loss_split.Part.summed``), per output and part.

    What is needed is found from the first micro-batch in inference mode; the sums come from a
    forward-only pass over the micro-batches, before the first backward pass. That nothing is
    needed is remembered per compiled loss and batch layout (a forward pass saved per step).
    """
    layout = _batch_layout(model, x, y, sw)
    known = model.__dict__.get("_torch_no_totals")
    if known is not None and known[0] is layout[0] and known[1:] == layout[1:]:
        return {}

    def summed(start, size):
        xj, yj, swj = _micro_batch(x, y, sw, start, size)
        terms = model._recorded_terms(yj, model._forward(xj, training=False), swj)
        return loss_split.summed(terms)

    with torch.no_grad():
        parts, first = summed(*cuts[0])
        if not parts:
            object.__setattr__(model, "_torch_no_totals", layout)
            return {}
        sums = torch.stack(first)
        for start, size in cuts[1:]:
            sums = sums + torch.stack(summed(start, size)[1])
    return loss_split.totals_of(parts, sums)


def _batch_layout(model, x, y, sw) -> tuple:
    """What decides which losses need whole-batch denominators: the compiled loss (itself,
    not its id, which a new one may reuse), which sample weights are given, and the shapes
    of the inputs and targets past the batch dimension."""
    return (
        model._compile_loss,
        None if sw is None else tuple(t is None for t in tree.flatten(sw)),
        tuple(None if t is None else tuple(t.shape[1:]) for t in tree.flatten((x, y))),
    )
