"""Running the command line in a subprocess, as a user would, for the end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from bench.pipeline import ORDER

ROOT = Path(__file__).resolve().parents[1]
# Every component of the pipeline on CSV data, in order (the benchmarks' list).
COMPONENTS = ORDER
# A small budget with a search space that trains well quickly: the test is about the
# pipeline, not about finding good hyperparameters.
SMALL = [
    "--max-trials",
    "2",
    "--tuning-epochs",
    "2",
    "--accumulation-steps-choices",
    "1,2",
    "--micro-batch-choices",
    "16,32",
    "--lr-min",
    "2e-3",
    "--lr-max",
    "1e-2",
]


def run_cli(
    *args: str, timeout: int = 900, env: dict | None = None
) -> tuple[subprocess.CompletedProcess, float]:
    """``tfx-accum run ARGS`` in a subprocess; ``env`` is added to this one's environment."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tfx_accum.pipeline", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
    )
    return proc, time.monotonic() - start


def digits_examples() -> tuple[list[bytes], np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    serialized = []
    for row in digits.data.astype(int):
        feature = {
            f"pixel_{i:02d}": tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
            for i, v in enumerate(row)
        }
        serialized.append(
            tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
        )
    return serialized, digits.target
