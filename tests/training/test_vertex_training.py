"""``--target vertex --trainer-workers N``: the Trainer as TFX's Vertex AI Training job.

The compiled ``PipelineJob`` is validated with KFP's current protos, loaded by
``google.cloud.aiplatform.PipelineJob`` (as ``job.submit()`` would, offline), and its
Trainer's ``CustomJobSpec`` is parsed by Vertex AI's own proto and checked pool by pool.
The job's worker side (each pool's command run on two machines) is
tests/training/test_multi_worker_trainer.py.
"""

from __future__ import annotations

import json
import warnings

import pytest
from test_kubeflow import ARGS, IMAGE, compile_argv, validate

from tfx_accum.pipeline import InputError
from tfx_accum.pipeline.cli.parser import main
from tfx_accum.pipeline.kubeflow.compiler import compile_pipeline

VERTEX = dict(vertex_project="my-project", vertex_region="us-central1")


def trainer_config(job: dict) -> dict:
    """The Trainer task's custom_config, as the compiled job carries it."""
    parameters = job["pipelineSpec"]["root"]["dag"]["tasks"]["Trainer"]["inputs"]["parameters"]
    return json.loads(parameters["custom_config"]["runtimeValue"]["constantValue"]["stringValue"])


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    path = tmp_path_factory.mktemp("vertex") / "vertex.json"
    argv = compile_argv("gpu", path, "--target", "vertex", "--trainer-workers", "2")
    assert main([*argv, "--vertex-project", "my-project", "--vertex-region", "us-central1"]) == 0
    return path


def test_the_two_worker_spec_validates_and_builds_a_vertex_pipeline_job(two_workers):
    summary = validate(two_workers)
    assert summary["format"] == "PipelineJob JSON"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import aiplatform

    job = aiplatform.PipelineJob(
        display_name="tfx-accum",
        template_path=str(two_workers),
        project="my-project",
        location="us-central1",
        credentials=AnonymousCredentials(),
    )
    built = job.to_dict()  # the PipelineJob that job.submit() would send
    assert built["runtimeConfig"]["gcsOutputDirectory"] == ARGS["pipeline_root"]
    assert "Trainer" in built["pipelineSpec"]["root"]["dag"]["tasks"]
    # The Trainer's step launches the job: TFX's Vertex executor, on no accelerator;
    # the Tuner keeps the profile's GPU.
    trainer = summary["executors"]["Trainer_executor"]
    args = (
        trainer["command"]
        + json.loads(two_workers.read_text())["pipelineSpec"]["deploymentSpec"]["executors"][
            "Trainer_executor"
        ]["container"]["args"]
    )
    assert "tfx_accum.components.training.vertex_trainer.VertexTrainerExecutor" in args
    assert "accelerator" not in trainer["resources"]
    assert summary["executors"]["Tuner_executor"]["resources"]["accelerator"]["type"] == "NVIDIA_L4"


def test_the_worker_pools_are_the_profiles_machines_running_the_image(two_workers):
    from google.cloud import aiplatform_v1

    from tfx_accum.components.training.trainer_component import TrainerExecutor
    from tfx_accum.components.training.vertex_trainer import VertexTrainerExecutor

    config = trainer_config(json.loads(two_workers.read_text()))
    assert config["ai_platform_enable_vertex"] is True
    assert config["ai_platform_vertex_region"] == "us-central1"
    training = config["ai_platform_training_args"]
    assert training["project"] == "my-project"
    spec = training["job_spec"]
    aiplatform_v1.types.CustomJobSpec(spec)  # Vertex AI's proto: unknown fields raise
    pools = spec["worker_pool_specs"]
    machine = {"machine_type": "g2-standard-8", "accelerator_type": "NVIDIA_L4",
               "accelerator_count": 1}  # fmt: skip
    env = [
        {"name": "TFX_ACCUM_ACCELERATOR", "value": "gpu:1"},
        {"name": "TFX_ACCUM_NODE_POOL", "value": "gpu"},
    ]
    # Pool 0 is the chief (one replica), pool 1 the other worker.
    assert [p["replica_count"] for p in pools] == [1, 1]
    for pool in pools:
        assert pool["machine_spec"] == machine
        assert pool["container_spec"] == {"image_uri": IMAGE, "env": env}
    assert spec["scheduling"] == {"restart_job_on_worker_restart": True}
    # The same module and custom config as the in-pipeline Trainer; every replica runs
    # this project's Trainer executor (TFX fills in each pool's command with it).
    assert config["backup_root"] == f"{ARGS['pipeline_root']}/_backup"
    assert config["seed"] == 42
    assert VertexTrainerExecutor(None)._GetExecutorClass() is TrainerExecutor
    parameters = json.loads(two_workers.read_text())["pipelineSpec"]["root"]["dag"]["tasks"][
        "Trainer"
    ]["inputs"]["parameters"]
    run_fn = parameters["run_fn"]["runtimeValue"]["constantValue"]["stringValue"]
    assert run_fn == "tfx_accum.components.training.trainer_module.run_fn"
    assert "train_steps" in parameters  # the run-time parameter reaches the workers too
    inputs = json.loads(two_workers.read_text())["pipelineSpec"]["root"]["dag"]["tasks"]["Trainer"][
        "inputs"
    ]["artifacts"]
    assert sorted(inputs) == ["examples", "hyperparameters", "schema", "statistics"]


