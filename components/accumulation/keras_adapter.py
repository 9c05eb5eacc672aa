"""Every use of Keras internals by tfx-accum, in one place.

:class:`~tfx_accum.components.accumulation.model.GradientAccumulationModel` must compute the loss of
a micro-batch *in parts* (numerator and denominator of each output's loss) to weight the
micro-batches exactly, which public Keras API does not expose. What it needs from inside
Keras is here, each with a comment saying why:

- ``keras.src.losses.loss``: the helpers ``Loss.__call__`` reduces with (mask merging,
  rank alignment of sample weights), so that a loss is split exactly as Keras computes it,
  and its ``reduce_weighted_values``, which is swapped for a recorder while a loss is split
  (``recording_reductions``): a loss is called through its own ``__call__``, overrides
  included, and each reduction it makes is seen with Keras's own arguments.
- ``Trainer._compile_loss`` (the ``CompileLoss`` built by ``compile``) and its
  ``_flat_losses``: which loss, loss weight and ``y_true``/``y_pred``/``sample_weight``
  belong to each output. Its structure matching (dicts, lists, partial losses) is reused
  by calling it with recording stand-ins for the loss functions.
- ``Trainer._loss_tracker``, ``Trainer._compute_loss``, ``Layer._call_has_training_arg``:
  the loss metric, the ``compute_loss`` dispatch that copes with overrides without a
  ``training`` argument, and whether ``call`` takes ``training``.
- ``keras.src.models.functional.Functional`` and ``functional_init_arguments``: to build
  functional instances of GradientAccumulationModel without letting Keras rewrite the
  class's bases (see ``functional_variant``).
- ``keras.src.models.cloning._clone_functional_model``'s frame: the model that
  ``clone_model`` copies, whose accumulation settings the clone must keep
  (``model_being_cloned``).
- How Keras 3's TensorFlow trainer calls ``Strategy.reduce`` (``_maybe_symbolic_build``,
  ``reduce_per_replica``), which fails across several workers:
  ``multi_worker_strategy.MultiWorkerMirroredStrategy`` answers those two calls as they
  are meant (keras-team/keras#20585).

Tested on the versions named in ``pyproject.toml`` (``keras`` lower bound) and the pinned
one in ``constraints.txt``: ``tests/accumulation/test_accumulation.py`` fails if any of this
changes.
Keras >= 3.8 aggregates per-replica gradients by sum with each replica's loss divided by
the replica count (keras-team/keras#20609); the accumulation uses global denominators and
relies only on that sum.

Size (over 500 lines): the brief keeps every use of Keras's private internals in one small,
commented adapter, so that one file lists what a Keras upgrade can break.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from keras import ops
from keras.src import backend as _backend
from keras.src.losses import loss as _loss_lib
from keras.src.models import functional as _functional
from keras.src.models import model as _model

# TensorFlow's strategy classes are needed on its backend only; on JAX the model runs
# without TensorFlow installed.
if _backend.backend() == "tensorflow":
    import tensorflow as tf
else:
    tf = None

__all__ = [
    "added_losses",
    "apply_mask",
    "recording_activity_losses",
    "call_has_training_arg",
    "compile_loss_terms",
    "compute_loss",
    "functional_variant",
    "is_functional_call",
    "keras_mask",
    "loss_tracker",
    "model_being_cloned",
    "per_output_loss_metrics",
    "has_compiled_metrics",
    "keras_reduction",
    "masked_mean_epsilon",
    "recording_reductions",
    "run_isolated",
    "self_check",
    "set_keras_mask",
    "squeeze_or_expand_to_same_rank",
    "standardize_reduction",
]


def keras_mask(tensor: Any) -> Any:
    """The Keras mask a layer attached to ``tensor`` (``None`` if it has none)."""
    return _backend.get_keras_mask(tensor)


def set_keras_mask(tensor: Any, mask: Any) -> None:
    """Attaches a Keras mask to ``tensor`` (as layers do), for metrics that read it."""
    _backend.set_keras_mask(tensor, mask)


def has_compiled_metrics(model: Any) -> bool:
    """Whether ``compile(metrics=..., weighted_metrics=...)`` gave the model metrics."""
    return model._compile_metrics is not None


def call_has_training_arg(model: Any) -> bool:
    return model._call_has_training_arg


def loss_tracker(model: Any) -> Any:
    """The ``Mean`` metric that ``fit`` logs as ``loss``."""
    return model._loss_tracker


def compute_loss(model: Any, x: Any, y: Any, y_pred: Any, sample_weight: Any) -> Any:
    """``model.compute_loss`` as Keras's own train step calls it (user overrides included)."""
    return model._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)


