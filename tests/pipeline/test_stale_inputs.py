"""A rerun on changed inputs never comes from the cache: real runs of the command.

TFX keys a cached ExampleGen by its input files' count, size and modification time to the
second; a CSV whose every label is inverted in place, at the same size, with its time
restored (``touch -r``), was served from the cache, and the run reported the old model as
blessed. The project's ExampleGen fingerprints its input by content.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from reliability_runs import (
    NO_TUNE,
    digits_csv,
    pushed_model,
    run_to_end,
    served_accuracy,
)

# Runs the pipeline or a command in subprocesses (minutes): `pytest -m "not e2e"` skips it.
pytestmark = pytest.mark.e2e


def test_labels_inverted_in_place_at_the_same_size_and_time_are_trained_on(tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    csv = data / "digits.csv"
    x, labels = digits_csv(csv)
    args = ["--data-root", str(data), *NO_TUNE]
    first = run_to_end(out, args)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert served_accuracy(pushed_model(first.stdout), x, labels) > 0.8

    before = csv.stat()
    x, inverted = digits_csv(csv, invert=True)
    assert csv.stat().st_size == before.st_size
    os.utime(csv, ns=(before.st_atime_ns, before.st_mtime_ns))  # as `touch -r`

    rerun = run_to_end(out, args)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "served from cache" not in rerun.stdout, rerun.stdout[-3000:]
    pushed = pushed_model(rerun.stdout)
    assert pushed != pushed_model(first.stdout)
    # The pushed model learnt the new labels, not the old ones.
    assert served_accuracy(pushed, x, inverted) > 0.8
    # And an unchanged rerun is still served from the cache.
    again = run_to_end(out, args)
    assert again.returncode == 0 and "CsvExampleGen served from cache" in again.stdout


def _trained_features(out: Path) -> list[str]:
    runs = out / "pipeline" / "Trainer" / "model_run"
    newest = max(runs.iterdir(), key=lambda p: int(p.name))
    description = json.loads((newest / "data_description.json").read_text())
    return sorted(f["name"] for f in description["features"])


def test_a_schema_edited_in_place_is_imported_again(tmp_path):
    """A --schema file overwritten with more features was served from the cache: the
    console said the new features, the pushed model was the old schema's."""
    data, out, schema = tmp_path / "data", tmp_path / "out", tmp_path / "schema.pbtxt"
    data.mkdir()
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (300, 3))
    rows = "".join(f"{a:.4f},{b:.4f},{c:.4f},{int(a + b + c > 1.5)}\n" for a, b, c in x)
    (data / "d.csv").write_text("a,b,c,label\n" + rows)
    only_a = 'feature { name: "a" type: FLOAT }\nfeature { name: "label" type: INT }\n'
    schema.write_text(only_a)
    args = ["--data-root", str(data), "--schema", str(schema), *NO_TUNE]
    first = run_to_end(out, args)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert _trained_features(out) == ["a"]

    schema.write_text(
        only_a + 'feature { name: "b" type: FLOAT }\nfeature { name: "c" type: FLOAT }\n'
    )
    rerun = run_to_end(out, args)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "ImportSchemaGen served from cache" not in rerun.stdout
    assert _trained_features(out) == ["a", "b", "c"]
