"""The Trainer on two machines, as Vertex AI Training runs it, on the loopback address.

The pipeline's Trainer on Vertex AI is TFX's Vertex AI Training extension with this
project's executor (tfx_accum.components.training.trainer_component). Its executor is run here on a
finished
local run's examples, statistics and schema, up to the point where TFX would submit the
``CustomJob``: the job is captured instead. Every worker pool's command (TFX's
``run_executor`` with this project's Trainer executor) is then run as Vertex AI would, in
two processes with a ``chief`` and a ``worker`` ``TF_CONFIG``: killed, both, once the
chief has backed up the first epoch (a preempted job that restarts), and run again. The
chief's model must equal the same command run on one device.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from clusters import free_ports

from tfx_accum.components.config.hyperparameters import Hyperparameters
from tfx_accum.components.config.settings import ModelSettings

# The slow tier: real Trainer processes on the loopback address (minutes).
pytestmark = pytest.mark.e2e

IMAGE = "europe-docker.pkg.dev/proj/repo/tfx-accum:0.1.0"
UPDATES = 60  # 2 epochs of 30 updates at global batch 32 (937 training examples)


def _latest(directory: Path) -> str:
    return str(max(directory.iterdir(), key=lambda p: int(p.name)))


def capture_vertex_job(run_dir: Path, work: Path, workers: int, monkeypatch) -> dict:
    """The Vertex AI ``CustomJob`` that TFX's extension would submit for our Trainer."""
    from tfx.dsl.components.base.base_executor import BaseExecutor
    from tfx.extensions.google_cloud_ai_platform import runner, training_clients
    from tfx.types import standard_artifacts

    from tfx_accum.components.training.vertex_trainer import (
        VertexTrainerExecutor,
        vertex_job_spec,
        vertex_training_config,
    )

    pipeline = run_dir / "pipeline"
    examples = standard_artifacts.Examples()
    examples.uri = _latest(pipeline / "CsvExampleGen" / "examples")
    examples.split_names = json.dumps(["train", "eval"])
    schema = standard_artifacts.Schema()
    schema.uri = _latest(pipeline / "SchemaGen" / "schema")
    statistics = standard_artifacts.ExampleStatistics()
    statistics.uri = _latest(pipeline / "StatisticsGen" / "statistics")
    statistics.split_names = json.dumps(["train", "eval"])
    model, model_run = standard_artifacts.Model(), standard_artifacts.ModelRun()
    model.uri, model_run.uri = str(work / "model"), str(work / "model_run")
    custom_config = {
        **ModelSettings(model="cnn", num_classes=10, task="multiclass").to_custom_config(),
        "hyperparameters": Hyperparameters(4, 8, 3e-3).to_values(),
        "backup_root": str(work / "_backup"),
        "seed": 42,
        **vertex_training_config(
            vertex_job_spec(IMAGE, workers, "n1-standard-4"), "my-project", "us-central1"
        ),
    }
    captured = {}
    monkeypatch.setattr(training_clients.VertexJobClient, "create_client", lambda self: None)
    monkeypatch.setattr(runner, "_launch_cloud_training", lambda **kwargs: captured.update(kwargs))
    context = BaseExecutor.Context(tmp_dir=str(work / "tmp"), unique_id="trainer")
    VertexTrainerExecutor(context).Do(
        {"examples": [examples], "schema": [schema], "statistics": [statistics]},
        {"model": [model], "model_run": [model_run]},
        {
            "run_fn": "tfx_accum.components.training.trainer_module.run_fn",
            "custom_config": json.dumps(custom_config),
            "train_args": json.dumps({"num_steps": 1}),  # the run-time parameter wins
            "eval_args": "{}",
            "train_steps": UPDATES,
        },
    )
    assert captured["project"] == "my-project" and captured["enable_vertex"], captured
    assert captured["vertex_region"] == "us-central1"
    return captured["training_job"]


