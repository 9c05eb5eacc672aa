"""The Trainer as a Vertex AI Training job on several machines, TFX's way.

:class:`VertexTrainer` is TFX's Vertex AI Training extension
(``tfx.extensions.google_cloud_ai_platform.Trainer``) extended as
:class:`~tfx_accum.components.training.trainer_component.Trainer` is: the component runs a Vertex AI
``CustomJob`` whose worker pools (``custom_config["ai_platform_training_args"]``, see
:func:`vertex_job_spec`) each run this project's Trainer executor, so the statistics and
run-time parameters reach every worker; :func:`train_on_vertex` makes a Trainer of
``create_pipeline`` one.

A module of its own because the extension imports Google Cloud's AI Platform client
(``google.cloud.aiplatform``, slow to import), which only a
``--target vertex --trainer-workers N`` compile and that job's Trainer step need.

Example (what tfx_accum.pipeline.kubeflow.compiler does for ``--trainer-workers 4``):

```python
job_spec = vertex_job_spec(image, 4, "n1-standard-8", "NVIDIA_TESLA_T4", 1)
train_on_vertex(trainer, job_spec, project="my-project", region="us-central1")
```
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
from typing import Any

from tfx.dsl.components.base import executor_spec
from tfx.extensions.google_cloud_ai_platform import constants as vertex_constants
from tfx.extensions.google_cloud_ai_platform.trainer import executor as vertex_executor
from tfx.types import standard_component_specs
from tfx.utils import json_utils

from tfx_accum.components.accumulation.arguments import validate_positive_int
from tfx_accum.components.training.trainer_component import Trainer, TrainerExecutor


class VertexTrainerExecutor(vertex_executor.GenericExecutor):
    """TFX's Vertex AI Training executor, whose job's workers run :class:`TrainerExecutor`.

    It runs in the pipeline's Trainer task, creates the ``CustomJob`` and waits for it;
    every replica of every worker pool runs ``python -m tfx.scripts.run_executor`` with
    this component's inputs, outputs and execution properties (statistics and run-time
    parameters included), and ``TF_CONFIG`` from Vertex AI.
    """

    def _GetExecutorClass(self):  # noqa: N802 - TFX's name
        return TrainerExecutor


class VertexTrainer(Trainer):
    """:class:`Trainer` as a Vertex AI Training job (TFX's extension, with the statistics).

    ``custom_config`` must hold the extension's keys (:func:`vertex_training_config`).
    """

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(VertexTrainerExecutor)


# The Vertex AI scheduling that multi-worker training with backups needs: one preempted
# worker restarts them all, and all resume from the chief's backup
# (tfx_accum.components.accumulation.multi_worker).
VERTEX_SCHEDULING = {"restart_job_on_worker_restart": True}


def vertex_job_spec(
    image: str,
    workers: int,
    machine_type: str,
    accelerator_type: str | None = None,
    accelerator_count: int = 0,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The ``CustomJobSpec`` of a Trainer on ``workers`` machines of one kind.

    Vertex AI's first worker pool is the chief (one replica; ``TF_CONFIG`` task
    ``chief``), the second the other ``workers - 1`` (tasks ``worker``). Every pool runs
    ``image``; TFX's extension sets each pool's command (the Trainer executor). Field
    names as in ``google.cloud.aiplatform_v1.types.CustomJobSpec``.
    """
    validate_positive_int("workers", workers)
    machine: dict[str, Any] = {"machine_type": machine_type}
    if accelerator_type:
        machine["accelerator_type"] = accelerator_type
        machine["accelerator_count"] = validate_positive_int("accelerator_count", accelerator_count)
    container = {
        "image_uri": image,
        "env": [{"name": name, "value": value} for name, value in sorted((env or {}).items())],
    }

    def pool(replicas: int) -> dict[str, Any]:
        return {
            "machine_spec": dict(machine),
            "replica_count": replicas,
            "container_spec": dict(container),
        }

    pools = [pool(1)] + ([pool(workers - 1)] if workers > 1 else [])
    return {"worker_pool_specs": pools, "scheduling": dict(VERTEX_SCHEDULING)}


def vertex_training_config(job_spec: dict[str, Any], project: str, region: str) -> dict[str, Any]:
    """The ``custom_config`` entries TFX's Vertex AI Training extension reads."""
    return {
        vertex_executor.TRAINING_ARGS_KEY: {"project": project, "job_spec": job_spec},
        vertex_constants.ENABLE_VERTEX_KEY: True,
        vertex_constants.VERTEX_REGION_KEY: region,
    }


def train_on_vertex(trainer: Trainer, job_spec: dict[str, Any], project: str, region: str) -> None:
    """Makes ``trainer`` (a :class:`Trainer`, as ``create_pipeline`` builds it) a
    :class:`VertexTrainer`, before the pipeline is compiled: the same inputs, outputs,
    module (``run_fn``) and ``custom_config``, plus the Vertex AI job.

    Done in place, so that the downstream components' channels keep their producer.
    """
    if type(trainer) is not Trainer:
        raise TypeError(f"expected a tfx_accum Trainer, got {type(trainer).__name__}")
    key = standard_component_specs.CUSTOM_CONFIG_KEY
    config = json_utils.loads(trainer.exec_properties.get(key) or "null") or {}
    config.update(vertex_training_config(job_spec, project, region))
    trainer.exec_properties[key] = json_utils.dumps(config)
    trainer.executor_spec = VertexTrainer.EXECUTOR_SPEC.copy()
