"""The Trainer's place in a cluster (TF_CONFIG) and the strategy it picks from it."""

from __future__ import annotations

import json
import os

import pytest

from tfx_accum.components.accumulation.multi_worker import Cluster, ClusterError
from tfx_accum.components.accumulation.strategy import strategy_kind


def tf_config(cluster: dict, task_type: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


WORKERS = {"worker": ["a:2222", "b:2222", "c:2222"]}
VERTEX = {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2222"]}  # pool 0, pool 1


@pytest.mark.parametrize(
    "text,workers,chief",
    [
        (None, 1, True),
        ("", 1, True),
        (json.dumps({"cluster": {}, "task": {}}), 1, True),
        (tf_config({"worker": ["a:1"]}, "worker", 0), 1, True),
        (tf_config(WORKERS, "worker", 0), 3, True),  # no chief task: worker 0 is the chief
        (tf_config(WORKERS, "worker", 2), 3, False),
        (tf_config(VERTEX, "chief", 0), 3, True),  # Vertex AI: the first pool is the chief
        (tf_config(VERTEX, "worker", 0), 3, False),
        (tf_config(VERTEX, "worker", 1), 3, False),
    ],
)
def test_the_chief_and_the_worker_count_follow_tf_config(text, workers, chief):
    cluster = Cluster.from_tf_config(text)
    assert cluster.workers == workers
    assert cluster.is_chief is chief
    assert cluster.multi_worker is (workers > 1)


@pytest.mark.parametrize(
    "text,message",
    [
        ("{not json", "TF_CONFIG is not JSON"),
        ("[1, 2]", "JSON object"),
        (tf_config({"worker": ["a:1"], "ps": ["p:1"]}, "worker", 0), "ps tasks"),
        (tf_config({**VERTEX, "evaluator": ["e:1"]}, "chief", 0), "evaluator tasks"),
        (tf_config({"chief": ["a:1", "b:1"]}, "chief", 0), "2 chief tasks"),
        (tf_config(WORKERS, "worker", 3), "task 'worker' 3 is not in its cluster"),
        (tf_config(VERTEX, "ps", 0), "task 'ps' 0 is not in its cluster"),
        (json.dumps({"cluster": {"worker": "a:1"}, "task": {}}), "must be a list"),
    ],
)
def test_a_cluster_the_trainer_cannot_train_in_is_one_line(text, message):
    with pytest.raises(ClusterError, match=message) as error:
        Cluster.from_tf_config(text)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "gpus,tpu,workers,kind",
    [
        (0, False, 2, "multi_worker"),
        (8, False, 4, "multi_worker"),  # every GPU of every worker
        (2, False, 1, "mirrored"),
        (0, True, 1, "tpu"),
        (0, False, 1, "default"),
    ],
)
def test_several_workers_pick_multi_worker_mirrored_strategy(gpus, tpu, workers, kind):
    assert strategy_kind(gpus, tpu, workers) == kind


def test_several_tpu_workers_are_refused():
    with pytest.raises(ValueError, match="TF_CONFIG names 2 workers, but this process sees a TPU"):
        strategy_kind(0, True, 2)


def test_only_the_chief_writes_where_the_pipeline_reads(tmp_path):
    backup = tmp_path / "backup"
    backup.mkdir()
    (backup / "training_metadata.json").write_text('{"epoch": 2}')
    (backup / "latest.weights.h5").write_bytes(b"weights")
    (backup / "subfolder").mkdir()
    chief = Cluster.from_tf_config(tf_config(VERTEX, "chief", 0))
    assert chief.own_dir(str(tmp_path / "serving")) == str(tmp_path / "serving")
    assert chief.own_backup(str(backup)) == str(backup)

    worker = Cluster.from_tf_config(tf_config(VERTEX, "worker", 1))
    serving = worker.own_dir(str(tmp_path / "serving"))
    copy = worker.own_backup(str(backup))
    assert not serving.startswith(str(tmp_path)) and not copy.startswith(str(tmp_path))
    # The chief's backup, as it was before training: the same epoch and weights.
    assert sorted(os.listdir(copy)) == ["latest.weights.h5", "training_metadata.json"]
    assert open(os.path.join(copy, "training_metadata.json")).read() == '{"epoch": 2}'
    worker.clean_up()
    assert not os.path.exists(serving) and not os.path.exists(copy)
    assert sorted(p.name for p in backup.iterdir()) == [
        "latest.weights.h5",
        "subfolder",
        "training_metadata.json",
    ]


def test_a_worker_without_a_chief_backup_starts_afresh(tmp_path):
    worker = Cluster.from_tf_config(tf_config(WORKERS, "worker", 1))
    copy = worker.own_backup(str(tmp_path / "no-backup-yet"))
    assert os.listdir(copy) == []
    worker.clean_up()


def test_every_iterator_of_a_shuffled_stream_yields_the_first_ones():
    # Keras's fit reads a dataset once before training under a strategy; the training
    # iterator must still get the stream a single device trains on (the first one).
    import tensorflow as tf

    from tfx_accum.components.data.datasets import batched

    tf.random.set_seed(0)
    stream = batched(tf.data.Dataset.range(50), 8, shuffle_seed=3)
    first = [b.numpy().tolist() for b in stream.take(12)]
    again = [b.numpy().tolist() for b in stream.take(12)]
    assert first == again
    assert sum(first[:6], []) != list(range(48))  # shuffled
