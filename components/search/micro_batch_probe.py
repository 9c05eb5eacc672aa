"""Which micro-batch sizes fit the device, found before the search instead of by failed trials.

Like the batch-size finders (Lightning's, Accelerate's ``find_executable_batch_size``), the
probe grows the micro-batch until a training step runs out of memory; unlike them it then
keeps every choice below that point for the Tuner, which still searches the accumulation
steps and learning rate around it. Choices above it are dropped up front and named.

The probe runs on a GPU, where running out of memory is an error TensorFlow reports
(``ResourceExhaustedError``). On the CPU a step that does not fit swaps or is killed by the
kernel, so the probe is skipped there; ``max_micro_batch`` (``--max-micro-batch``) caps the
choices on any device.

Example:

```python
kept, dropped = fitting_micro_batches((8, 16, 32, 64), try_step)  # try_step(m) runs a step
```
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence

import tensorflow as tf

from tfx_accum import console


def fitting_micro_batches(
    choices: Sequence[int], try_step: Callable[[int], None]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(kept, dropped)``: the choices up to the largest one whose step fits, and the rest.

    ``try_step(m)`` runs one training step at micro-batch ``m`` and raises
    ``tf.errors.ResourceExhaustedError`` when it does not fit. Choices are tried from the
    smallest up; the first one that does not fit ends the probe (larger ones would not fit
    either). Raises ``ValueError`` when even the smallest does not fit.
    """
    ordered = sorted(set(choices))
    kept: list[int] = []
    for micro in ordered:
        try:
            try_step(micro)
        except tf.errors.ResourceExhaustedError:
            break
        kept.append(micro)
    if not kept:
        raise ValueError(
            f"Even the smallest micro-batch choice ({ordered[0]}) runs out of device memory "
            "in one training step. Add smaller micro_batch_choices, or use a smaller model "
            "or a larger accelerator."
        )
    return tuple(kept), tuple(m for m in ordered if m not in kept)


def gpu_present() -> bool:
    """Whether TensorFlow sees a GPU (listing physical devices allocates no memory)."""
    return bool(tf.config.list_physical_devices("GPU"))


def say_dropped(dropped: Sequence[int]) -> None:
    """The line naming the micro-batch choices the probe dropped (nothing if none)."""
    if dropped:
        console.say(
            f"[tuner] micro-batch {', '.join(map(str, dropped))} dropped: a training step "
            "runs out of device memory (memory probe)"
        )


def probe_in_subprocess(spec: dict) -> tuple[int, ...]:
    """The probe in a process of its own, so that a parallel search's chief holds no GPU
    memory: a worker (``tfx_accum.components.search.tuner_worker``) started with ``spec["probe"]``
    runs it and prints the micro-batch choices that fit; they are returned."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({**spec, "probe": True}, handle)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "tfx_accum.components.search.tuner_worker", handle.name],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.unlink(handle.name)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(
            "The micro-batch memory probe failed: "
            + ((result.stderr or result.stdout).strip().splitlines() or ["no output"])[-1]
        )
    return tuple(json.loads(lines[-1])["micro_batch_choices"])
