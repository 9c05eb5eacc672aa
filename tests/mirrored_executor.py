"""Runs a TFX executor in a fresh process as on a node with several GPUs.

``python mirrored_executor.py N trainer RUN_EXECUTOR_ARGS...`` runs TFX's
``tfx.scripts.run_executor`` (the command a Vertex AI or Kubeflow Trainer runs) in this
process; ``python mirrored_executor.py N tuner RUN_DIR WORK_DIR`` runs the Tuner's executor
on a finished run's artifacts (``bench.tuner_component``) and prints its trials as JSON.

N logical CPU devices stand in for N GPUs where the Trainer and the Tuner learn them
(``tfx_accum.components.accumulation.strategy.local_gpus``), so that their own strategy choice picks
``MirroredStrategy`` over them: nothing of tfx-accum has run in the process before.
"""

import json
import os
import runpy
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPLICAS, ROLE, ARGS = int(sys.argv[1]), sys.argv[2], sys.argv[3:]

import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(REPLICAS)]
)

from tfx_accum.components.accumulation import strategy  # noqa: E402

strategy.local_gpus = lambda: [f"/cpu:{i}" for i in range(REPLICAS)]
# The strategies chosen, for the tuner's report (patched before the Tuner module imports it).
CHOSEN: list[tuple[str, int]] = []
_choose = strategy.choose_strategy


def _recording_choice():
    chosen = _choose()
    CHOSEN.append((type(chosen).__name__, chosen.num_replicas_in_sync))
    return chosen


strategy.choose_strategy = _recording_choice

if ROLE == "trainer":
    sys.argv = ["run_executor", *ARGS]
    runpy.run_module("tfx.scripts.run_executor", run_name="__main__", alter_sys=True)
elif ROLE == "tuner":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.tuner_component import run_tuner_component
    from tfx_accum.components.config.search_space import SearchSpace

    space = SearchSpace(
        accumulation_steps_choices=(2, 4),
        micro_batch_choices=(8,),
        max_trials=2,
        tuning_epochs=1,
        algorithm="random",
    )
    result = run_tuner_component(Path(ARGS[0]), Path(ARGS[1]), space)
    print(json.dumps({"rows": result.rows, "trials": result.trials, "strategies": CHOSEN}))
else:
    raise SystemExit(f"unknown role {ROLE!r}")
