"""Trials side by side: Keras Tuner's distributed mode, hosted by the TFX Tuner's process.

Keras Tuner runs a search over several processes with one *chief* holding the oracle and
*workers* that ask it for trials over gRPC (``KERASTUNER_TUNER_ID``,
``KERASTUNER_ORACLE_IP``, ``KERASTUNER_ORACLE_PORT``). Here the TFX Tuner executor's
process is the chief: :func:`run_workers` serves its oracle on the loopback address and
starts ``parallel_trials`` worker processes (``python -m
tfx_accum.components.tuner_worker``), each of which loads the data, rebuilds the same
tuner and runs trials until the oracle says stop. On a node with several GPUs each worker
sees one GPU (``CUDA_VISIBLE_DEVICES``); on the CPU the cores are shared out.

Every result reaches the one oracle, so the best hyperparameters artifact is written as
in serial mode. A worker that dies (killed, out of host memory) fails only the trial it
was running; a replacement worker takes over while trials remain.

Example (what ``tfx-accum run --parallel-trials 2`` does inside the Tuner component):

```python
spec = worker_spec(fn_args, directory, space)
tuner = make_tuner(space, hypermodel, directory, parallel_trials=2, worker_spec=spec)
tuner.search()  # serves the oracle; two workers run the trials
```
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from tfx_accum import console
from tfx_accum.components import keras_tuner_adapter as kt_adapter
from tfx_accum.components.settings import validate_positive_int

PARALLEL_TRIALS_KEY = "parallel_trials"  # custom_config key; default 1 (serial)
_TUNER_ID, _IP, _PORT = "KERASTUNER_TUNER_ID", "KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT"
_POLL_SECONDS = 0.2


def parallel_trials(custom_config: dict | None) -> int:
    """The number of worker processes asked for (1: trials run in this process)."""
    value = (custom_config or {}).get(PARALLEL_TRIALS_KEY, 1)
    return validate_positive_int(PARALLEL_TRIALS_KEY, value)


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
            "custom_config": fn_args.custom_config or {},
        },
        "directory": directory,
        "search_space": space_config,
    }


def _gpu_count() -> int:
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU"))


def _worker_env(index: int, workers: int, port: int, gpus: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update({_TUNER_ID: f"worker{index}-{os.getpid()}", _IP: "127.0.0.1", _PORT: str(port)})
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = str(index % gpus)
        env["TFX_ACCUM_ACCELERATOR"] = "gpu:1"  # what this worker may expect to see
    else:
        threads = max(1, (os.cpu_count() or 1) // workers)
        env["TF_NUM_INTRAOP_THREADS"] = env["TF_NUM_INTEROP_THREADS"] = str(threads)
    return env


def _relay(stream, prefix: str) -> None:
    """A worker's lines: the project's own to the console, the rest to the log."""
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        if line.startswith("[tuner]"):
            console.say(line.replace("[tuner]", f"[tuner {prefix}]", 1))
        else:
            os.write(1, (line + "\n").encode())
    stream.close()


class _Worker:
    def __init__(self, index: int, spec_path: str, env: dict[str, str]):
        self.index, self.tuner_id = index, env[_TUNER_ID]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tfx_accum.components.tuner_worker", spec_path],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.relay = threading.Thread(
            target=_relay, args=(self.process.stdout, f"w{index}"), daemon=True
        )
        self.relay.start()


def run_workers(tuner, workers: int, spec: dict[str, Any]) -> None:
    """Serves ``tuner.oracle`` and runs the search in ``workers`` worker processes.

    Returns when every worker has been told to stop (or, after deaths, when no trial is
    left). Raises ``RuntimeError`` if the workers keep dying before any trial finishes.
    """
    oracle = tuner.oracle
    server, port = kt_adapter.serve_oracle(oracle, "127.0.0.1")
    gpus = _gpu_count()
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
    running = [_Worker(i, spec_path, _worker_env(i, workers, port, gpus)) for i in range(workers)]
    started, deaths, stopped = workers, 0, False
    try:
        while running:
            time.sleep(_POLL_SECONDS)
            for worker in list(running):
                code = worker.process.poll()
                if code is None:
                    continue
                running.remove(worker)
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
                    env = _worker_env(started, workers, port, gpus)
                    running.append(_Worker(started, spec_path, env))
                    started += 1
    finally:
        for worker in running:
            worker.process.kill()
        server.stop(None)
        os.unlink(spec_path)