def start(command: list[str], tf_config: dict | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    assert command[:3] == ["python", "-m", "tfx.scripts.run_executor"], command[:3]
    return subprocess.Popen(
        [sys.executable, *command[1:]],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def vertex_tf_configs(workers: int) -> list[dict]:
    """``TF_CONFIG`` as Vertex AI gives its replicas: pool 0 the chief, pool 1 workers."""
    hosts = [f"127.0.0.1:{port}" for port in free_ports(workers)]
    cluster = {"chief": hosts[:1], "worker": hosts[1:]}
    return [{"cluster": cluster, "task": {"type": "chief", "index": 0}, "environment": "cloud"}] + [
        {"cluster": cluster, "task": {"type": "worker", "index": i}, "environment": "cloud"}
        for i in range(workers - 1)
    ]


def finish(procs: list[subprocess.Popen], timeout: int = 600) -> list[str]:
    outputs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, out[-5000:]
            outputs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return outputs


def serving_scores(model_dir: Path, examples: list[bytes]) -> np.ndarray:
    loaded = tf.saved_model.load(str(model_dir))
    return loaded.signatures["serving_default"](examples=tf.constant(examples))["scores"].numpy()


@pytest.fixture(scope="module")
def eval_examples(first_run):
    from tfx.types import artifact_utils  # noqa: F401 - TFX's gzip'd TFRecords

    examples_dir = Path(_latest(first_run[0] / "pipeline" / "CsvExampleGen" / "examples"))
    files = sorted(str(p) for p in (examples_dir / "Split-eval").glob("*.gz"))
    return [r.numpy() for r in tf.data.TFRecordDataset(files, "GZIP").take(64)]


def test_a_two_machine_vertex_trainer_resumes_and_equals_one_device(
    first_run, eval_examples, tmp_path, monkeypatch
):
    run_dir = first_run[0]
    job = capture_vertex_job(run_dir, tmp_path / "cluster", 2, monkeypatch)
    pools = job["job_spec"]["worker_pool_specs"]
    # Pool 0: the chief; pool 1: the other worker; each TFX's run_executor with our executor.
    assert [p["replica_count"] for p in pools] == [1, 1]
    assert pools[0]["container_spec"]["command"] == pools[1]["container_spec"]["command"]
    command = pools[0]["container_spec"]["command"]
    executor = command[command.index("--executor_class_path") + 1]
    assert executor == "tfx_accum.components.training.trainer_component.TrainerExecutor"
    assert all(p["container_spec"]["image_uri"] == IMAGE for p in pools)
    assert job["job_spec"]["scheduling"] == {"restart_job_on_worker_restart": True}

    # The same job on one machine, for the reference (no TF_CONFIG: one device).
    single = capture_vertex_job(run_dir, tmp_path / "single", 1, monkeypatch)
    (single_pool,) = single["job_spec"]["worker_pool_specs"]
    reference = start(single_pool["container_spec"]["command"], None)
    finish([reference])

    # Two machines, killed once the chief has backed up an epoch, then run again.
    backup_root = tmp_path / "cluster" / "_backup"
    procs = [start(command, config) for config in vertex_tf_configs(2)]
    deadline = time.monotonic() + 600
    # TrainingBackup's state file of epoch n: written (atomically) after its weights.
    while not list(backup_root.glob("*/epoch-*.json")):
        for proc in procs:
            if proc.poll() is not None:  # ended before the first backup: say why
                finish(procs)
                pytest.fail("a worker ended before the first backup")
        assert time.monotonic() < deadline, "no backup after 10 minutes"
        time.sleep(0.05)
    for proc in procs:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    states = sorted(backup_root.glob("*/epoch-*.json"))
    resumed_at = int(states[-1].stem.removeprefix("epoch-"))
    assert resumed_at == 1, states
    outputs = finish([start(command, config) for config in vertex_tf_configs(2)])
    assert f"resuming after epoch {resumed_at}" in outputs[0], outputs[0][-3000:]
    assert "on 2 workers" in outputs[0]

    chief, one = tmp_path / "cluster", tmp_path / "single"
    # The chief alone wrote the outputs; the backup is gone once training ended.
    budget = json.loads((chief / "model_run" / "budget.json").read_text())
    expected = json.loads((one / "model_run" / "budget.json").read_text())
    assert budget == expected, (budget, expected)
    assert budget["updates"] == UPDATES and budget["global_batch"] == 32
    assert not list(backup_root.iterdir())
    scores = serving_scores(chief / "model" / "Format-Serving", eval_examples)
    want = serving_scores(one / "model" / "Format-Serving", eval_examples)
    assert np.max(np.abs(scores - want)) < 1e-5, np.max(np.abs(scores - want))


# --- one machine with several devices: MirroredStrategy, chosen by the Trainer itself ---

MIRRORED = Path(__file__).resolve().parents[1] / "mirrored_executor.py"


def run_mirrored(replicas: int, role: str, *args: str) -> str:
    """``tests/mirrored_executor.py``: a fresh process whose node has ``replicas`` devices."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, str(MIRRORED), str(replicas), role, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-5000:]
    return proc.stdout


def test_the_trainer_on_a_two_device_node_trains_mirrored_and_serves_the_one_device_model(
    first_run, eval_examples, tmp_path, monkeypatch
):
    """The Trainer's run_executor command in a fresh process on a node with two devices: its
    strategy choice is MirroredStrategy over both, and the exported, served model equals the
    same command's on one device (global batch 32 either way: k=4 of 8, 2 per replica)."""
    run_dir = first_run[0]
    outputs = {}
    for replicas in (1, 2):
        job = capture_vertex_job(run_dir, tmp_path / str(replicas), 1, monkeypatch)
        (pool,) = job["job_spec"]["worker_pool_specs"]
        command = pool["container_spec"]["command"]
        assert command[:3] == ["python", "-m", "tfx.scripts.run_executor"], command[:3]
        outputs[replicas] = run_mirrored(replicas, "trainer", *command[3:])
    # The Trainer's own line: how many replicas its strategy trained on.
    for replicas, output in outputs.items():
        assert f"held out; {replicas} replica(s))" in output, output[-3000:]
    budgets = [json.loads((tmp_path / r / "model_run" / "budget.json").read_text()) for r in "12"]
    assert budgets[0] == budgets[1] and budgets[0]["global_batch"] == 32, budgets
    scores = serving_scores(tmp_path / "2" / "model" / "Format-Serving", eval_examples)
    want = serving_scores(tmp_path / "1" / "model" / "Format-Serving", eval_examples)
    assert np.max(np.abs(scores - want)) < 1e-5, np.max(np.abs(scores - want))


def test_the_tuner_on_a_two_device_node_scores_its_trials_as_on_one_device(first_run, tmp_path):
    """The Tuner's executor in a fresh process on a two-device node: Keras Tuner's trials run
    under the MirroredStrategy it chose, and score as the same trials on one device."""
    searches = {}
    for replicas in (1, 2):
        out = run_mirrored(replicas, "tuner", str(first_run[0]), str(tmp_path / str(replicas)))
        searches[replicas] = json.loads(out.strip().splitlines()[-1])
    assert searches[2]["strategies"] == [["MirroredStrategy", 2]], searches[2]["strategies"]
    assert searches[1]["strategies"] == [["_DefaultDistributionStrategy", 1]]
    one, two = ({r["trial_id"]: r for r in searches[n]["rows"]} for n in (1, 2))
    assert len(one) == 2 and one.keys() == two.keys()
    for trial_id, row in two.items():
        assert row["accumulation_steps"] == one[trial_id]["accumulation_steps"]
        assert row["score"] == pytest.approx(one[trial_id]["score"], abs=1e-4), (row, one)
