"""``tfx-accum compile``: the pipeline for Kubeflow Pipelines (KFP v2) or Vertex AI Pipelines.

The pipeline is the same ``create_pipeline`` as the local run, with its run-time parameters
(``tfx_accum.pipeline.run_parameters``) declared. For self-hosted KFP the output is what
its backend accepts: a schema 2.1.0 pipeline spec in YAML, followed by a second YAML
document with the Kubernetes platform spec (node selectors and tolerations, which TFX never
emits). ``--target vertex`` writes the JSON ``PipelineJob`` with Vertex accelerator names.

``--trainer-workers N`` (N > 1, or a profile's ``trainer_workers``) with ``--target vertex``
makes the Trainer TFX's Vertex AI Training extension: its pipeline step launches a Vertex
AI ``CustomJob`` of N machines of the profile's type and accelerators, which train
together under ``MultiWorkerMirroredStrategy`` (tfx_accum.components.training.trainer_component,
tfx_accum.components.accumulation.multi_worker). Self-hosted KFP has no such service: there the
Trainer stays in one pod (see kubeflow/README.md for what a Training Operator path would take).

The node-pool profiles are ``tfx_accum.pipeline.kubeflow.profiles``; the edits of the
spec TFX compiles are ``tfx_accum.pipeline.kubeflow.spec``.

Example::

    compile_pipeline(node_pool="gpu", output="spec.yaml", image="REGISTRY/tfx-accum:0.1.0-gpu",
                     pipeline_root="gs://BUCKET/root", data_root="gs://BUCKET/data",
                     search_space=SearchSpace(max_trials=20))
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tfx_accum import console
from tfx_accum.atomic_files import atomic_write_text
from tfx_accum.components.config.search_space import SearchSpace
from tfx_accum.pipeline import config
from tfx_accum.pipeline.beam_args import pod_beam_args
from tfx_accum.pipeline.errors import InputError
from tfx_accum.pipeline.kubeflow import spec as spec_edits
from tfx_accum.pipeline.kubeflow.profiles import ProfileError, get_profile

TARGETS = ("kfp", "vertex")
# Vertex AI Pipelines' per-step ceiling.
VERTEX_MAX_CPU, VERTEX_MAX_MEMORY_GB = 96, 624
# What TensorFlow 2.16's file system can write without tensorflow-io: s3://, minio://,
# az:// and abfs:// moved out of TensorFlow.
WRITABLE_SCHEMES = ("gs",)
_URI = re.compile(r"^(gs|s3|minio|hdfs|abfs|az)://[A-Za-z0-9][^/\s]*(/\S*)?$")
_IMAGE = re.compile(r"^[a-z0-9]+(?:[._/:@-][A-Za-z0-9_.-]+)*$")
# Google Cloud project ids and Vertex AI regions (us-central1, europe-west4, ...).
_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_REGION = re.compile(r"^[a-z]+(?:-[a-z]+)+[0-9]+$")


def check_uri(name: str, value: str, target: str) -> str:
    """A URI every pod can reach and TensorFlow can write (or, for self-hosted KFP, an
    absolute path on a volume the pods share)."""
    if target == "vertex" and not value.startswith("gs://"):
        raise InputError(f"{name} must be a gs:// URI for Vertex AI, got {value!r}.")
    scheme = value.split("://", 1)[0] if "://" in value else None
    if scheme is not None and scheme not in WRITABLE_SCHEMES:
        raise InputError(
            f"{name} {value!r}: TensorFlow 2.16 cannot read or write {scheme}:// (it moved to "
            "tensorflow-io); use gs://BUCKET/path, or an absolute path on a volume every pod "
            "mounts."
        )
    if _URI.match(value) or (target == "kfp" and value.startswith("/") and "//" not in value):
        return value.rstrip("/")
    raise InputError(
        f"{name} {value!r} is not a usable URI: give a bucket URI such as "
        "gs://BUCKET/path, which every pod can reach."
    )


def compile_pipeline(
    *,
    node_pool: str,
    output: str,
    image: str,
    pipeline_root: str,
    data_root: str,
    search_space: SearchSpace,
    target: str = "kfp",
    profiles_file: str | None = None,
    trainer_workers: int | None = None,
    vertex_project: str | None = None,
    vertex_region: str | None = None,
    **pipeline_settings: Any,
) -> Path:
    """Validates everything, compiles, and writes ``output`` atomically; returns its path.

    ``pipeline_settings`` are :func:`~tfx_accum.pipeline.pipeline.create_pipeline`'s
    keyword arguments (``tune``, ``hyperparameters``, ``model_settings``, ``train_steps``,
    ``bless_metric``, ``bless_threshold``), the same as for a local run.
    ``trainer_workers`` (default: the profile's): machines of a Vertex AI Training job for
    the Trainer, in ``vertex_project`` and ``vertex_region`` (:func:`check_trainer_workers`).
    """
    if target not in TARGETS:
        raise InputError(f"--target must be one of {TARGETS}, got {target!r}.")
    pool = get_profile(node_pool, profiles_file)
    workers = check_trainer_workers(pool, target, trainer_workers, vertex_project, vertex_region)
    if target == "vertex" and pool.accelerated and not pool.vertex_type:
        raise ProfileError(
            f"Node-pool profile {pool.name!r} has no `accelerator.vertex_type`, "
            "which --target vertex needs."
        )
    if target == "vertex" and (pool.cpu > VERTEX_MAX_CPU or pool.memory_gb > VERTEX_MAX_MEMORY_GB):
        raise ProfileError(
            f"Node-pool profile {pool.name!r} asks for {pool.cpu:g} CPUs and {pool.memory}; "
            f"Vertex AI Pipelines allows at most {VERTEX_MAX_CPU} CPUs and "
            f"{VERTEX_MAX_MEMORY_GB}G per step. Use a profile within them (--profiles FILE)."
        )
    if not image or not _IMAGE.match(image):
        raise InputError(
            f"--image {image!r} is not a container image reference such as "
            "REGISTRY/PROJECT/tfx-accum:0.1.0."
        )
    pipeline_root = check_uri("--pipeline-root", pipeline_root, target)
    data_root = check_uri("--data-root", data_root, target)
    output_path = Path(output)
    suffix = ".yaml" if target == "kfp" else ".json"
    if output_path.suffix not in ((".yaml", ".yml") if target == "kfp" else (".json",)):
        raise InputError(f"--output must end in {suffix} for --target {target}, got {output!r}.")

    requested = pipeline_settings.get("parallel_trials")
    if requested is None:
        pipeline_settings["parallel_trials"] = pool.tuner_parallel_trials
    elif pool.kind == "gpu" and requested > pool.count:
        raise InputError(
            f"--parallel-trials {requested} is more than the {pool.count} GPU(s) of node pool "
            f"{pool.name!r}: each tuning worker holds one GPU. Use at most {pool.count}."
        )
    elif pool.kind == "tpu" and requested > 1:
        raise InputError(
            f"--parallel-trials {requested} on TPU node pool {pool.name!r}: a TPU host "
            "serves one process. Use 1."
        )
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner  # not tfx.v1

    from tfx_accum.pipeline import run_parameters
    from tfx_accum.pipeline.pipeline import create_pipeline

    if pipeline_settings.get("beam_pipeline_args") is None:
        # One worker per CPU of the data components' pods, not of the node.
        pipeline_settings["beam_pipeline_args"] = pod_beam_args(spec_edits.DEFAULT_CPU)
    pipeline = create_pipeline(
        pipeline_name=config.PIPELINE_NAME,
        pipeline_root=pipeline_root,
        data_root=data_root,
        serving_model_dir=f"{pipeline_root}/serving_model",
        search_space=search_space,
        **pipeline_settings,
        metadata_path=None,
        runtime_parameters=True,
    )
    # Several Trainer machines: its pipeline step only launches the Vertex AI job (no
    # accelerator); the job's machines get the profile's (vertex_job_spec).
    on_accelerators = [
        name
        for name in spec_edits.ACCELERATED_COMPONENTS
        if not (name == "Trainer" and workers > 1)
    ]
    accelerated = []
    for component in pipeline.components:
        is_accelerated = component.id in on_accelerators
        if component.id == "Trainer" and workers > 1:
            _train_on_vertex(component, pool, image, workers, vertex_project, vertex_region)
        resources = (
            spec_edits.resource_spec(pool.cpu, pool.memory_gb, pool, target)
            if is_accelerated
            else spec_edits.resource_spec(
                spec_edits.DEFAULT_CPU, float(spec_edits.DEFAULT_MEMORY[:-1]), None, target
            )
        )
        component.with_platform_config(resources)
        if is_accelerated:
            accelerated.append(f"{component.id}_executor")

    runner = kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(
            default_image=image, use_pipeline_spec_2_1=(target == "kfp")
        ),
        output_dir=tempfile.gettempdir(),
        output_filename=f"unused{suffix}",
    )
    defaults = run_parameters.defaults(pipeline)
    # Vertex AI: the defaults also go to the job's runtimeConfig (TFX writes them there).
    job = runner.run(pipeline, parameter_values=defaults, write_out=False)
    pipeline_spec = job["pipelineSpec"]
    spec_edits.complete_resources(pipeline_spec)
    spec_edits.add_retry_policy(pipeline_spec)
    spec_edits.never_cache_data_reads(pipeline_spec)
    spec_edits.expect_accelerator(pipeline_spec, pool, accelerated)
    spec_edits.declare_parameter_defaults(pipeline_spec, defaults)
    # The KFP backend does not read this for a run: the run's own pipeline root, else the
    # kfp-launcher ConfigMap's defaultPipelineRoot decides (backend/src/v2/driver/
    # root_dag.go, KFP 2.17), and it must equal this root, where _search, _backup and
    # serving_model are. kfp.local (run-compiled) and readers of the file use it.
    pipeline_spec["defaultPipelineRoot"] = pipeline_root
    if target == "kfp":
        header = (
            f"# tfx-accum pipeline for Kubeflow Pipelines, node pool {pool.name!r} "
            f"({pool.description}).\n# Document 1: pipeline spec (schema "
            f"{pipeline_spec.get('schemaVersion')}); document 2: Kubernetes platform "
            "spec.\n# Run-time parameters (kfp run create ... NAME=VALUE): "
            + ", ".join(f"{name}={value}" for name, value in defaults.items())
            + f".\n# The kfp-launcher ConfigMap's defaultPipelineRoot must be {pipeline_root}.\n"
        )
        text = header + yaml.safe_dump_all(
            [pipeline_spec, spec_edits.platform_spec(pool, accelerated)], sort_keys=True
        )
    else:
        text = json.dumps(job, indent=2, sort_keys=True)
    atomic_write_text(output_path, text)
    return output_path


def check_trainer_workers(
    pool, target: str, requested: int | None, project: str | None, region: str | None
) -> int:
    """The Trainer's machines (the request, else the profile's ``trainer_workers``), checked:
    more than one needs ``--target vertex``, a profile with a Vertex machine type and no
    TPU, and the Vertex AI project and region the job runs in. Raises ``InputError``."""
    workers = pool.trainer_workers if requested is None else requested
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InputError(f"--trainer-workers must be an integer >= 1, got {workers!r}.")
    if workers == 1:
        return 1
    if target != "vertex":
        raise InputError(
            f"--trainer-workers {workers} needs --target vertex (a Vertex AI Training job); "
            "on self-hosted Kubeflow Pipelines the Trainer runs in one pod: use a profile "
            "with more GPUs per node (a100x4, h100x8) or --trainer-workers 1 "
            "(kubeflow/README.md, 'Training beyond one node')."
        )
    if pool.kind == "tpu":
        raise InputError(
            f"--trainer-workers {workers} on TPU node pool {pool.name!r}: several TPU hosts "
            "train under TPUStrategy over one slice, not across workers. Use 1."
        )
    if not pool.training_machine_type:
        raise InputError(
            f"Node-pool profile {pool.name!r} has no `vertex_machine_type`, which "
            f"--trainer-workers {workers} needs for the Vertex AI Training machines; add "
            "one (for example g2-standard-8) in a --profiles file."
        )
    if not project or not _PROJECT.match(project):
        raise InputError(
            f"--trainer-workers {workers} runs a Vertex AI Training job: give "
            f"--vertex-project PROJECT_ID (got {project!r})."
        )
    if not region or not _REGION.match(region):
        raise InputError(
            f"--trainer-workers {workers} runs a Vertex AI Training job: give --vertex-region "
            f"such as us-central1 (got {region!r})."
        )
    return workers


def _train_on_vertex(trainer, pool, image: str, workers: int, project: str, region: str) -> None:
    """The Trainer as TFX's Vertex AI Training extension on ``workers`` machines."""
    from tfx_accum.components.accumulation.strategy import ACCELERATOR_ENV, NODE_POOL_ENV
    from tfx_accum.components.training.vertex_trainer import train_on_vertex, vertex_job_spec

    job_spec = vertex_job_spec(
        image,
        workers,
        pool.training_machine_type,
        pool.vertex_type if pool.accelerated else None,
        pool.count,
        # What each machine must see (strategy.check_accelerators), as in a pod.
        env={ACCELERATOR_ENV: f"{pool.kind}:{pool.count}", NODE_POOL_ENV: pool.name},
    )
    train_on_vertex(trainer, job_spec, project, region)


