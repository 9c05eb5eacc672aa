"""Trials side by side: Keras Tuner's distributed mode, hosted by the TFX Tuner's process.

Keras Tuner runs a search over several processes with one *chief* holding the oracle and
*workers* that ask it for trials over gRPC (``KERASTUNER_TUNER_ID``,
``KERASTUNER_ORACLE_IP``, ``KERASTUNER_ORACLE_PORT``). Here the TFX Tuner executor's
process is the chief: :func:`run_workers` serves its oracle on the loopback address and
starts worker processes (``python -m tfx_accum.components.search.tuner_worker``), each of which
loads the data, rebuilds the same tuner and runs trials until the oracle says stop.

- **How many**: ``parallel_trials``, capped by the trials the search has left, by the GPUs
  (one each) or, without GPUs, by the CPUs; a line says so when a cap applies
  (:func:`plan_workers`). A search with nothing left starts no worker.
- **GPUs**: each worker holds one GPU (``CUDA_VISIBLE_DEVICES``), and a replacement takes
  the GPU its predecessor freed (:class:`GpuSlots`). Every process that shares the node's
  GPUs (the chief, the memory probe, the workers) grows its GPU memory as it needs it
  (:func:`share_gpus`), instead of TensorFlow's default of taking it all.
- **Faults**: a worker that dies (killed, out of host memory) fails only the trial it was
  running, and a replacement takes over while trials remain; so does one that uses no CPU
  time for ``worker_stall_seconds`` (600 by default: stopped with ``kill -STOP``, or hung),
  which is killed with a line (:class:`StallWatch`). Workers die with their chief
  (:func:`die_with_chief`: the kernel's parent-death signal, and a watchdog on the chief's
  pid), so a killed Tuner pod or process leaves none behind.
- **Only our workers**: the oracle's port takes requests that carry this search's token
  (:data:`TOKEN_ENV`, a fresh secret per search, given to the workers in their
  environment); any other local process is refused.

Every result reaches the one oracle, so the best hyperparameters artifact is written as in
serial mode.

Example (what ``tfx-accum run --parallel-trials 2`` does inside the Tuner component):

```python
spec = worker_spec(fn_args, directory, space)
tuner = make_tuner(space, hypermodel, directory, parallel_trials=2, worker_spec=spec)
tuner.search()  # serves the oracle; two workers run the trials
```
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from tfx_accum import console
from tfx_accum.components.custom_config import ModuleConfig
from tfx_accum.components.data.transform import transform_output_path

# Keras Tuner's adapter (keras_tuner_adapter) is imported where it is used: a worker's first
# step (die_with_chief) must not wait for Keras to import.

_TUNER_ID, _IP, _PORT = "KERASTUNER_TUNER_ID", "KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT"
TOKEN_ENV = "TFX_ACCUM_ORACLE_TOKEN"  # the search's secret, in each worker's environment
CHIEF_PID_ENV = "TFX_ACCUM_CHIEF_PID"  # a worker exits when this process is gone
GROWTH_ENV = "TF_FORCE_GPU_ALLOW_GROWTH"  # TensorFlow: allocate GPU memory as needed
_POLL_SECONDS = 0.2
# A worker that uses no CPU time for custom_config["worker_stall_seconds"] (kill -STOP, a
# hang) is killed: its trial fails and a replacement goes on.
STALL_KEY = "worker_stall_seconds"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def is_worker() -> bool:
    """True in a worker process started by :func:`run_workers`."""
    return bool(os.environ.get(_IP)) and "chief" not in os.environ.get(_TUNER_ID, "chief")


def worker_spec(fn_args, directory: str, space_config: dict[str, Any]) -> dict[str, Any]:
    """What a worker needs to rebuild the chief's tuner (plain JSON, no TFX objects)."""
    return {
        "fn_args": {
            "working_dir": fn_args.working_dir,
            "train_files": list(fn_args.train_files),
            "eval_files": list(fn_args.eval_files),
            "schema_path": fn_args.schema_path,
            "transform_graph_path": transform_output_path(fn_args),
            "custom_config": fn_args.custom_config or {},
        },
        "directory": directory,
        "search_space": space_config,
    }


