"""Distribution strategy choice and the effective-batch arithmetic across replicas.

The rule, documented in the README: the tuned micro-batch ``m`` is what fits on *one*
device, and the tuned effective batch is ``B = k * m``. With ``R`` replicas each replica
processes micro-batches of ``m`` and accumulates ``ceil(k / R)`` of them, so the global
batch is ``R * ceil(k / R) * m``: exactly ``B`` when ``R`` divides ``k``, and the smallest
multiple of ``R * m`` above ``B`` otherwise (logged). ``k = 1`` with ``R`` replicas gives
``R * m``: data parallelism cannot go below one micro-batch per device.

``R`` counts the replicas of every worker: with ``TF_CONFIG`` naming several workers
(Vertex AI Training, a Kubeflow ``TFJob``) the strategy is ``MultiWorkerMirroredStrategy``
over all GPUs (or the CPU) of all workers, in the form Keras 3's ``fit`` can train with
(:class:`~tfx_accum.components.accumulation.keras_adapter.MultiWorkerMirroredStrategy`), and the
plan shares ``k`` among all of them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os

from tfx_accum.components.settings import validate_positive_int

_TPU_ENV_VARS = (
    "TPU_NAME",
    "TPU_WORKER_HOSTNAMES",
    "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS",
    "TPU_ACCELERATOR_TYPE",
)


@dataclasses.dataclass(frozen=True)
class ReplicaPlan:
    replicas: int
    steps_per_replica: int
    micro_batch_size: int

    @property
    def per_replica_batch(self) -> int:
        return self.steps_per_replica * self.micro_batch_size

    @property
    def global_batch(self) -> int:
        return self.replicas * self.per_replica_batch


@functools.lru_cache(maxsize=256)
def replica_plan(accumulation_steps: int, micro_batch_size: int, replicas: int) -> ReplicaPlan:
    """How ``k`` micro-batches of ``m`` are shared among ``replicas`` devices.

    The one place of this arithmetic: the Tuner (per trial) and the Trainer call it.
    """
    validate_positive_int("replicas", replicas)
    return ReplicaPlan(replicas, math.ceil(accumulation_steps / replicas), micro_batch_size)


def strategy_kind(num_gpus: int, tpu_present: bool, workers: int = 1) -> str:
    """``"multi_worker"`` when ``TF_CONFIG`` names several workers, ``"tpu"`` when a TPU is
    attached, ``"mirrored"`` for 2+ GPUs, else ``"default"``.

    Several workers with a TPU are refused (``ValueError``): a TPU slice spanning hosts
    trains under ``TPUStrategy`` with a TPU cluster resolver, not with ``TF_CONFIG``.
    """
    if workers > 1:
        if tpu_present:
            raise ValueError(
                f"TF_CONFIG names {workers} workers, but this process sees a TPU: several "
                "TPU hosts train under TPUStrategy over one slice, which this Trainer does "
                "not set up; train on one TPU host (one worker) or on GPU workers."
            )
        return "multi_worker"
    if tpu_present:
        return "tpu"
    if num_gpus > 1:
        return "mirrored"
    return "default"


def _tpu_present() -> bool:
    return (
        any(os.environ.get(v) for v in _TPU_ENV_VARS)
        or os.path.exists("/dev/accel0")
        or os.path.exists("/dev/vfio/0")
    )


# Set by the Kubeflow compile on the Tuner and Trainer containers: "gpu:1", "tpu:4", ...
ACCELERATOR_ENV, NODE_POOL_ENV = "TFX_ACCUM_ACCELERATOR", "TFX_ACCUM_NODE_POOL"


def check_accelerators(num_gpus: int, tpu_present: bool, devices: list[str]) -> None:
    """Stops when the node-pool profile promised accelerators this process cannot see.

    Training on the CPU of a GPU pod would be silently slow and wrong about memory; the
    usual causes are named. Without the profile's variable (local runs) nothing is checked.
    """
    expected = os.environ.get(ACCELERATOR_ENV, "")
    if not expected or expected.startswith("cpu"):
        return
    kind, _, count = expected.partition(":")
    pool = os.environ.get(NODE_POOL_ENV, "?")
    if kind == "gpu" and num_gpus < int(count or 1):
        raise RuntimeError(
            f"Node pool {pool!r} promises {count} GPU(s), but TensorFlow sees {num_gpus} "
            f"(devices: {', '.join(devices) or 'none'}). Likely causes: the NVIDIA driver "
            "libraries are not on LD_LIBRARY_PATH (GKE mounts them at /usr/local/nvidia/lib64; "
            "the tfx-accum image sets it), or the image was built with ACCELERATOR=cpu."
        )
    if kind == "tpu" and not tpu_present:
        raise RuntimeError(
            f"Node pool {pool!r} promises {count} TPU chip(s), but this pod sees no TPU "
            f"(devices: {', '.join(devices) or 'none'}). Likely causes: the image was not "
            "built with ACCELERATOR=tpu, or the pod was scheduled outside the TPU pool."
        )


def check_node_pool() -> None:
    """:func:`check_accelerators` for this process's devices (listing them allocates nothing)."""
    import tensorflow as tf

    check_accelerators(
        len(tf.config.list_physical_devices("GPU")),
        _tpu_present(),
        [d.name for d in tf.config.list_physical_devices()],
    )


def tpu_present() -> bool:
    return _tpu_present()


def local_gpus() -> list[str]:
    """This process's GPUs, as ``MirroredStrategy`` names its devices (``/gpu:0``, ...).

    The one place the Trainer's and the Tuner's strategy learns them: a test of a several-GPU
    node stands logical CPU devices in for them here (tests/mirrored_executor.py).
    """
    import tensorflow as tf

    return [f"/gpu:{i}" for i in range(len(tf.config.list_physical_devices("GPU")))]


def choose_strategy():
    """The ``tf.distribute`` strategy for the devices this process sees (a pod, a laptop)."""
    import tensorflow as tf

    from tfx_accum.components.accumulation.multi_worker import Cluster

    check_node_pool()
    cluster = Cluster.from_env()
    gpus = local_gpus()
    kind = strategy_kind(len(gpus), _tpu_present(), cluster.workers)
    if kind == "multi_worker":
        from tfx_accum.components.accumulation.keras_adapter import MultiWorkerMirroredStrategy

        # TF_CONFIG names the cluster; every local GPU (else the CPU) is a replica.
        strategy = MultiWorkerMirroredStrategy()
    elif kind == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="local")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    elif kind == "mirrored":
        strategy = tf.distribute.MirroredStrategy(gpus)
    else:
        strategy = tf.distribute.get_strategy()
    logging.info(
        "Distribution strategy: %s with %d replica(s)%s.",
        type(strategy).__name__,
        strategy.num_replicas_in_sync,
        f" on {cluster.describe()}" if cluster.multi_worker else "",
    )
    return strategy
