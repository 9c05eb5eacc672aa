"""Exact accumulation across two worker processes (MultiWorkerMirroredStrategy).

Two CPU workers on the loopback address (``TF_CONFIG``, one replica each) train the cases
of tests/multi_worker_cases.py with the strategy the Trainer chooses; this process trains
a plain ``keras.Model`` on the same global batches with no strategy at all. Every weight
and optimizer slot must agree to 1e-5, and the accumulation step must all-reduce once
per optimizer update: no collective operation in its micro-batch loops, and the
gradients in exactly one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from clusters import run_cluster

# The slow tier: a real two-worker cluster of processes.
pytestmark = pytest.mark.e2e

WORKER = Path(__file__).resolve().parents[1] / "multi_worker_worker.py"
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("multi_worker")
    results = run_cluster(WORKER, [str(out)])
    for code, _, stderr in results:
        assert code == 0, stderr[-4000:]
    assert len(results) == 2
    return out, [json.loads(stdout.strip().splitlines()[-1]) for _, stdout, _ in results]


def reference(name: str) -> dict[str, np.ndarray]:
    """Plain single-device Keras on the whole global batch: the promise."""
    from multi_worker_cases import CASES, EPOCHS, initial_model, state

    case = CASES[name]
    model = initial_model(name)
    model.compile(**case["compile"]())
    model.fit(case["data"](), epochs=EPOCHS, verbose=0, **case.get("fit", {}))
    return state(model)


def test_the_trainer_picks_the_adapters_multi_worker_strategy(cluster_run):
    _, summaries = cluster_run
    for summary in summaries:
        assert summary["strategy"] == "MultiWorkerMirroredStrategy"
        assert summary["adapter_strategy"], summary
        # k = 4 over 2 replicas of 2 workers: 2 micro-batches of 8 each, global batch 32.
        assert summary["replicas"] == 2
        assert (summary["steps_per_replica"], summary["global_batch"]) == (2, 32)
    assert [s["chief"] for s in summaries] == [True, False]


@pytest.mark.parametrize(
    "name", ["sum_loss_empty_worker", "masked_outputs_uneven", "plain_keras_shuffled"]
)
def test_two_workers_equal_one_device_on_the_whole_batch(cluster_run, name):
    out, _ = cluster_run
    expected = reference(name)
    for index in (0, 1):
        with np.load(out / f"{name}-{index}.npz") as trained:
            assert sorted(trained.files) == sorted(expected), name
            for key, value in expected.items():
                difference = float(np.max(np.abs(trained[key] - value), initial=0.0))
                assert difference < TOLERANCE, (name, index, key, difference)


def test_one_all_reduce_of_the_gradients_per_update_none_per_micro_batch(cluster_run):
    _, summaries = cluster_run
    for summary in summaries:
        for name, counted in summary["collectives"].items():
            by_steps = counted["by_steps"]
            for k, found in by_steps.items():
                assert found["loops"] >= 1, (name, k, found)  # the micro-batch loops exist
                assert found["per_micro_batch"] == 0, (name, k, found)
                assert found == by_steps["1"], (name, k, found)  # the same for every k
            found = by_steps["1"]
            reduces = [size for op, size in found["per_update"] if op == "CollectiveReduceV2"]
            gathers = [size for op, size in found["per_update"] if op == "CollectiveGatherV2"]
            # The dense gradients: all in one all-reduce (TensorFlow packs the one
            # all_reduce call of Keras's optimizer), once per update.
            assert reduces.count(counted["dense_parameters"]) == 1, (name, found)
            # The others are scalars and short vectors (samples, loss, per-output losses,
            # masked denominators), also once per update.
            others = list(reduces)
            others.remove(counted["dense_parameters"])
            assert others and max(others) <= 4, (name, found)
            # A sparse (Embedding) gradient is all-gathered, by the same all_reduce call:
            # its row count here, its rows in the taken branch of a cond.
            if counted["sparse_gradients"]:
                assert gathers == [1], (name, found)
                assert set(found["per_update_nested"]) == {"CollectiveGatherV2"}, (name, found)
            else:
                assert gathers == [] and found["per_update_nested"] == [], (name, found)