def plan_workers(
    requested: int, trials_left: int | None, gpus: int, cpus: int
) -> tuple[int, str | None]:
    """``(workers, why)``: how many workers to start, and the reason when fewer than asked.

    One worker per trial left at most (``None``: no limit, as for Hyperband), one per GPU
    when there are GPUs (each holds one), else one per CPU.
    """
    limits = [(requested, "")]
    if trials_left is not None:
        limits.append((trials_left, f"the search has {trials_left} trial(s) left"))
    if gpus:
        limits.append((gpus, f"one GPU per worker, {gpus} GPU(s)"))
    else:
        limits.append((max(1, cpus), f"no GPU, {cpus} CPU(s)"))
    workers, reason = min(limits, key=lambda limit: limit[0])
    if workers >= requested:
        return requested, None
    return max(workers, 0), f"parallel_trials={requested} capped to {max(workers, 0)}: {reason}"


class GpuSlots:
    """Which GPU each worker holds: one each; a replacement takes the one that was freed.

    ``take`` gives the lowest free GPU index; ``release`` frees a worker's GPU when it
    exits. Without GPUs every worker gets ``None`` (they share the CPUs).
    """

    def __init__(self, gpus: int):
        self.free = list(range(gpus))
        self.gpus = gpus
        self.held: dict[int, int] = {}  # worker index -> GPU index

    def take(self, worker: int) -> int | None:
        if not self.gpus:
            return None
        if not self.free:
            raise RuntimeError(f"worker {worker}: all {self.gpus} GPU(s) are held")
        gpu = self.free.pop(0)
        self.held[worker] = gpu
        return gpu

    def release(self, worker: int) -> None:
        gpu = self.held.pop(worker, None)
        if gpu is not None:
            self.free = sorted([*self.free, gpu])


def share_gpus() -> None:
    """This process and the ones it starts share the node's GPUs: grow memory as needed.

    Sets :data:`GROWTH_ENV` (inherited by the probe and the workers) and memory growth on
    this process's own GPUs (possible only before TensorFlow initialised them).
    """
    os.environ[GROWTH_ENV] = "true"
    import tensorflow as tf

    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # already initialised: the variable covers the children
            pass


def worker_env(
    index: int, port: int, gpu: int | None, threads: int, token: str, chief: int
) -> dict[str, str]:
    """The environment of worker ``index``: its oracle, token, chief and device share."""
    env = dict(os.environ)
    env.update(
        {
            _TUNER_ID: f"worker{index}-{chief}",
            _IP: "127.0.0.1",
            _PORT: str(port),
            TOKEN_ENV: token,
            CHIEF_PID_ENV: str(chief),
        }
    )
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        env[GROWTH_ENV] = "true"
        env["TFX_ACCUM_ACCELERATOR"] = "gpu:1"  # what this worker may expect to see
    else:
        env["TF_NUM_INTRAOP_THREADS"] = env["TF_NUM_INTEROP_THREADS"] = str(threads)
    return env


def die_with_chief() -> None:
    """In a worker: exit when the chief (:data:`CHIEF_PID_ENV`) is gone, killed or not.

    The kernel sends SIGKILL when the parent dies (``prctl(PR_SET_PDEATHSIG)``, Linux); a
    watchdog thread checks the parent's pid every second as well (other systems, and a
    chief that died before this ran).
    """
    chief = int(os.environ.get(CHIEF_PID_ENV) or 0)
    if not chief:
        return
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != chief:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == chief:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-chief", daemon=True).start()


def authenticate(tuner) -> None:
    """In a worker: this search's token goes with every request to the chief's oracle."""
    from tfx_accum.components.search import keras_tuner_adapter as kt_adapter

    kt_adapter.authenticate_client(tuner.oracle, os.environ[TOKEN_ENV])


def _gpu_count() -> int:
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU"))


def _cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _relay(stream, prefix: str) -> None:
    """A worker's lines: the project's own to the console, the rest to the log."""
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        if line.startswith("[tuner]"):
            console.say(line.replace("[tuner]", f"[tuner {prefix}]", 1))
        else:
            os.write(1, (line + "\n").encode())
    stream.close()


