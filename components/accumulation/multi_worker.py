"""Who this process is in a multi-worker Trainer, and where it may write.

A Trainer that spans machines runs the same ``run_fn`` in every worker process, with
``TF_CONFIG`` naming the cluster (Vertex AI Training and Kubeflow's Training Operator set
it; so does a test on the loopback address). All workers train together under
``MultiWorkerMirroredStrategy``
(:func:`tfx_accum.components.accumulation.strategy.choose_strategy`); the
**chief** alone writes what the pipeline keeps: the serving model, the TensorBoard logs,
the budget, the training-state backups. As TensorFlow's multi-worker guide says, the
other workers still run every save (a save may take part in collective operations), into
a temporary location of their own that is deleted at the end.

The chief is the ``chief`` task if the cluster has one (Vertex AI's first worker pool),
else worker 0 (a ``TFJob`` or a cluster of workers only). Parameter servers and
evaluators are refused: ``MultiWorkerMirroredStrategy`` runs chief and workers only.

Backups: every worker restores from the chief's backup (the weights are the same on all
workers, so the chief's copy is everyone's), taken as a private copy before training
starts, when no worker is writing. The chief then backs up into the real folder; the
others into their copy. A preempted worker makes the whole cluster restart (Vertex AI:
``restart_job_on_worker_restart``), and every worker resumes from the chief's last epoch.

No TensorFlow at import: ``Cluster`` is plain parsing, unit-tested without a cluster.

Example::

    cluster = Cluster.from_env()           # TF_CONFIG, or one worker
    serving_dir = cluster.own_dir(fn_args.serving_model_dir)
    ...
    cluster.clean_up()
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile

TF_CONFIG = "TF_CONFIG"
CHIEF, WORKER = "chief", "worker"
_TRAINING_TASKS = (CHIEF, WORKER)


class ClusterError(ValueError):
    """``TF_CONFIG`` describes a cluster this Trainer cannot train in."""


@dataclasses.dataclass(frozen=True)
class Cluster:
    """This process's place in the training cluster (one worker without ``TF_CONFIG``)."""

    workers: int = 1  # chief and workers: the processes that train
    task_type: str = WORKER
    task_index: int = 0
    has_chief_task: bool = False
    _temporary: list[str] = dataclasses.field(default_factory=list, compare=False, repr=False)

    @classmethod
    def from_tf_config(cls, text: str | None) -> Cluster:
        """Parses ``TF_CONFIG`` (``{"cluster": {...}, "task": {"type", "index"}}``).

        Raises :class:`ClusterError` (one line, naming the problem) for a value that is not
        such a JSON object, a task outside the cluster, or a parameter server or evaluator.
        """
        if not text or not text.strip():
            return cls()
        try:
            config = json.loads(text)
        except json.JSONDecodeError as error:
            raise ClusterError(
                f"TF_CONFIG is not JSON ({error.msg}); unset it or fix it."
            ) from None
        if not isinstance(config, dict):
            raise ClusterError("TF_CONFIG must be a JSON object with `cluster` and `task`.")
        cluster = config.get("cluster") or {}
        task = config.get("task") or {}
        if not isinstance(cluster, dict) or not isinstance(task, dict):
            raise ClusterError("TF_CONFIG's `cluster` and `task` must be JSON objects.")
        others = sorted(set(cluster) - set(_TRAINING_TASKS))
        if others:
            raise ClusterError(
                f"TF_CONFIG's cluster has {', '.join(others)} tasks; the Trainer trains with "
                "MultiWorkerMirroredStrategy, which runs chief and worker tasks only: give "
                "the cluster chief and workers (or workers only)."
            )
        if not cluster:
            return cls()
        for name in _TRAINING_TASKS:
            if not isinstance(cluster.get(name, []), list):
                raise ClusterError(f"TF_CONFIG's cluster.{name} must be a list of host:port.")
        chiefs = len(cluster.get(CHIEF, []))
        if chiefs > 1:
            raise ClusterError(f"TF_CONFIG's cluster has {chiefs} chief tasks; give one.")
        task_type = task.get("type", WORKER)
        task_index = task.get("index", 0)
        if (
            task_type not in _TRAINING_TASKS
            or isinstance(task_index, bool)
            or not isinstance(task_index, int)
            or not 0 <= task_index < len(cluster.get(task_type, []))
        ):
            raise ClusterError(
                f"TF_CONFIG's task {task_type!r} {task_index!r} is not in its cluster "
                f"({', '.join(f'{len(v)} {k}' for k, v in sorted(cluster.items()))})."
            )
        return cls(chiefs + len(cluster.get(WORKER, [])), task_type, task_index, chiefs == 1)

    @classmethod
    def from_env(cls) -> Cluster:
        return cls.from_tf_config(os.environ.get(TF_CONFIG))

    @property
    def multi_worker(self) -> bool:
        return self.workers > 1

    @property
    def is_chief(self) -> bool:
        """The ``chief`` task, or worker 0 of a cluster without one."""
        if self.has_chief_task:
            return self.task_type == CHIEF
        return self.task_index == 0

    def describe(self) -> str:
        role = "chief" if self.is_chief else "non-chief"
        return f"{self.task_type} {self.task_index} of {self.workers} workers ({role})"

    # ----------------------------------------------------------------- where to write

    def _temporary_dir(self, purpose: str) -> str:
        path = tempfile.mkdtemp(prefix=f"tfx-accum-{self.task_type}{self.task_index}-{purpose}-")
        self._temporary.append(path)
        return path

    def own_dir(self, path: str) -> str:
        """``path`` on the chief; on another worker, a new temporary folder of its own."""
        if self.is_chief:
            return path
        return self._temporary_dir(os.path.basename(path.rstrip("/")) or "output")

    def own_backup(self, backup_dir: str) -> str:
        """Where this worker restores from and backs up to.

        The chief: ``backup_dir``. Another worker: a temporary copy of the chief's
        ``backup_dir`` (its files, taken now, before training: nobody writes it before
        the first epoch ends, which needs every worker), so that all workers resume from
        the same epoch with the same weights and none writes into the chief's backup.
        """
        if self.is_chief:
            return backup_dir
        import tensorflow as tf

        copy = self._temporary_dir("backup")
        if tf.io.gfile.isdir(backup_dir):
            for name in tf.io.gfile.listdir(backup_dir):
                source = f"{backup_dir.rstrip('/')}/{name}"
                if not tf.io.gfile.isdir(source):
                    tf.io.gfile.copy(source, os.path.join(copy, name), overwrite=True)
        return copy

    def clean_up(self) -> None:
        """Deletes this worker's temporary folders (none on the chief)."""
        while self._temporary:
            shutil.rmtree(self._temporary.pop(), ignore_errors=True)
