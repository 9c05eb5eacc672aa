"""Node-pool profiles for the Kubeflow compile: what a Tuner or Trainer pod asks for.

A profile names an accelerator (kind, count, GKE label, TPU topology), the pod's CPU and
memory, and optionally the machine type, the number of parallel tuning trials and the
precision the Tuner's and Trainer's models compute in (``--precision``'s default for
``compile``; unnamed: float32 on CPUs, mixed_float16 on GPUs, mixed_bfloat16 on TPUs). The
built-in profiles ship as package data (``kubeflow/node_pools.yaml``); ``--profiles FILE``
adds or overrides some. Every profile is validated when loaded, with an error naming the
profile, the problem and the known names.

Example::

    pool = get_profile("a100x4")
    pool.node_selector()        # {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}
    pool.tuner_parallel_trials  # 4: one trial per GPU
    pool.trainer_workers        # 1: the Trainer in one pod (see trainer_workers below)
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import yaml

from tfx_accum.components.config.settings import PRECISIONS
from tfx_accum.pipeline.errors import InputError

# Shipped as package data (kubeflow/node_pools.yaml in the repository).
PROFILES_RESOURCE = ("tfx_accum.kubeflow", "node_pools.yaml")
RESOURCE_NAMES = {"gpu": "nvidia.com/gpu", "tpu": "google.com/tpu"}
GKE_LABELS = {
    "gpu": "cloud.google.com/gke-accelerator",
    "tpu": "cloud.google.com/gke-tpu-accelerator",
}
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
MACHINE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# The precision of a profile that does not name one, by accelerator kind.
KIND_PRECISION = {"cpu": "float32", "gpu": "mixed_float16", "tpu": "mixed_bfloat16"}
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)([GM])i?$")


class ProfileError(InputError):
    """A node-pool profile is unknown or malformed."""


@dataclasses.dataclass(frozen=True)
class NodePool:
    """One validated profile (see ``kubeflow/node_pools.yaml`` for the fields)."""

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
    # Machines the Trainer spans on Vertex AI Training (MultiWorkerMirroredStrategy), each
    # of vertex_machine_type with the profile's accelerators; 1: the Trainer in its pod.
    trainer_workers: int = 1
    vertex_machine_type: str | None = None
    precision: str = "float32"  # the Keras dtype policy (settings.PRECISIONS)

    @property
    def tuner_parallel_trials(self) -> int:
        """Trials the Tuner pod runs side by side: one per GPU unless the profile says."""
        if self.parallel_trials is not None:
            return self.parallel_trials
        return self.count if self.kind == "gpu" else 1

    @property
    def training_machine_type(self) -> str | None:
        """The Vertex AI machine type of one Trainer worker (``vertex_machine_type``, else
        ``machine_type``: GKE's instance-type label is the Compute Engine machine type)."""
        return self.vertex_machine_type or self.machine_type

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
    raw = dict(raw)  # `precision` is read here and is then no unknown field
    precision = raw.pop("precision", KIND_PRECISION[kind])
    if precision not in PRECISIONS:
        raise bad(f"`precision` must be one of {', '.join(PRECISIONS)}, got {precision!r}")
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
    if parallel is not None and kind == "gpu" and parallel > count:
        raise bad(
            f"`parallel_trials` {parallel} is more than the pool's {count} GPU(s): each "
            "tuning worker holds one GPU"
        )
    workers = raw.get("trainer_workers", 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise bad(f"`trainer_workers` must be an integer >= 1, got {workers!r}")
    if workers > 1 and kind == "tpu":
        raise bad(
            "`trainer_workers` must be 1 on a TPU pool (several TPU hosts train under "
            "TPUStrategy over one slice, not MultiWorkerMirroredStrategy)"
        )
    vertex_machine = raw.get("vertex_machine_type")
    if vertex_machine is not None and not (
        isinstance(vertex_machine, str) and re.match(r"^[a-z0-9]+(-[a-z0-9]+)+$", vertex_machine)
    ):
        raise bad(
            "`vertex_machine_type` must be a Compute Engine machine type such as "
            f"g2-standard-8, got {vertex_machine!r}"
        )
    unknown = sorted(
        set(raw)
        - {
            "description",
            "accelerator",
            "cpu",
            "memory",
            "machine_type",
            "parallel_trials",
            "trainer_workers",
            "vertex_machine_type",
        }
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
        workers,
        vertex_machine,
        precision=precision,
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
