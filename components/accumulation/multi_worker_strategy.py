"""The accumulation room's strategy across workers: TensorFlow's
``MultiWorkerMirroredStrategy`` in the form Keras 3's ``fit`` can train with.

Public TensorFlow and Keras API only (``tf.distribute``, ``keras.tree``); the strategy choice
(``strategy.py``) and the cluster's parsing (``multi_worker.py``) stay free of TensorFlow at
import, so this class lives apart. On the JAX backend the class refuses with one line.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import tree

# TensorFlow's strategy classes are needed on its backend only; on JAX the model runs
# without TensorFlow installed.
if keras.backend.backend() == "tensorflow":
    import tensorflow as tf
else:
    tf = None

__all__ = ["MultiWorkerMirroredStrategy", "refuse_tensorflows_multi_worker_strategy"]


if tf is not None:

    class MultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
        """``tf.distribute.MultiWorkerMirroredStrategy`` that Keras 3's ``fit`` can train with.

        With two or more workers, plain Keras 3 ``fit`` under TensorFlow's strategy fails before
        its first step (keras-team/keras#20585, tensorflow/tensorflow#72388; Keras 3.8 to 3.12
        at least, and Keras master as of 2026-12). Keras's TensorFlow trainer
        (``keras/src/backend/tensorflow/trainer.py``) makes two calls of ``Strategy.reduce``
        that TensorFlow answers on one worker and rejects on several:

        1. ``TensorFlowTrainer._maybe_symbolic_build`` takes the first distributed batch (a
           nest of ``PerReplica`` values) and calls ``reduce("MEAN", batch, axis=None)`` to
           get a batch to build the model's state from (by its shapes). ``MirroredStrategy``
           reduces a nest leaf by leaf (``MirroredExtended._reduce_to`` maps over it);
           ``MultiWorkerMirroredStrategy`` across workers tries to convert the whole nest to
           one tensor (``ValueError: Attempt to convert a value (PerReplica:{...}) with an
           unsupported type``). Here a nest is reduced leaf by leaf, as ``MirroredStrategy``
           does.
        2. ``reduce_per_replica`` (the logs of every train and test step) calls
           ``reduce("MEAN", value, axis=0)`` under a multi-worker strategy, where with one
           worker it takes the mean over the replicas of each value; the logs are scalars, so
           ``axis=0`` is out of range (``ValueError: Invalid reduction dimension 0 for input
           with 0 dimensions``). Here a scalar is reduced with ``axis=None``: the mean over
           all replicas of all workers, Keras's meaning, in one all-reduce.

        Every other call is TensorFlow's own, and both cases above are calls that TensorFlow
        rejects, so no valid use changes meaning. Gradients are not touched: Keras's optimizer
        sums them with one ``all_reduce`` per update (``_all_reduce_sum_gradients``).
        Tested with two worker processes (``tests/accumulation/test_multi_worker.py``).
        """

        def reduce(self, reduce_op, value, axis):
            mean = str(getattr(reduce_op, "value", reduce_op)).upper() == "MEAN"
            if isinstance(value, (list, tuple, dict)):  # case 1: leaf by leaf
                return tree.map_structure(lambda leaf: self.reduce(reduce_op, leaf, axis), value)
            if mean and axis is not None and _rank(value) == 0:
                axis = None  # case 2: a scalar log, averaged over the replicas
            return super().reduce(reduce_op, value, axis)

else:

    class MultiWorkerMirroredStrategy:  # type: ignore[no-redef]
        """TensorFlow's strategy across workers: only on the TensorFlow backend."""

        def __init__(self, *args: Any, **kwargs: Any):
            raise RuntimeError(
                "tfx_accum.MultiWorkerMirroredStrategy is a tf.distribute strategy and needs "
                f"KERAS_BACKEND=tensorflow (the Keras backend is {keras.backend.backend()!r})."
            )


def refuse_tensorflows_multi_worker_strategy(strategy: Any) -> None:
    """One line instead of Keras's cryptic crash: TensorFlow's own strategy across workers.

    Under ``tf.distribute.MultiWorkerMirroredStrategy`` with two or more workers, Keras 3's
    ``fit`` fails before its first step with "Attempt to convert a value (PerReplica...)"
    (the two ``reduce`` calls above), in Keras's trainer, before the model's train step can
    do anything. :class:`MultiWorkerMirroredStrategy` here, created with the same arguments,
    answers both; one worker needs nothing.
    """
    if tf is None:
        return  # a tf.distribute strategy needs the TensorFlow backend
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or isinstance(
        strategy, MultiWorkerMirroredStrategy
    ):
        return
    resolver = getattr(strategy, "cluster_resolver", None)
    try:
        spec = resolver.cluster_spec() if resolver is not None else None
        workers = sum(spec.num_tasks(job) for job in spec.jobs) if spec else 1
    except (AttributeError, ValueError):
        workers = 1
    if workers > 1:
        raise ValueError(
            f"GradientAccumulationModel: tf.distribute.MultiWorkerMirroredStrategy across "
            f"{workers} workers fails in Keras 3's fit before its first step "
            "(keras-team/keras#20585); create it as tfx_accum.MultiWorkerMirroredStrategy(...) "
            "(the same arguments), under which the model trains exactly as on one device."
        )


def _rank(value: Any) -> int | None:
    """The rank of a tensor, or of each replica's part of a distributed value."""
    if isinstance(value, tf.distribute.DistributedValues):
        value = value.values[0]
    shape = getattr(value, "shape", None)
    return None if shape is None else shape.rank
