"""Compiles the pipeline for Kubeflow Pipelines (self-hosted, KFP v2) or Vertex AI Pipelines.

The pipeline is the same ``create_pipeline`` as the local run. For self-hosted KFP the
output is what its backend accepts: a schema 2.1.0 pipeline spec in YAML, followed by a
second YAML document with the Kubernetes platform spec (node selectors and tolerations,
which TFX never emits). ``--target vertex`` writes the JSON ``PipelineJob`` with Vertex
accelerator names instead.

Node-pool profiles come from ``kubeflow/node_pools.yaml`` (plus ``--profiles FILE``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tfx_accum import console
from tfx_accum.components.search_space import SearchSpace
from tfx_accum.components.strategy import ACCELERATOR_ENV, NODE_POOL_ENV
from tfx_accum.pipeline import config
from tfx_accum.pipeline.beam import pod_beam_args
from tfx_accum.pipeline.errors import InputError
from tfx_accum.pipeline.files import atomic_write_text

# Shipped as package data (kubeflow/node_pools.yaml in the repository).
PROFILES_RESOURCE = ("tfx_accum.kubeflow", "node_pools.yaml")
TARGETS = ("kfp", "vertex")
ACCELERATED_COMPONENTS = ("Tuner", "Trainer")
RESOURCE_NAMES = {"gpu": "nvidia.com/gpu", "tpu": "google.com/tpu"}
GKE_LABELS = {
    "gpu": "cloud.google.com/gke-accelerator",
    "tpu": "cloud.google.com/gke-tpu-accelerator",
}
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
MACHINE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# Vertex AI Pipelines' per-step ceiling.
VERTEX_MAX_CPU, VERTEX_MAX_MEMORY_GB = 96, 624
# What TensorFlow 2.16's file system can write without tensorflow-io: s3://, minio://,
# az:// and abfs:// moved out of TensorFlow.
WRITABLE_SCHEMES = ("gs",)

# Modest resources for the data components (ExampleGen, StatisticsGen, ...).
DEFAULT_CPU, DEFAULT_MEMORY = 2.0, "8G"
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)([GM])i?$")
_URI = re.compile(r"^(gs|s3|minio|hdfs|abfs|az)://[A-Za-z0-9][^/\s]*(/\S*)?$")
_IMAGE = re.compile(r"^[a-z0-9]+(?:[._/:@-][A-Za-z0-9_.-]+)*$")


class ProfileError(InputError):
    """A node-pool profile is unknown or malformed."""


@dataclasses.dataclass(frozen=True)
class NodePool:
    name: str
    kind: str
    count: int
    gke_label: str
    cpu: float
    memory: str
    topology: str | None = None
    vertex_type: str | None = None
    description: str = ""
    machine_type: str | None = None
    parallel_trials: int | None = None  # None: one per GPU (1 without GPUs)

    @property
    def tuner_parallel_trials(self) -> int:
        """Trials the Tuner pod runs side by side: one per GPU unless the profile says."""
        if self.parallel_trials is not None:
            return self.parallel_trials
        return self.count if self.kind == "gpu" else 1

    @property
    def resource_name(self) -> str | None:
        return RESOURCE_NAMES.get(self.kind)

    @property
    def accelerated(self) -> bool:
        return self.kind in RESOURCE_NAMES

    @property
    def memory_gb(self) -> float:
        value, unit = _MEMORY.match(self.memory).groups()
        return float(value) / (1024.0 if unit == "M" else 1.0)

    def node_selector(self) -> dict[str, str]:
        if not self.accelerated:
            return {MACHINE_TYPE_LABEL: self.machine_type} if self.machine_type else {}
        labels = {GKE_LABELS[self.kind]: self.gke_label}
        if self.topology:
            labels[TPU_TOPOLOGY_LABEL] = self.topology
        if self.machine_type:
            # The accelerator and topology labels alone also match a multi-host slice,
            # where a pod asking for all chips of one host stays Pending.
            labels[MACHINE_TYPE_LABEL] = self.machine_type
        return labels

    def tolerations(self) -> list[dict[str, str]]:
        if not self.accelerated:
            return []
        return [
            {
                "key": self.resource_name,
                "operator": "Equal",
                "value": "present",
                "effect": "NoSchedule",
            }
        ]


def _profile(name: str, raw: Any, known: list[str]) -> NodePool:
    def bad(problem: str) -> ProfileError:
        return ProfileError(
            f"Node-pool profile {name!r} is malformed: {problem}. "
            f"Known profiles: {', '.join(known)}."
        )

    if not isinstance(raw, dict):
        raise bad("it must be a mapping with accelerator, cpu and memory")
    accel = raw.get("accelerator")
    if accel is None:  # a CPU-only pool
        accel = {"kind": "cpu", "count": 0, "gke_label": ""}
    if not isinstance(accel, dict):
        raise bad("`accelerator` must be a mapping with kind, count and gke_label")
    kind = accel.get("kind")
    if kind not in (*RESOURCE_NAMES, "cpu"):
        raise bad(f"`accelerator.kind` must be gpu or tpu (or leave accelerator out), got {kind!r}")
    count = accel.get("count")
    if kind != "cpu" and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise bad(f"`accelerator.count` must be an integer >= 1, got {count!r}")
    label = accel.get("gke_label")
    if kind != "cpu" and (not isinstance(label, str) or not label):
        raise bad("`accelerator.gke_label` must be a GKE accelerator label such as nvidia-l4")
    topology = accel.get("topology")
    if kind == "tpu" and not (
        isinstance(topology, str) and re.match(r"^\d+x\d+(x\d+)?$", topology)
    ):
        raise bad(f"TPU profiles need `accelerator.topology` such as 2x2, got {topology!r}")
    machine_type = raw.get("machine_type")
    if kind == "tpu" and not (isinstance(machine_type, str) and machine_type):
        raise bad(
            "TPU profiles need `machine_type` (such as ct5lp-hightpu-4t), so that the node "
            "selector matches single-host slices only"
        )
    cpu = raw.get("cpu")
    if isinstance(cpu, bool) or not isinstance(cpu, int | float) or cpu <= 0:
        raise bad(f"`cpu` must be a positive number, got {cpu!r}")
    memory = raw.get("memory")
    if not isinstance(memory, str) or not _MEMORY.match(memory):
        raise bad(f"`memory` must be a quantity such as 28G or 512M, got {memory!r}")
    vertex = accel.get("vertex_type")
    if vertex is not None and not (isinstance(vertex, str) and re.match(r"^[A-Z0-9_]+$", vertex)):
        raise bad(
            f"`accelerator.vertex_type` must be a Vertex enum such as NVIDIA_L4, got {vertex!r}"
        )
    parallel = raw.get("parallel_trials")
    if parallel is not None and (
        isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1
    ):
        raise bad(f"`parallel_trials` must be an integer >= 1, got {parallel!r}")
    if parallel is not None and parallel > 1 and kind == "tpu":
        raise bad("`parallel_trials` must be 1 on a TPU pool (a TPU host serves one process)")
    unknown = sorted(
        set(raw)
        - {"description", "accelerator", "cpu", "memory", "machine_type", "parallel_trials"}
    ) + sorted(set(accel) - {"kind", "count", "gke_label", "topology", "vertex_type"})
    if unknown:
        raise bad(f"unknown fields {unknown}")
    return NodePool(
        name,
        kind,
        count,
        label,
        float(cpu),
        memory,
        topology if kind == "tpu" else None,
        vertex,
        str(raw.get("description", "")),
        machine_type if isinstance(machine_type, str) else None,
        parallel,
    )


def _read_profiles_file(path: Path | None) -> dict[str, Any]:
    """One profiles file; ``None`` reads the built-in profiles shipped with the package."""
    if path is None:
        from importlib import resources

        package, name = PROFILES_RESOURCE
        path, text = Path(name), resources.files(package).joinpath(name).read_text()
    elif not path.is_file():
        raise ProfileError(f"Profiles file {str(path)!r} does not exist.")
    else:
        text = path.read_text()
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise ProfileError(f"Profiles file {str(path)!r} is not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"Profiles file {str(path)!r} must map profile names to profiles.")
    return data


def load_profiles(extra_file: str | Path | None = None) -> dict[str, NodePool]:
    """The built-in profiles plus (overriding) those of ``extra_file``, all validated."""
    raw = _read_profiles_file(None)
    if extra_file is not None:
        raw.update(_read_profiles_file(Path(extra_file)))
    known = sorted(raw)
    return {name: _profile(name, value, known) for name, value in raw.items()}


def get_profile(name: str, extra_file: str | Path | None = None) -> NodePool:
    profiles = load_profiles(extra_file)
    if name not in profiles:
        raise ProfileError(
            f"Unknown node pool {name!r}. Known profiles: "
            f"{', '.join(sorted(profiles))}. Add your own with --profiles FILE."
        )
    return profiles[name]


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


def _resource_spec(cpu: float, memory_gb: float, pool: NodePool | None, target: str):
    from kfp.pipeline_spec import pipeline_spec_pb2

    spec = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec(
        cpu_limit=cpu, memory_limit=memory_gb
    )
    if pool is not None and pool.accelerated:
        # compile_pipeline has checked that a vertex target's profile has a vertex_type.
        spec.accelerator.type = pool.resource_name if target == "kfp" else pool.vertex_type
        spec.accelerator.count = pool.count
    return spec


def _complete_resources(pipeline_spec: dict[str, Any]) -> None:
    """Adds the newer string resource fields beside the deprecated ones, as the KFP SDK does.

    TFX 1.16 builds with an older pipeline-spec proto that has only the deprecated fields,
    and gives the file-based ExampleGen container no resources at all: it gets the modest
    default here like the other data components.
    """
    for executor in pipeline_spec.get("deploymentSpec", {}).get("executors", {}).values():
        container = executor.get("container")
        if container is None:
            continue
        resources = container.setdefault(
            "resources", {"cpuLimit": DEFAULT_CPU, "memoryLimit": float(DEFAULT_MEMORY[:-1])}
        )
        if "cpuLimit" in resources:
            resources["resourceCpuLimit"] = f"{resources['cpuLimit']:g}"
        if "memoryLimit" in resources:
            resources["resourceMemoryLimit"] = f"{resources['memoryLimit']:g}G"
        accelerator = resources.get("accelerator")
        if accelerator:
            accelerator["resourceType"] = accelerator["type"]
            accelerator["resourceCount"] = str(accelerator["count"])


# A preempted (spot) accelerator pod is retried; the Trainer resumes from its backup.
RETRY_POLICY = {
    "maxRetryCount": 3,
    "backoffDuration": "60s",
    "backoffFactor": 2.0,
    "backoffMaxDuration": "600s",
}


def _add_retry_policy(pipeline_spec: dict[str, Any]) -> None:
    tasks = pipeline_spec.get("root", {}).get("dag", {}).get("tasks", {})
    for name in ACCELERATED_COMPONENTS:
        if name in tasks:
            tasks[name]["retryPolicy"] = dict(RETRY_POLICY)


# Never served from the cache on Kubeflow: it is what reads the data root.
UNCACHED_COMPONENTS = ("CsvExampleGen", "ImportExampleGen")


def _never_cache_data_reads(pipeline_spec: dict[str, Any]) -> None:
    """ExampleGen reads the data root on every run.

    Locally, TFX's ``preCacheCheck`` fingerprints the input files first; on KFP nothing runs
    it, so the cache key of ExampleGen is its constant parameters, and new CSV files under
    the same data root would be served the old examples (and the old model, as a
    "success"). Its new examples then change every downstream task's inputs, so those rerun
    too: a KFP run always trains on the data root's current content.
    """
    tasks = pipeline_spec.get("root", {}).get("dag", {}).get("tasks", {})
    for name in UNCACHED_COMPONENTS:
        if name in tasks:
            tasks[name]["cachingOptions"] = {"enableCache": False}


def _expect_accelerator(pipeline_spec: dict[str, Any], pool: NodePool, labels: list[str]):
    """Tells the Tuner and Trainer containers what the profile promised, so that a pod
    that sees fewer devices (no driver on the library path, a CPU image) stops with an
    error instead of training on the CPU (strategy.check_accelerators)."""
    executors = pipeline_spec.get("deploymentSpec", {}).get("executors", {})
    for label in labels:
        container = executors.get(label, {}).get("container")
        if container is not None:
            env = [
                e
                for e in container.get("env", [])
                if e["name"] not in (ACCELERATOR_ENV, NODE_POOL_ENV)
            ]
            env.append({"name": ACCELERATOR_ENV, "value": f"{pool.kind}:{pool.count}"})
            env.append({"name": NODE_POOL_ENV, "value": pool.name})
            container["env"] = env


def _platform_spec(pool: NodePool, labels: list[str]) -> dict[str, Any]:
    executors = {}
    for label in labels:
        executor: dict[str, Any] = {}
        if pool.node_selector():
            executor["nodeSelector"] = {"labels": pool.node_selector()}
        if pool.tolerations():
            executor["tolerations"] = pool.tolerations()
        if executor:
            executors[label] = executor
    return {"platforms": {"kubernetes": {"deploymentSpec": {"executors": executors}}}}


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
    **pipeline_settings: Any,
) -> Path:
    """Validates everything, compiles, and writes ``output`` atomically; returns its path.

    ``pipeline_settings`` are :func:`~tfx_accum.pipeline.pipeline.create_pipeline`'s
    keyword arguments (``tune``, ``hyperparameters``, ``model_settings``, ``train_steps``,
    ``bless_metric``, ``bless_threshold``), the same as for a local run.
    """
    if target not in TARGETS:
        raise InputError(f"--target must be one of {TARGETS}, got {target!r}.")
    pool = get_profile(node_pool, profiles_file)
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

    from tfx import v1 as tfx

    from tfx_accum.pipeline.pipeline import create_pipeline

    if pipeline_settings.get("parallel_trials") is None:
        pipeline_settings["parallel_trials"] = pool.tuner_parallel_trials
    if pipeline_settings.get("beam_pipeline_args") is None:
        # One worker per CPU of the data components' pods, not of the node.
        pipeline_settings["beam_pipeline_args"] = pod_beam_args(DEFAULT_CPU)
    pipeline = create_pipeline(
        pipeline_name=config.PIPELINE_NAME,
        pipeline_root=pipeline_root,
        data_root=data_root,
        serving_model_dir=f"{pipeline_root}/serving_model",
        search_space=search_space,
        **pipeline_settings,
        metadata_path=None,
    )
    accelerated = []
    for component in pipeline.components:
        is_accelerated = component.id in ACCELERATED_COMPONENTS
        spec = (
            _resource_spec(pool.cpu, pool.memory_gb, pool, target)
            if is_accelerated
            else _resource_spec(DEFAULT_CPU, float(DEFAULT_MEMORY[:-1]), None, target)
        )
        component.with_platform_config(spec)
        if is_accelerated:
            accelerated.append(f"{component.id}_executor")

    runner = tfx.orchestration.experimental.KubeflowV2DagRunner(
        config=tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(
            default_image=image, use_pipeline_spec_2_1=(target == "kfp")
        ),
        output_dir=tempfile.gettempdir(),
        output_filename=f"unused{suffix}",
    )
    job = runner.run(pipeline, write_out=False)
    pipeline_spec = job["pipelineSpec"]
    _complete_resources(pipeline_spec)
    _add_retry_policy(pipeline_spec)
    _never_cache_data_reads(pipeline_spec)
    _expect_accelerator(pipeline_spec, pool, accelerated)
    # Carried in the spec itself: `kfp run create` has no option for it, and the backend's
    # fallback (minio://mlpipeline/...) is not writable by TensorFlow.
    pipeline_spec["defaultPipelineRoot"] = pipeline_root
    if target == "kfp":
        header = (
            f"# tfx-accum pipeline for Kubeflow Pipelines, node pool {pool.name!r} "
            f"({pool.description}).\n# Document 1: pipeline spec (schema "
            f"{pipeline_spec.get('schemaVersion')}); document 2: Kubernetes platform "
            "spec.\n"
        )
        text = header + yaml.safe_dump_all(
            [pipeline_spec, _platform_spec(pool, accelerated)], sort_keys=True
        )
    else:
        text = json.dumps(job, indent=2, sort_keys=True)
    atomic_write_text(output_path, text)
    return output_path


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
        **settings,
    )
    console.say(f"[compile] wrote {path} for {args.target} (node pool {args.node_pool})")
    return 0
