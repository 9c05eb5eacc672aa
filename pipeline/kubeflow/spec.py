"""Edits of the pipeline spec that TFX's ``KubeflowV2DagRunner`` compiles, and the platform spec.

TFX 1.16 writes a valid spec, but one that self-hosted KFP and Vertex AI run poorly: no
newer resource fields, no retries, ExampleGen cached although nothing fingerprints the data
root on KFP, no defaults for the run-time parameters, and no node selectors or tolerations
(which KFP reads from a second, Kubernetes platform-spec document). Each function here is
one such edit of the spec as a plain dict (``job["pipelineSpec"]``), applied in
:func:`tfx_accum.pipeline.kubeflow.compiler.compile_pipeline`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfx_accum.components.accumulation.strategy import ACCELERATOR_ENV, NODE_POOL_ENV
from tfx_accum.pipeline.kubeflow.profiles import NodePool

# Modest resources for the data components (ExampleGen, StatisticsGen, ...).
DEFAULT_CPU, DEFAULT_MEMORY = 2.0, "8G"
ACCELERATED_COMPONENTS = ("Tuner", "Trainer")
# Never served from the cache on Kubeflow: it is what reads the data root.
UNCACHED_COMPONENTS = ("CsvExampleGen", "ImportExampleGen")
# A preempted (spot) accelerator pod is retried; the Trainer resumes from its backup.
RETRY_POLICY = {
    "maxRetryCount": 3,
    "backoffDuration": "60s",
    "backoffFactor": 2.0,
    "backoffMaxDuration": "600s",
}


def resource_spec(cpu: float, memory_gb: float, pool: NodePool | None, target: str):
    """The KFP ``ResourceSpec`` a component is compiled with (its platform config)."""
    from kfp.pipeline_spec import pipeline_spec_pb2

    spec = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec(
        cpu_limit=cpu, memory_limit=memory_gb
    )
    if pool is not None and pool.accelerated:
        # compile_pipeline has checked that a vertex target's profile has a vertex_type.
        spec.accelerator.type = pool.resource_name if target == "kfp" else pool.vertex_type
        spec.accelerator.count = pool.count
    return spec


def _tasks(pipeline_spec: dict[str, Any]) -> dict[str, Any]:
    return pipeline_spec.get("root", {}).get("dag", {}).get("tasks", {})


def _executors(pipeline_spec: dict[str, Any]) -> dict[str, Any]:
    return pipeline_spec.get("deploymentSpec", {}).get("executors", {})


def complete_resources(pipeline_spec: dict[str, Any]) -> None:
    """Adds the newer string resource fields beside the deprecated ones, as the KFP SDK does.

    TFX 1.16 builds with an older pipeline-spec proto that has only the deprecated fields,
    and gives the file-based ExampleGen container no resources at all: it gets the modest
    default here like the other data components.
    """
    for executor in _executors(pipeline_spec).values():
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


def add_retry_policy(pipeline_spec: dict[str, Any]) -> None:
    """The Tuner and Trainer tasks are retried (a preempted spot pod resumes its state)."""
    tasks = _tasks(pipeline_spec)
    for name in ACCELERATED_COMPONENTS:
        if name in tasks:
            tasks[name]["retryPolicy"] = dict(RETRY_POLICY)


def never_cache_data_reads(pipeline_spec: dict[str, Any]) -> None:
    """ExampleGen reads the data root on every run.

    Locally, TFX's ``preCacheCheck`` fingerprints the input files first; on KFP nothing runs
    it, so the cache key of ExampleGen is its constant parameters, and new CSV files under
    the same data root would be served the old examples (and the old model, as a
    "success"). Its new examples then change every downstream task's inputs, so those rerun
    too; the Tuner's search and the Trainer's backup are keyed by the examples' content
    (tfx_accum.components.data.datasets), so a rerun on unchanged data reuses the finished search.
    """
    tasks = _tasks(pipeline_spec)
    for name in UNCACHED_COMPONENTS:
        if name in tasks:
            tasks[name]["cachingOptions"] = {"enableCache": False}


def expect_accelerator(pipeline_spec: dict[str, Any], pool: NodePool, labels: list[str]) -> None:
    """Tells the Tuner and Trainer containers what the profile promised, so that a pod
    that sees fewer devices (no driver on the library path, a CPU image) stops with an
    error instead of training on the CPU (strategy.check_accelerators)."""
    executors = _executors(pipeline_spec)
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


def declare_parameter_defaults(pipeline_spec: dict[str, Any], defaults: Mapping[str, Any]) -> None:
    """Gives each run-time parameter of the pipeline its compile-time value as default.

    TFX declares a ``RuntimeParameter`` in ``root.inputDefinitions.parameters`` with its
    type only (its default goes to a ``PipelineJob``'s ``runtimeConfig``, which a KFP upload
    does not carry), and the KFP backend refuses a run that leaves a parameter without a
    default unset (``validatePipelineJobInputs``). Raises ``ValueError`` if a declared
    parameter has no default in ``defaults``.
    """
    root = pipeline_spec.setdefault("root", {})
    declared = root.get("inputDefinitions", {}).get("parameters", {})
    missing = sorted(set(declared) - set(defaults))
    if missing:
        raise ValueError(f"run-time parameters {missing} have no default")
    for name, parameter in declared.items():
        parameter["defaultValue"] = defaults[name]
        parameter["isOptional"] = True


def platform_spec(pool: NodePool, labels: list[str]) -> dict[str, Any]:
    """The Kubernetes platform spec (second YAML document): node selectors, tolerations."""
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