def per_output_loss_metrics(model: Any) -> list[Any]:
    """The ``<output>_loss`` metrics Keras logs when there are several losses (else [])."""
    compile_loss = model._compile_loss
    return list(compile_loss.metrics) if compile_loss is not None else []


def added_losses(model: Any) -> list[Any]:
    """Values added with ``add_loss`` in ``call()`` (own and sublayers'), in call order.

    ``Layer.losses`` lists them first and then one loss per regularized trainable weight;
    the accumulation adds weight regularizers once per step itself.
    """
    losses = model.losses
    regularized = sum(
        1 for v in model.trainable_weights if getattr(v, "regularizer", None) is not None
    )
    return losses[: len(losses) - regularized] if regularized else losses


@contextlib.contextmanager
def recording_activity_losses(model: Any) -> Iterator[dict[int, str]]:
    """Yields ``{id(loss): SUM or MEAN}`` for the losses activity regularizers add in the block.

    ``Layer.__call__`` passes each output to ``layer.activity_regularizer`` and adds the
    result with ``add_loss``: the regularizer's value, a sum over the batch (Keras 3.8 to
    3.12), or that value divided by the batch size, a mean (newer Keras: 3.15 does). A
    recording stand-in for the regularizer and for the layer's ``add_loss`` tells those
    values apart from other ``add_loss`` values, and which of the two each is. The values
    are kept alive for the block so that their ids stay unique.
    """
    kinds: dict[int, str] = {}
    kept: list[Any] = []
    replaced = []
    for layer in model._flatten_layers(include_self=True, recursive=True):
        regularizer = getattr(layer, "activity_regularizer", None)
        if regularizer is None:
            continue
        pending: list[Any] = []

        def record(output, _regularizer=regularizer, _pending=pending):
            value = _regularizer(output)
            _pending.append(value)
            return value

        def add_loss(loss, _add_loss=layer.add_loss, _pending=pending):
            if _pending:  # the call that follows the regularizer's, in Layer.__call__
                value = _pending.pop()
                kept.extend((value, loss))
                kinds[id(loss)] = SUM if loss is value else MEAN
            return _add_loss(loss)

        replaced.append((layer, regularizer))
        # object.__setattr__: a plain swap, without Keras's attribute tracking.
        object.__setattr__(layer, "activity_regularizer", record)
        object.__setattr__(layer, "add_loss", add_loss)
    try:
        yield kinds
    finally:
        for layer, regularizer in replaced:
            object.__setattr__(layer, "activity_regularizer", regularizer)
            del layer.__dict__["add_loss"]


# --------------------------------------------------------------- loss in parts

# How an activity regularizer's value grows with the batch (``recording_activity_losses``).
SUM = "sum"
MEAN = "mean"

# ``Loss.__call__``'s helpers (Keras 3.8 to 3.15), for tfx_accum.components.accumulation.loss_split,
# which takes a loss apart as Keras reduces it.
standardize_reduction = _loss_lib.standardize_reduction
apply_mask = _loss_lib.apply_mask
squeeze_or_expand_to_same_rank = _loss_lib.squeeze_or_expand_to_same_rank

# ``Loss.__call__`` reduces with the module global ``reduce_weighted_values`` of
# keras.src.losses.loss (looked up at each call). While a thread records reductions
# (``recording_reductions``), that global is this module's ``_reduce_weighted_values``,
# which hands the thread's reductions to its recorder and every other thread's to Keras's.
_keras_reduce_weighted_values = _loss_lib.reduce_weighted_values
_recording = threading.local()
_reduce_lock = threading.Lock()
_reduce_users = 0


def keras_reduction(
    values, sample_weight=None, mask=None, reduction="sum_over_batch_size", dtype=None
):
    """Keras's own ``reduce_weighted_values`` (also while reductions are recorded)."""
    return _keras_reduce_weighted_values(values, sample_weight, mask, reduction, dtype)


def _reduce_weighted_values(
    values, sample_weight=None, mask=None, reduction="sum_over_batch_size", dtype=None
):
    record = getattr(_recording, "record", None)
    if record is None:
        return keras_reduction(values, sample_weight, mask, reduction, dtype)
    return record(values, sample_weight, mask, reduction, dtype)