def test_more_workers_of_a_multi_gpu_profile(tmp_path):
    path = compile_pipeline(
        node_pool="a100x4",
        output=str(tmp_path / "v.json"),
        target="vertex",
        trainer_workers=4,
        **VERTEX,
        **ARGS,
    )
    pools = trainer_config(json.loads(path.read_text()))["ai_platform_training_args"]["job_spec"][
        "worker_pool_specs"
    ]
    assert [p["replica_count"] for p in pools] == [1, 3]
    assert pools[1]["machine_spec"] == {
        "machine_type": "a2-highgpu-4g",
        "accelerator_type": "NVIDIA_TESLA_A100",
        "accelerator_count": 4,
    }


def test_one_worker_keeps_the_trainer_in_its_pipeline_step(tmp_path):
    path = compile_pipeline(
        node_pool="gpu", output=str(tmp_path / "v.json"), target="vertex", trainer_workers=1, **ARGS
    )
    job = json.loads(path.read_text())
    assert "ai_platform_training_args" not in trainer_config(job)
    executor = job["pipelineSpec"]["deploymentSpec"]["executors"]["Trainer_executor"]
    assert (
        "tfx_accum.components.training.trainer_component.TrainerExecutor"
        in executor["container"]["args"]
    )
    assert executor["container"]["resources"]["accelerator"]["type"] == "NVIDIA_L4"


def test_a_profiles_trainer_workers_is_the_default(tmp_path):
    extra = tmp_path / "pools.yaml"
    extra.write_text(
        "l4-cluster:\n  accelerator: {kind: gpu, count: 1, gke_label: nvidia-l4, "
        "vertex_type: NVIDIA_L4}\n  cpu: 7\n  memory: 28G\n  trainer_workers: 3\n"
        "  vertex_machine_type: g2-standard-12\n"
    )
    path = compile_pipeline(
        node_pool="l4-cluster",
        output=str(tmp_path / "v.json"),
        target="vertex",
        profiles_file=str(extra),
        **VERTEX,
        **ARGS,
    )
    spec = trainer_config(json.loads(path.read_text()))["ai_platform_training_args"]["job_spec"]
    assert [p["replica_count"] for p in spec["worker_pool_specs"]] == [1, 2]
    assert spec["worker_pool_specs"][0]["machine_spec"]["machine_type"] == "g2-standard-12"


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(target="kfp", output="o.yaml"), "needs --target vertex"),
        (dict(node_pool="tpu"), "TPU node pool 'tpu'"),
        (dict(vertex_project=None), "give --vertex-project PROJECT_ID"),
        (dict(vertex_project="My Project"), "give --vertex-project PROJECT_ID"),
        (dict(vertex_region="europe"), "give --vertex-region such as us-central1"),
        (dict(trainer_workers=0), "--trainer-workers must be an integer >= 1"),
    ],
)
def test_what_a_multi_machine_trainer_needs_is_checked_before_compiling(tmp_path, kwargs, message):
    args = {
        **ARGS,
        **VERTEX,
        "node_pool": "gpu",
        "target": "vertex",
        "trainer_workers": 2,
        "output": "o.json",
        **kwargs,
    }
    args["output"] = str(tmp_path / args["output"])
    with pytest.raises(InputError, match=message) as error:
        compile_pipeline(**args)
    assert "\n" not in str(error.value)
    assert list(tmp_path.iterdir()) == []


def test_a_profile_without_a_vertex_machine_type_is_named(tmp_path):
    extra = tmp_path / "pools.yaml"
    extra.write_text(
        "bare:\n  accelerator: {kind: gpu, count: 1, gke_label: nvidia-l4, "
        "vertex_type: NVIDIA_L4}\n  cpu: 7\n  memory: 28G\n"
    )
    with pytest.raises(InputError, match="'bare' has no `vertex_machine_type`"):
        compile_pipeline(
            node_pool="bare",
            output=str(tmp_path / "v.json"),
            target="vertex",
            profiles_file=str(extra),
            trainer_workers=2,
            **VERTEX,
            **ARGS,
        )


@pytest.mark.parametrize(
    "field,message",
    [
        ("trainer_workers: 0", "`trainer_workers` must be an integer >= 1"),
        ("vertex_machine_type: G2 Standard", "`vertex_machine_type` must be"),
    ],
)
def test_malformed_trainer_fields_of_a_profile(tmp_path, field, message):
    extra = tmp_path / "pools.yaml"
    extra.write_text(
        "odd:\n  accelerator: {kind: gpu, count: 1, gke_label: nvidia-l4}\n"
        f"  cpu: 7\n  memory: 28G\n  {field}\n"
    )
    with pytest.raises(InputError, match=message):
        compile_pipeline(
            node_pool="odd", output=str(tmp_path / "v.yaml"), profiles_file=str(extra), **ARGS
        )


def test_a_tpu_profile_cannot_ask_for_trainer_workers(tmp_path):
    extra = tmp_path / "pools.yaml"
    extra.write_text(
        "slice:\n  accelerator: {kind: tpu, count: 4, gke_label: tpu-v5-lite-podslice, "
        "topology: 2x2}\n  machine_type: ct5lp-hightpu-4t\n  cpu: 100\n  memory: 180G\n"
        "  trainer_workers: 2\n"
    )
    with pytest.raises(InputError, match="`trainer_workers` must be 1 on a TPU pool"):
        compile_pipeline(
            node_pool="slice", output=str(tmp_path / "v.yaml"), profiles_file=str(extra), **ARGS
        )
