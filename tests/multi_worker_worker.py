"""One worker of a two-worker cluster on the loopback address
(tests/accumulation/test_multi_worker.py).

``TF_CONFIG`` (set by the test) names the cluster and this task. The strategy comes from
the Trainer's own choice (``choose_strategy``); each case of tests/multi_worker_cases.py
is trained under it, its weights and optimizer variables written to
``OUT/<case>-<task index>.npz``. The collective operations of the accumulation step are
counted in its traced graph: those in the micro-batch loops' bodies run once per
micro-batch, the others once per update. Prints a JSON summary on its last line.

Usage: ``TF_CONFIG=... python multi_worker_worker.py OUT``
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # CPU workers, one replica each
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# the shared cases of tests/accumulation/test_exactness_matrix.py and test_accumulation.py
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "accumulation"))

import tensorflow as tf  # noqa: E402

from tfx_accum.components.accumulation import multi_worker_strategy  # noqa: E402
from tfx_accum.components.accumulation.distributed_input import shard_like_one_device  # noqa: E402
from tfx_accum.components.accumulation.multi_worker import Cluster  # noqa: E402
from tfx_accum.components.accumulation.strategy import choose_strategy, replica_plan  # noqa: E402

# The strategy first: collective operations must be configured before TensorFlow runs any.
STRATEGY = choose_strategy()

import keras  # noqa: E402
import numpy as np  # noqa: E402
from multi_worker_cases import (  # noqa: E402
    ACCUMULATION_STEPS,
    CASES,
    EPOCHS,
    MICRO_BATCH,
    initial_model,
    state,
)

from tfx_accum.components import GradientAccumulationModel  # noqa: E402

_LOOPS = ("While", "StatelessWhile")
_CALLS = ("body", "cond", "f", "then_branch", "else_branch", "branches")


def _called(node) -> list[str]:
    """Names of the functions a graph node runs (loop bodies, calls, branches)."""
    names = []
    for key in _CALLS:
        if key in node.attr:
            value = node.attr[key]
            names += [value.func.name] if value.func.name else [f.name for f in value.list.func]
    return names


def collectives(model, data) -> dict:
    """The collective operations of one traced accumulation step, and where they run.

    ``per_update``: ``[op type, elements]`` of those in the step's own graph, which run
    once per optimizer update; ``per_update_nested``: the types of those in functions
    it calls outside any loop (the branches of a ``cond``), at most once per update;
    ``per_micro_batch``: how many lie in a loop body (or a function it calls), which
    would run once per micro-batch.
    """
    batch = next(iter(STRATEGY.experimental_distribute_dataset(data)))
    step = tf.function(lambda d: STRATEGY.run(model.train_step, args=(d,)), autograph=False)
    graph = step.get_concrete_function(batch).graph
    library = {f.signature.name: f for f in graph.as_graph_def().library.function}
    in_loops, pending = set(), []
    for function in [*library.values(), graph.as_graph_def()]:
        nodes = function.node_def if hasattr(function, "node_def") else function.node
        pending += [n for node in nodes if node.op in _LOOPS for n in _called(node)]
    while pending:
        name = pending.pop()
        if name in library and name not in in_loops:
            in_loops.add(name)
            pending += [n for node in library[name].node_def for n in _called(node)]
    per_micro_batch = sum(
        node.op.startswith("Collective") for name in in_loops for node in library[name].node_def
    )
    per_update = [
        [op.type, int(op.inputs[0].shape.num_elements())]
        for op in graph.get_operations()
        if op.type.startswith("Collective")
    ]
    nested = sorted(
        node.op
        for name, function in library.items()
        if name not in in_loops
        for node in function.node_def
        if node.op.startswith("Collective")
    )
    return {
        "per_update": sorted(per_update),
        "per_update_nested": nested,
        "per_micro_batch": per_micro_batch,
        "loops": len(in_loops),
    }


def main(out: Path) -> dict:
    cluster = Cluster.from_env()
    plan = replica_plan(ACCUMULATION_STEPS, MICRO_BATCH, STRATEGY.num_replicas_in_sync)
    summary = {
        "strategy": type(STRATEGY).__name__,
        "adapter_strategy": isinstance(STRATEGY, multi_worker_strategy.MultiWorkerMirroredStrategy),
        "replicas": STRATEGY.num_replicas_in_sync,
        "steps_per_replica": plan.steps_per_replica,
        "global_batch": plan.global_batch,
        "chief": cluster.is_chief,
        "collectives": {},
    }
    for name, case in CASES.items():
        # Built, compiled and fit inside the scope, as users do: the first GA fit of this
        # fresh process runs the Keras self-check there (it once misfired inside a scope).
        with STRATEGY.scope():
            model = initial_model(name)
            if case["accumulate"]:
                model = GradientAccumulationModel.from_model(
                    model, gradient_accumulation_steps=plan.steps_per_replica
                )
            model.compile(**case["compile"]())
            model.fit(
                shard_like_one_device(case["data"]()),
                epochs=EPOCHS,
                verbose=0,
                **case.get("fit", {}),
            )
        np.savez(out / f"{name}-{cluster.task_index}.npz", **state(model))
        if case["accumulate"]:
            counts = {}
            for k in (1, 2, 4):
                model.gradient_accumulation_steps = k
                counts[k] = collectives(model, shard_like_one_device(case["data"]()))
            sparse = {  # Embedding tables get sparse gradients (IndexedSlices)
                id(w)
                for layer in model.layers
                if isinstance(layer, keras.layers.Embedding)
                for w in layer.trainable_weights
            }
            summary["collectives"][name] = {
                "dense_parameters": int(
                    sum(np.prod(w.shape) for w in model.trainable_weights if id(w) not in sparse)
                ),
                "sparse_gradients": len(sparse),
                "by_steps": counts,
            }
    return summary


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
