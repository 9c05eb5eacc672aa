"""A compiled loss split into micro-batch shares that add up to the whole batch's loss.

Keras computes a loss in ``Loss.__call__``: ``call(y_true, y_pred)`` gives values, and
``reduce_weighted_values(values, sample_weight, mask, reduction)`` merges the mask into the
sample weights, multiplies and reduces. The whole batch's loss is then one of:

- per-element values (``call`` returns one value per sample or per element):
  ``sum(values x weights)`` divided by the elements (``"sum_over_batch_size"``, ``"mean"``),
  the valid elements (+ epsilon on Keras < 3.15) under a mask, the sum of the weights
  (``"mean_with_sample_weight"``), or nothing (``"sum"``); ``None`` keeps the weighted
  values;
- one value ``s`` (``call`` returns a scalar: a mean or a sum it took itself): Keras
  broadcasts it over the weights, so the loss is ``s`` without weights, and with them
  ``s x mean(weights)`` (``"sum_over_batch_size"``), ``s x sum(weights)`` (``"sum"``),
  ``s`` (``"mean_with_sample_weight"``) or ``s x weights`` (``None``).

:func:`split` calls the loss through its own ``__call__`` (an override is honoured) with
that reduction recorded (``keras_adapter.recording_reductions``): every reduction the call
makes is a :class:`Part`. In *share* mode each reduction returns, instead of the micro-batch's
own loss, the micro-batch's exact share of the whole batch's: its numerator over the whole
batch's denominator (``Shares.totals``, summed over the micro-batches in a forward-only pass
first) or, for a scalar, its value weighted by the micro-batch's fraction of the samples
(a mean) or by 1 (a sum), times the whole batch's weight factor. Whatever the loss does with
the reduced value (a ``__call__`` that scales it, sums two losses) then acts on the shares,
so the shares add up to the whole batch's loss when that is linear; the probe in
``inexact_cases`` checks it, and tells a scalar mean from a sum (``LossPlan``).

Backend-neutral (``keras.ops`` only): the TensorFlow, JAX and PyTorch steps share it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from keras import ops

from tfx_accum.components.accumulation import keras_adapter as adapter

__all__ = [
    "LossPlan",
    "LossTerm",
    "Part",
    "OutputShare",
    "Shares",
    "compiled_shares",
    "host_float64",
    "output_share",
    "split",
    "summed",
    "totals_of",
]

# Kinds of part (one reduction inside a loss's call path).
SUM = "sum"  # per-element values, reduction "sum": the numerator adds up
COUNT = "count"  # ... "sum_over_batch_size"/"mean": numerator / (samples x elements per sample)
MASKED = "masked"  # ... under a mask: numerator / (whole batch's valid count + Keras's epsilon)
WEIGHTS = "weights"  # ... "mean_with_sample_weight": numerator / whole batch's sum of weights
NONE = "none"  # ... reduction None: the weighted values themselves
SCALAR = "scalar"  # ``call`` returned one value for the batch (see module doc)

# How one value for a batch grows with the batch (the probe finds it; ``LossPlan``).
MEAN_OF_SAMPLES = "mean"
SUM_OF_SAMPLES = "sum"


@dataclasses.dataclass
class Part:
    """One reduction of a loss on a micro-batch, in the pieces the whole batch's is made of.

    ``summed()`` lists what must be summed over the whole batch before any share can be
    formed (``Shares.totals``); ``offset`` is added once to the summed denominator.
    """

    kind: str
    numerator: Any  # sum of the weighted values; SCALAR: the value ``call`` returned
    values: Any = None  # the weighted values (NONE's share; the probe's evidence)
    per_sample: Any = None  # COUNT: loss elements per sample
    denominator: Any = None  # MASKED: valid count; WEIGHTS: sum of weights; SCALAR: below
    weight_sum: Any = None  # SCALAR with weights or a mask: their sum
    weights: Any = None  # SCALAR, reduction None: Keras returns value x these weights
    offset: float = 0.0

    def summed(self) -> list[Any]:
        if self.kind in (MASKED, WEIGHTS):
            return [self.denominator]
        if self.kind == SCALAR and self.weight_sum is not None:
            return [self.weight_sum] + ([] if self.denominator is None else [self.denominator])
        return []


@dataclasses.dataclass
class LossTerm:
    """One output's loss on a micro-batch: what its ``__call__`` returned, and its parts.

    ``value`` is the micro-batch's own loss (record mode) or its share of the whole batch's
    (share mode). ``loss_weight`` is the output's ``loss_weights`` entry; ``loss``,
    and ``y_true``, ``y_pred`` are kept for the warnings and the probe.
    """

    value: Any
    parts: list[Part]
    loss_weight: float | None = None
    loss: Any = None
    y_true: Any = None
    y_pred: Any = None


@dataclasses.dataclass
class LossPlan:
    """What the probe found about one compiled loss (``inexact_cases.plan_loss``).

    ``scales[i]``: whether part ``i``, if a scalar, is a mean or a sum over the samples;
    ``output_scale``: the same for the loss's value when its call path makes no reduction
    of Keras's (a ``__call__`` of its own). ``problem``: why its shares do not add up to the
    whole batch's loss and the way out (a warning names them), or None. ``probed`` is false
    where the probe could not evaluate the loss (``error`` says why): scalars are then taken
    as means.
    """

    scales: tuple[str, ...] = ()
    output_scale: str = MEAN_OF_SAMPLES
    problem: tuple[str, str] | None = None
    probed: bool = True
    error: str = ""

    def scale(self, index: int) -> str:
        return self.scales[index] if index < len(self.scales) else MEAN_OF_SAMPLES


@dataclasses.dataclass
class Shares:
    """What a micro-batch's shares need beyond the micro-batch: the whole batch's sample
    count, the micro-batch's fraction of it, the whole batch's sums of each part's
    ``summed()`` (by part index; see :func:`totals_of`) and the loss's plan."""

    samples: Any
    fraction: Any
    totals: dict[int, list[Any]]
    plan: LossPlan