@contextlib.contextmanager
def recording_reductions(record: Callable[..., Any]) -> Iterator[None]:
    """In the block, in this thread, every ``Loss.__call__`` reduces with ``record``.

    ``record(values, sample_weight, mask, reduction, dtype)`` gets what ``Loss.__call__``
    hands ``reduce_weighted_values`` (the ``call`` values, the sample weights, the merged
    masks) and returns what the call gets back. Other threads reduce as Keras does.
    """
    global _reduce_users
    if not hasattr(_loss_lib, "reduce_weighted_values"):
        raise _unsupported("has no keras.src.losses.loss.reduce_weighted_values")
    with _reduce_lock:
        if _reduce_users == 0:
            _loss_lib.reduce_weighted_values = _reduce_weighted_values
        _reduce_users += 1
    outer = getattr(_recording, "record", None)
    _recording.record = record
    try:
        yield
    finally:
        _recording.record = outer
        with _reduce_lock:
            _reduce_users -= 1
            if _reduce_users == 0:
                _loss_lib.reduce_weighted_values = _keras_reduce_weighted_values


_MASK_EPSILON: list[float] = []


def masked_mean_epsilon() -> float:
    """What Keras adds to a masked mean's valid count: ``epsilon()`` on Keras 3.8 to 3.12
    (``total / (valid + epsilon)``), 0 on Keras 3.15 (``divide_no_nan(total, valid)``).
    Read from ``apply_mask`` itself on a mask of one valid entry in two, once."""
    if not _MASK_EPSILON:
        import numpy as np

        def weight_of_valid_entry() -> float:
            mask = ops.convert_to_tensor(np.array([1.0, 0.0], "float32"))
            weights = _loss_lib.apply_mask(None, mask, "float32", "sum_over_batch_size")
            return float(ops.convert_to_numpy(weights)[0])  # any device

        weight = run_isolated(weight_of_valid_entry)  # 2 / (1 + epsilon), or 2
        from keras import config

        _MASK_EPSILON.append(0.0 if weight == 2.0 else float(config.epsilon()))
    return _MASK_EPSILON[0]


def run_isolated(function: Callable[[], Any]) -> Any:
    """``function()`` in a thread of its own, eagerly and outside any tf.distribute strategy,
    whatever the caller's context (a traced step, a strategy's scope), and its result.

    ``fit`` traces its step inside its strategy's scope, where ``Loss.__call__`` divides
    every loss by the number of replicas (``scale_loss_for_distribution``); TensorFlow's
    strategy and graph stacks and JAX's traces are per thread.
    """
    result: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            # Eager, whatever the thread's default graph (TensorFlow; JAX is eager here).
            with tf.init_scope() if tf is not None else contextlib.nullcontext():
                result.append(function())
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(error)

    thread = threading.Thread(target=run, name="tfx-accum-isolated")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


def compile_loss_terms(
    model: Any, y: Any, y_pred: Any, sample_weight: Any, split: Callable[..., Any]
) -> list[Any]:
    """The compiled loss of ``model`` on one micro-batch, one term per output.

    ``CompileLoss`` matches ``y``, ``y_pred``, ``sample_weight`` and ``loss_weights`` to
    outputs (dicts, lists, partial losses); it is called here with a recording stand-in
    for each output's loss function and with its per-output metrics hidden, so that it
    does the matching and nothing else. ``split(index, loss, y_true, y_pred,
    sample_weight)`` makes each output's term (``loss_split.split``); its ``loss_weight``
    is set here.
    """
    compile_loss = model._compile_loss
    if compile_loss is None:
        return []
    terms: list[Any] = []

    def recorder(entry: Any) -> Callable[..., Any]:
        def record(y_true, y_pred_output, output_weight=None):
            term = split(len(terms), entry.loss, y_true, y_pred_output, output_weight)
            term.loss_weight = entry.loss_weights
            terms.append(term)
            return ops.zeros(())

        return record

    if not compile_loss.built:
        with _hidden_metrics(compile_loss, 1):
            compile_loss(y, y_pred, sample_weight)  # builds _flat_losses; value unused
    flat = getattr(compile_loss, "_flat_losses", None)
    if flat is None or not hasattr(compile_loss, "_metrics"):
        raise _unsupported("has no CompileLoss._flat_losses/_metrics")
    with _hidden_metrics(compile_loss, len(flat)):
        compile_loss._flat_losses = [e._replace(loss=recorder(e)) for e in flat]
        try:
            compile_loss(y, y_pred, sample_weight)
        finally:
            compile_loss._flat_losses = flat
    if len(terms) != len(flat):
        raise _unsupported(
            f"called {len(terms)} of the {len(flat)} compiled losses (CompileLoss changed)"
        )
    return terms