def add_compile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--node-pool",
        required=True,
        help="node-pool profile for Tuner and Trainer (see "
        "kubeflow/node_pools.yaml: cpu, gpu, tpu, t4, a100x4, h100x8, ...)",
    )
    parser.add_argument(
        "--output", required=True, help="file to write: .yaml for KFP, .json for Vertex"
    )
    parser.add_argument(
        "--image", required=True, help="container image built from kubeflow/Dockerfile"
    )
    parser.add_argument(
        "--pipeline-root",
        required=True,
        help="remote URI for artifacts, e.g. gs://BUCKET/tfx-accum",
    )
    parser.add_argument(
        "--data-root",
        required=True,
        help="remote URI of the CSV or TFRecord directory, e.g. gs://BUCKET/data/digits",
    )
    parser.add_argument(
        "--target",
        choices=TARGETS,
        default="kfp",
        help="kfp: self-hosted Kubeflow Pipelines (YAML, default); "
        "vertex: Vertex AI Pipelines (JSON PipelineJob)",
    )
    parser.add_argument(
        "--profiles", default=None, help="extra YAML file of node-pool profiles (same shape)"
    )
    parser.add_argument(
        "--trainer-workers",
        type=int,
        default=None,
        help="machines the Trainer trains on together (MultiWorkerMirroredStrategy), each "
        "with the node pool's accelerators; more than 1 needs --target vertex and runs a "
        "Vertex AI Training job (default: the profile's trainer_workers, 1)",
    )
    parser.add_argument(
        "--vertex-project",
        default=None,
        help="Google Cloud project of the Vertex AI Training job (--trainer-workers > 1)",
    )
    parser.add_argument(
        "--vertex-region",
        default=None,
        help="Vertex AI region of the training job, e.g. us-central1 (--trainer-workers > 1)",
    )


def compile_from_args(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    """``tfx-accum compile``: ``settings`` are ``create_pipeline``'s, as for ``run``."""
    path = compile_pipeline(
        node_pool=args.node_pool,
        output=args.output,
        image=args.image,
        pipeline_root=args.pipeline_root,
        data_root=args.data_root,
        target=args.target,
        profiles_file=args.profiles,
        trainer_workers=args.trainer_workers,
        vertex_project=args.vertex_project,
        vertex_region=args.vertex_region,
        **settings,
    )
    console.say(f"[compile] wrote {path} for {args.target} (node pool {args.node_pool})")
    return 0