def split(
    loss: Any, y_true: Any, y_pred: Any, sample_weight: Any = None, shares: Shares | None = None
) -> LossTerm:
    """``loss(y_true, y_pred, sample_weight)`` through the loss's own ``__call__``, in parts.

    Without ``shares`` (record mode) every reduction is Keras's own, so ``value`` is the
    loss Keras computes on this batch. With ``shares`` each reduction returns the
    micro-batch's share of the whole batch's (see the module doc).
    """
    parts: list[Part] = []

    def record(values, sample_weight=None, mask=None, reduction="sum_over_batch_size", dtype=None):
        part = _part(values, sample_weight, mask, reduction, dtype)
        index = len(parts)
        parts.append(part)
        if shares is None:
            return adapter.keras_reduction(values, sample_weight, mask, reduction, dtype)
        return _share(part, shares, shares.totals.get(index), shares.plan.scale(index))

    with adapter.recording_reductions(record):
        value = loss(y_true, y_pred, sample_weight)
    return LossTerm(value, parts, loss=loss, y_true=y_true, y_pred=y_pred)


def _part(values, sample_weight, mask, reduction, dtype) -> Part:
    """The pieces of ``reduce_weighted_values(values, sample_weight, mask, reduction)``."""
    reduction = adapter.standardize_reduction(reduction)
    values = ops.convert_to_tensor(values, dtype=dtype)
    if sample_weight is not None:
        sample_weight = ops.convert_to_tensor(sample_weight, dtype=dtype)
    if mask is not None:
        mask = ops.convert_to_tensor(mask, dtype=dtype)
    # Keras's merge of mask and sample weight, without the total/valid rescaling of a masked
    # mean (the whole batch's denominator takes that role; reduction None does not rescale).
    weights = adapter.apply_mask(sample_weight, mask, dtype=values.dtype, reduction="sum")
    if weights is not None:
        weights = ops.cast(weights, values.dtype)
    if tuple(values.shape) == ():
        return _scalar_part(values, weights, mask, reduction)
    if weights is not None:
        values, weights = adapter.squeeze_or_expand_to_same_rank(values, weights)
        values = values * weights
    numerator = ops.sum(values)
    if reduction in (None, "none"):
        return Part(NONE, numerator, values=values)
    if reduction == "sum":
        return Part(SUM, numerator, values=values)
    if reduction == "mean_with_sample_weight" and weights is not None:
        return Part(WEIGHTS, numerator, values=values, denominator=ops.sum(weights))
    if mask is not None:
        return Part(
            MASKED,
            numerator,
            values=values,
            denominator=ops.sum(mask),
            offset=adapter.masked_mean_epsilon(),
        )
    return Part(COUNT, numerator, values=values, per_sample=_elements_per_sample(values))


