"""The Tuner's trials get every example of the split, in every fresh process, read through
TFX's stock data accessor (tests/stock_tuner_counts.py).

A split held with ``Dataset.cache()`` was cut to its first block of 256 examples in some
processes: a read of one held-out example (the first trial's ``evaluate`` of one batch)
stops early, its reader is cancelled, and the cancelled input below the cache could report
the end of the data, which finalises the cache with what was read. Every trial then
trained on 205 examples and was scored on 51, while the search went on as usual. The race
depends on timing, so each case runs in several fresh processes, with TensorFlow's logging
as a TFX pipeline leaves it (its warnings change the timing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from stock_tuner_counts import write_examples

pytestmark = pytest.mark.e2e  # fresh processes, each importing TFX (a minute in all)

SCRIPT = Path(__file__).resolve().parents[1] / "stock_tuner_counts.py"
ROWS = 10_036  # the taxi example's training split: 8,029 trained on, 2,007 held out
TRAIN, HELD_OUT = 8_029, 2_007


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("split")
    write_examples(path, ROWS)
    return path


def _counts(*args: str) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=SCRIPT.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("COUNTS ")]
    return json.loads(line.removeprefix("COUNTS "))


def test_reads_of_one_held_out_example_never_shorten_the_split(root):
    """Twenty reads stopped after one held-out example, then the parts a search holds:
    every example of both parts, in each of three fresh processes."""
    for _ in range(3):
        counts = _counts("partial", str(root), "20")
        assert counts["held"] == counts["given"] == [TRAIN, HELD_OUT], counts


@pytest.mark.parametrize("model", ["mlp", "custom_models:small_mlp"])
def test_the_stock_tuner_gives_every_trial_the_whole_split(root, tmp_path, model):
    """TFX's own Tuner code (its fn_args and data accessor), tfx-accum's tuner_fn: what
    the trials are given is the split's count, in a fresh process each."""
    counts = _counts("tuner", str(root), model, str(tmp_path / "work"))
    assert counts["held"] == counts["given"] == [TRAIN, HELD_OUT], counts
    assert (counts["train_size"], counts["validation_size"]) == (TRAIN, HELD_OUT)
