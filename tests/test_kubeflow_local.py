"""The compiled Kubeflow spec, executed: every task through KFP's own local orchestrator.

``tfx-accum run-compiled`` runs the very YAML a user uploads with ``kfp.local`` (KFP 2.17, in
its own environment), the tfx-accum environment standing in for the image. One run trains
and pushes on the digits; a second run after rows were added to the data root must read
them (on KFP nothing fingerprints the data root, so a cached ExampleGen would serve the old
examples).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import yaml
from pipeline_runs import COMPONENTS, ROOT, digits_examples

from tfx_accum.pipeline.data import write_embedded_digits

TASKS = COMPONENTS  # the compiled spec's tasks are the pipeline's components


def tfx_accum(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from tfx_accum.pipeline.cli import entry; entry()", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


def run_dirs(root: Path) -> list[Path]:
    return sorted(root.glob("tfx-accum-*"), key=lambda p: p.name)


def example_count(run_dir: Path) -> int:
    files = (run_dir / "CsvExampleGen" / "examples").rglob("*.gz")
    return sum(1 for path in files for _ in tf.data.TFRecordDataset(str(path), "GZIP"))


@pytest.fixture(scope="module")
def compiled_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("kfp-local")
    data, root = work / "data", work / "root"
    write_embedded_digits(data)
    (csv,) = data.glob("*.csv")
    spec = work / "spec.yaml"
    proc = tfx_accum(
        "compile", "--node-pool", "cpu", "--output", str(spec),
        "--image", "europe-docker.pkg.dev/proj/repo/tfx-accum:0.1.0",
        "--pipeline-root", str(root), "--data-root", str(data), "--model", "cnn",
        "--max-trials", "2", "--tuning-epochs", "1", "--train-steps", "100",
        "--accumulation-steps-choices", "1,2", "--micro-batch-choices", "16,32",
        "--lr-min", "2e-3", "--lr-max", "1e-2",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = tfx_accum("run-compiled", str(spec))
    assert first.returncode == 0, first.stdout[-5000:] + first.stderr[-3000:]
    return work, spec, root, data, csv


def test_every_task_of_the_compiled_spec_runs_and_the_pushed_model_serves(compiled_run):
    _, spec, root, _, _ = compiled_run
    (run,) = run_dirs(root)
    for task in TASKS:  # each task wrote its executor output (kfp.local read it)
        assert (run / task / "executor_output.json").is_file(), task
    uploaded = next(yaml.safe_load_all(spec.read_text()))
    assert set(uploaded["root"]["dag"]["tasks"]) == set(TASKS)

    (pushed,) = (root / "serving_model").iterdir()
    serve = tf.saved_model.load(str(pushed)).signatures["serving_default"]
    serialized, labels = digits_examples()
    scores = serve(examples=tf.constant(serialized))["scores"].numpy()
    assert float(np.mean(scores.argmax(axis=1) == labels)) >= 0.9


def test_rows_added_to_the_data_root_are_read_by_the_next_run(compiled_run):
    _, spec, root, data, csv = compiled_run
    first_count = example_count(run_dirs(root)[0])
    # New rows under the same data root: a second file of 200 more digits.
    lines = csv.read_text().splitlines()
    (data / "more.csv").write_text("\n".join([lines[0], *lines[1:201]]) + "\n")
    second = tfx_accum("run-compiled", str(spec))
    assert second.returncode == 0, second.stdout[-5000:] + second.stderr[-3000:]
    runs = run_dirs(root)
    assert len(runs) == 2
    assert example_count(runs[1]) == first_count + 200
    assert (runs[1] / "Trainer" / "executor_output.json").is_file()  # retrained on them