@contextlib.contextmanager
def _hidden_metrics(compile_loss: Any, count: int) -> Iterator[None]:
    # CompileLoss.call zips its losses with its per-output Mean metrics (updating each
    # one that is not None); a list of Nones keeps every loss and updates no metric (the
    # accumulation updates them once per step with the whole batch's values).
    metrics = compile_loss._metrics
    compile_loss._metrics = [None] * count
    try:
        yield
    finally:
        compile_loss._metrics = metrics


# ------------------------------------------------------------ functional models


def is_functional_call(args: tuple, kwargs: dict) -> bool:
    """Whether constructor arguments are functional (``inputs`` and ``outputs``)."""
    return _model.functional_init_arguments(args, kwargs)


_VARIANTS: dict[type, type] = {}


def functional_variant(cls: type) -> type:
    """``cls`` with ``Functional`` mixed in, created once per class.

    Keras builds a functional instance of a ``Model`` subclass by rewriting that class's
    bases in place (``inject_functional_model_class``), after which the class can no
    longer be subclassed with a ``call`` of its own. A separate subclass that mixes in
    ``Functional`` gives functional instances without touching ``cls``.
    """
    if issubclass(cls, _functional.Functional):
        return cls
    variant = _VARIANTS.get(cls)
    if variant is None:
        variant = type(
            cls.__name__,
            (cls, _functional.Functional),
            {"__module__": cls.__module__, "__qualname__": cls.__qualname__},
        )
        _VARIANTS[cls] = variant
    return variant


# ------------------------------------------------------------------ cloning


def model_being_cloned() -> Any:
    """The model ``keras.models.clone_model`` is copying, when called from inside it.

    Keras 3 (``keras.src.models.cloning._clone_functional_model``, 3.8 to 3.12) builds a
    functional clone as ``model.__class__(inputs, outputs, name=model.name)``: a subclass's
    own constructor arguments are not passed, and no public hook hands them over. The
    caller's frame holds the model as ``model``. None outside a clone.
    """
    import sys

    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_clone_functional_model" and code.co_filename.endswith("cloning.py"):
            return frame.f_locals.get("model")
        frame = frame.f_back
    return None


# ------------------------------------------------------------------ self-check

_SELF_CHECKED = False
_SELF_CHECK_LOCK = threading.Lock()
# What the probe compares, named in its errors: a misfire must say what it measured.
_PROBE = (
    "tfx-accum's self-check (once per process, outside any tf.distribute strategy: a loss "
    "on 7 samples against the same loss split over micro-batches of 2 and 5)"
)


def _tested_range() -> str:
    """The Keras range this package declares (pyproject.toml), e.g. ``>=3.8,<3.13``."""
    try:
        from importlib.metadata import requires

        for requirement in requires("tfx-accum") or []:
            name = requirement.split(";")[0].strip()
            if name.startswith("keras") and not name.startswith("keras-"):
                return ",".join(sorted(name[len("keras") :].split(","), reverse=True))
    except Exception:  # noqa: BLE001 - a missing distribution only changes the message
        pass
    return ""


def _unsupported(problem: str) -> RuntimeError:
    """The error for a Keras whose internals differ from those the accumulation mirrors.

    Only a Keras outside the tested range is blamed; inside it, the mismatch is this
    package's fault, and the message says where to report it.
    """
    import keras
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    wanted = _tested_range()
    try:
        tested = bool(wanted) and keras.__version__ in SpecifierSet(wanted)
    except InvalidSpecifier:
        tested = False
    if tested:
        advice = (
            f"this Keras is in the tested range ({wanted}), so this is a tfx-accum fault, "
            f"not your Keras's: please report this whole message in a tfx-accum issue"
        )
    else:
        advice = (
            f"install a Keras the tests prove (pip install 'keras{wanted}')"
            if wanted
            else "install a Keras in the range tfx-accum's pyproject.toml names"
        )
    return RuntimeError(
        f"tfx-accum: Keras {keras.__version__} {problem}, so gradient accumulation would "
        f"not be exact; {advice}."
    )


def self_check() -> None:
    """Checks, once per process, that this Keras reduces losses as ``loss_split`` assumes.

    Every kind of part (per reduction, with sample weights and with a mask; per-element
    values and a scalar) is split over two uneven micro-batches and recombined; the result
    must equal Keras's own loss on the whole batch. A Keras whose internals changed fails
    here, loudly, instead of training inexactly. Raises ``RuntimeError`` naming the Keras
    version and the tested range.

    The probe runs in a thread of its own (``run_isolated``), whatever the caller's
    context: its answer is the same whatever ran before it.
    """
    global _SELF_CHECKED
    if _SELF_CHECKED:
        return
    with _SELF_CHECK_LOCK:
        if _SELF_CHECKED:
            return
        run_isolated(_probe_loss_reductions)
        _SELF_CHECKED = True