def _scalar_part(value, weights, mask, reduction) -> Part:
    """A scalar ``call`` value: Keras multiplies it by the (merged) weights and reduces
    ``value x weights``, so the whole batch's loss is the value times a factor of the
    whole batch's weights: ``weight_sum / denominator``, summed over micro-batches."""
    if weights is None:
        return Part(SCALAR, value, values=value)  # returned as it is, whatever the reduction
    weight_sum = ops.sum(weights)
    if reduction in (None, "none"):
        return Part(SCALAR, value, values=value, weight_sum=weight_sum, weights=weights)
    if reduction == "sum":
        return Part(SCALAR, value, values=value, weight_sum=weight_sum)
    if reduction == "mean_with_sample_weight":
        # sum(value x weights) / sum(weights)
        return Part(SCALAR, value, values=value, weight_sum=weight_sum, denominator=weight_sum)
    elements = ops.cast(_elements(weights), value.dtype)
    if mask is None:  # sum(value x weights) / elements
        return Part(SCALAR, value, values=value, weight_sum=weight_sum, denominator=elements)
    # A masked mean scales the valid entries by total / (valid + epsilon) before dividing by
    # the elements of value x weights: the denominator is valid x (elements / total).
    ratio = elements / ops.cast(ops.maximum(_elements(mask), 1), value.dtype)
    return Part(
        SCALAR,
        value,
        values=value,
        weight_sum=weight_sum,
        denominator=ops.sum(mask) * ratio,
        offset=adapter.masked_mean_epsilon() * _static_ratio(weights, mask),
    )


def _share(part: Part, shares: Shares, totals: list[Any] | None, scale: str) -> Any:
    """The micro-batch's share of the whole batch's value of one reduction."""
    dtype = part.numerator.dtype

    def total(position: int) -> Any:
        if totals is None:
            raise RuntimeError(
                "GradientAccumulationModel: a loss needs whole-batch sums (of a mask or of "
                "sample weights) that the forward-only pass did not see (a mask that appears "
                "only in training?). Please report this model."
            )
        return ops.cast(totals[position], dtype)

    if part.kind == NONE:
        return part.values
    if part.kind == SUM:
        return part.numerator
    if part.kind == COUNT:
        elements = ops.cast(shares.samples, dtype) * ops.cast(part.per_sample, dtype)
        return ops.divide_no_nan(part.numerator, elements)
    if part.kind in (MASKED, WEIGHTS):
        return ops.divide_no_nan(part.numerator, total(0) + part.offset)
    value = part.numerator
    if scale == MEAN_OF_SAMPLES:
        value = value * ops.cast(shares.fraction, dtype)
    if part.weight_sum is None:
        return value
    if part.weights is not None:
        # Keras returns value x weights, whose sum over the batch is value x sum(weights):
        # each of this micro-batch's elements carries an equal part of its share.
        ones = ops.ones_like(part.weights)
        return ones * ops.divide_no_nan(value * total(0), ops.cast(_elements(ones), dtype))
    if part.denominator is None:
        return value * total(0)
    return value * ops.divide_no_nan(total(0), total(1) + part.offset)


@dataclasses.dataclass
class OutputShare:
    """One output's loss on a micro-batch, in share mode: ``share`` to differentiate,
    ``logged`` for the loss tracker and the ``<output>_loss`` metric (both sum over the
    micro-batches to Keras's values), ``unreduced`` when the loss returned values rather
    than one value (reduction None), ``elements`` their count over the whole batch."""

    share: Any
    logged: Any
    unreduced: bool = False
    elements: Any = None


def output_share(term: LossTerm, shares: Shares) -> OutputShare:
    """The share of one output's loss on a micro-batch (share mode).

    A scalar value is the share itself (scaled by the plan when the loss made no reduction
    of Keras's). Unreduced values (reduction None, or a ``__call__`` returning a vector) are
    differentiated as their sum and logged as their mean, as Keras's loss tracker and
    ``<output>_loss`` metrics take them.
    """
    value = ops.cast(term.value, "float32")
    if len(value.shape) == 0:
        if not term.parts and shares.plan.output_scale == MEAN_OF_SAMPLES:
            value = value * ops.cast(shares.fraction, "float32")
        return OutputShare(value, value)
    total = ops.sum(value)
    elements = ops.cast(shares.samples, "float32") * ops.cast(
        _elements_per_sample(value), "float32"
    )
    return OutputShare(total, ops.divide_no_nan(total, elements), True, elements)