def cpu_ticks(pid: int) -> int | None:
    """CPU time (clock ticks) of process ``pid`` and its waited-for children, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime


class StallWatch:
    """Says when a process has used no CPU time for ``seconds``: stopped (``kill -STOP``)
    or hung. A worker at work, or polling its oracle, always spends some."""

    def __init__(self, pid: int, seconds: float):
        self.pid, self.seconds = pid, seconds
        self._ticks, self._since = cpu_ticks(pid), time.monotonic()

    def stalled(self) -> bool:
        ticks = cpu_ticks(self.pid)
        if ticks != self._ticks:
            self._ticks, self._since = ticks, time.monotonic()
            return False
        return time.monotonic() - self._since > self.seconds


class _Worker:
    def __init__(
        self, index: int, spec_path: str, env: dict[str, str], gpu: int | None, stall: float
    ):
        self.index, self.tuner_id, self.gpu = index, env[_TUNER_ID], gpu
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tfx_accum.components.search.tuner_worker", spec_path],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.watch = StallWatch(self.process.pid, stall)
        self.relay = threading.Thread(
            target=_relay, args=(self.process.stdout, f"w{index}"), daemon=True
        )
        self.relay.start()


def run_workers(tuner, workers: int, spec: dict[str, Any]) -> None:
    """Serves ``tuner.oracle`` and runs the search in up to ``workers`` worker processes.

    Returns when every worker has been told to stop (or, after deaths, when no trial is
    left). Raises ``RuntimeError`` if the workers keep dying before any trial finishes.
    """
    from tfx_accum.components.search import keras_tuner_adapter as kt_adapter

    oracle = tuner.oracle
    gpus, cpus = _gpu_count(), _cpu_count()
    requested = workers
    workers, why = plan_workers(requested, kt_adapter.trials_left(oracle), gpus, cpus)
    if why:
        console.say(f"[tuner] {why}")
    if workers == 0:
        return  # every trial has run (a finished search, resumed): nothing to start
    token = secrets.token_urlsafe(32)
    server, port = kt_adapter.serve_oracle(oracle, "127.0.0.1", token)
    with tempfile.NamedTemporaryFile(
        "w",
        suffix=".json",
        prefix="tuner-worker-",
        dir=spec["fn_args"]["working_dir"] or None,
        delete=False,
    ) as handle:
        json.dump(spec, handle)
        spec_path = handle.name
    console.say(
        f"[tuner] {workers} parallel workers on 127.0.0.1:{port}"
        + (f", one GPU each of {gpus}" if gpus else ", sharing the CPU")
    )
    slots = GpuSlots(gpus)
    threads = max(1, cpus // workers)
    config = ModuleConfig.from_custom_config(spec["fn_args"].get("custom_config"))
    stall = config.worker_stall_seconds

    def start(index: int) -> _Worker:
        gpu = slots.take(index)
        env = worker_env(index, port, gpu, threads, token, os.getpid())
        return _Worker(index, spec_path, env, gpu, stall)

    running = [start(i) for i in range(workers)]
    started, deaths, stopped = workers, 0, False
    try:
        while running:
            time.sleep(_POLL_SECONDS)
            for worker in list(running):
                code = worker.process.poll()
                if code is None:
                    if worker.watch.stalled():  # stopped or hung: its trial fails, not the run
                        console.say(
                            f"[tuner] worker {worker.index} used no CPU for {stall:g} s "
                            f"(stopped or hung; custom_config {STALL_KEY!r}): killed"
                        )
                        worker.process.kill()
                    continue
                running.remove(worker)
                slots.release(worker.index)
                worker.relay.join(timeout=5)
                if code == 0:
                    stopped = True  # the oracle told it to stop: no trial is left to start
                    continue
                deaths += 1
                failed = kt_adapter.fail_ongoing_trial(
                    oracle, worker.tuner_id, f"worker {worker.index} died (exit code {code})"
                )
                console.say(
                    f"[tuner] worker {worker.index} died (exit code {code})"
                    + (f"; trial {failed} failed" if failed else "")
                )
                if deaths > max(workers, oracle.max_trials or workers) * 2:
                    raise RuntimeError(
                        f"{deaths} tuner workers died; the last exited with code {code}. "
                        "See the log for their output."
                    )
                if not stopped and not kt_adapter.trials_exhausted(oracle):
                    running.append(start(started))  # takes the GPU just freed
                    started += 1
    finally:
        for worker in running:
            worker.process.kill()
        server.stop(None)
        os.unlink(spec_path)