def _probe_loss_reductions() -> None:
    """The comparisons of :func:`self_check`, in the calling thread's context."""
    import numpy as np
    from keras import losses

    from tfx_accum.components.accumulation import loss_split

    # The caller's duty; a scaled loss would misfire.
    if tf is not None and tf.distribute.has_strategy():
        raise AssertionError("the loss probe must run outside any distribution strategy")
    for helper in ("apply_mask", "squeeze_or_expand_to_same_rank", "standardize_reduction"):
        if not hasattr(_loss_lib, helper):
            raise _unsupported(f"has no keras.src.losses.loss.{helper}")
    rng = np.random.default_rng(0)
    n = 7
    y = rng.normal(size=(n, 3)).astype("float32")
    pred = rng.normal(size=(n, 3)).astype("float32")
    weights = rng.uniform(0.1, 2.0, n).astype("float32")
    labels = rng.integers(0, 5, (n, 4))
    logits = rng.normal(size=(n, 4, 5)).astype("float32")
    mask = rng.uniform(size=(n, 4)) < 0.6
    step_weights = rng.uniform(0.1, 2.0, (n, 4)).astype("float32")

    class ScalarMean(losses.Loss):  # a call that returns one value for the batch
        def call(self, y_true, y_pred):
            return ops.mean(ops.square(y_true - y_pred))

    cases = []
    for reduction, kind in (
        ("sum_over_batch_size", loss_split.COUNT),
        ("sum", loss_split.SUM),
        ("mean_with_sample_weight", loss_split.WEIGHTS),
        (None, loss_split.NONE),
    ):
        for sw in (weights, None):
            expected = loss_split.COUNT if kind == loss_split.WEIGHTS and sw is None else kind
            cases.append(
                (losses.MeanSquaredError(reduction=reduction), y, pred, sw, None, expected)
            )
        cases.append(
            (
                losses.SparseCategoricalCrossentropy(from_logits=True, reduction=reduction),
                labels,
                logits,
                step_weights,
                mask,
                loss_split.MASKED if kind == loss_split.COUNT else kind,
            )
        )
        scalar = ScalarMean(reduction=reduction, name="scalar_mean")
        for sw, valid, values in ((weights, None, pred), (step_weights, mask, logits[..., 0])):
            target = y if valid is None else labels.astype("float32")
            cases.append((scalar, target, values, sw, valid, loss_split.SCALAR))
    plan = loss_split.LossPlan(scales=(loss_split.MEAN_OF_SAMPLES,))
    for loss, y_true, y_pred, sw, valid, kind in cases:

        def piece(lo, hi, y_true=y_true, y_pred=y_pred, sw=sw, valid=valid):
            p = ops.convert_to_tensor(y_pred[lo:hi])
            if valid is not None:
                _backend.set_keras_mask(p, ops.convert_to_tensor(valid[lo:hi]))
            return y_true[lo:hi], p, None if sw is None else sw[lo:hi]

        whole_pred = ops.convert_to_tensor(y_pred)
        if valid is not None:
            _backend.set_keras_mask(whole_pred, ops.convert_to_tensor(valid))
        keras_value = float(np.sum(loss_split.host_float64(loss(y_true, whole_pred, sw))))
        ours, _, terms = loss_split.recombined(loss, [piece(0, 2), piece(2, n)], plan)
        found = [[p.kind for p in t.parts] for t in terms]
        if any(kinds != [kind] for kinds in found):
            raise _unsupported(
                f"reduces {loss.name} (reduction={loss.reduction!r}) as "
                f"{found[0]}, not {[kind]!r}, in {_PROBE}"
            )
        if not np.isclose(ours, keras_value, rtol=1e-5, atol=1e-6):
            raise _unsupported(
                f"computes {loss.name} (reduction={loss.reduction!r}, sample weights "
                f"{sw is not None}, mask {valid is not None}) as {keras_value!r}, where its "
                f"split over micro-batches gives {ours!r}, in {_PROBE}"
            )


def check_compiled(model: Any) -> None:
    """Checks that a compiled model has the trainer attributes the accumulation reads."""
    for attribute in ("_compile_loss", "_compile_metrics", "_loss_tracker", "_compute_loss"):
        if not hasattr(model, attribute):
            raise _unsupported(f"has no Trainer.{attribute}")
    if not hasattr(model, "_call_has_training_arg"):
        raise _unsupported("has no Layer._call_has_training_arg")