def compiled_shares(terms: list[LossTerm], shares: list[Shares]) -> list[OutputShare]:
    """Every output's share, added up as ``CompileLoss`` adds the outputs' losses.

    Keras sums the outputs' values with ``+``: next to unreduced values, a scalar loss is
    broadcast to each of their elements, and the gradient of the sum counts it once per
    element of the whole batch; its share is scaled alike (its logged value is not, as
    Keras's loss tracker averages the elements).
    """
    outputs = [output_share(term, each) for term, each in zip(terms, shares)]
    counts = [o.elements for o in outputs if o.unreduced]
    if counts:
        spread = counts[0]
        for count in counts[1:]:
            spread = ops.maximum(spread, count)
        for output in outputs:
            if not output.unreduced:
                output.share = output.share * spread
    return outputs


def summed(terms: list[LossTerm]) -> tuple[list[tuple[int, int, int]], list[Any]]:
    """What the whole batch's shares need summed: ``(layout, values)``, the values flat.

    ``layout`` lists ``(output, part, count)``; :func:`totals_of` turns the summed values
    back into ``{output: {part: [sums]}}``. An empty layout needs no forward-only pass.
    """
    layout, values = [], []
    for output, term in enumerate(terms):
        for index, part in enumerate(term.parts):
            fields = part.summed()
            if fields:
                layout.append((output, index, len(fields)))
                values.extend(ops.cast(f, "float32") for f in fields)
    return layout, values


def totals_of(layout: list[tuple[int, int, int]], sums: Any) -> dict[int, dict[int, list[Any]]]:
    """``{output: {part: [whole-batch sums]}}`` from the summed flat vector ``sums``."""
    totals: dict[int, dict[int, list[Any]]] = {}
    position = 0
    for output, index, count in layout:
        totals.setdefault(output, {})[index] = [sums[position + i] for i in range(count)]
        position += count
    return totals


def _elements(tensor: Any) -> Any:
    size = 1
    for dim in ops.shape(tensor):
        size = size * dim
    return size


def _elements_per_sample(values: Any) -> Any:
    per_sample = 1
    for size in ops.shape(values)[1:]:
        per_sample = per_sample * size
    return per_sample


def _static_ratio(weights: Any, mask: Any) -> float:
    """Elements per sample of the merged weights over those of the mask (1 when they share a
    shape; the epsilon offset is a Python float, so the ratio must be static)."""
    try:
        w = 1
        for d in weights.shape[1:]:
            w *= int(d)
        m = 1
        for d in mask.shape[1:]:
            m *= int(d)
        return w / m
    except TypeError:  # an unknown dimension: the usual case of equal shapes
        return 1.0


def recombined(
    loss: Any, pieces: list[tuple[Any, Any, Any]], plan: LossPlan
) -> tuple[float, float, list[LossTerm]]:
    """A batch's loss as the accumulation forms it from its ``pieces`` (eagerly).

    ``pieces`` are ``(y_true, y_pred, sample_weight)`` of consecutive rows of one batch.
    Returns the sum of the pieces' shares (what is differentiated), of their logged values,
    and each piece's own terms (record mode). Raises ``ValueError`` when the pieces reduce
    in different parts (a call path that changes with the batch).
    """
    import numpy as np

    own = [split(loss, *piece) for piece in pieces]
    kinds = {tuple(p.kind for p in term.parts) for term in own}
    if len(kinds) != 1:
        raise ValueError(f"its reductions differ between parts of a batch: {sorted(kinds)}")
    layout, _ = summed(own[:1])
    sums = np.sum([[host_float64(v) for v in summed([term])[1]] for term in own], axis=0)
    totals = totals_of(layout, sums.astype("float32")).get(0, {})
    samples = sum(int(ops.shape(piece[1])[0]) for piece in pieces)
    share_sum = logged_sum = 0.0
    for piece in pieces:
        rows = int(ops.shape(piece[1])[0])
        shares = Shares(float(samples), rows / samples, totals, plan)
        output = output_share(split(loss, *piece, shares=shares), shares)
        share_sum += float(host_float64(output.share))
        logged_sum += float(host_float64(output.logged))
    return share_sum, logged_sum, own


def host_float64(value: Any) -> Any:
    """``value``, a tensor of any backend on any device (or a number), as a float64 NumPy
    array: ``np.asarray`` cannot read a torch tensor on a GPU, ``convert_to_numpy`` can."""
    import numpy as np

    return np.asarray(ops.convert_to_numpy(value), dtype=np.float64)
