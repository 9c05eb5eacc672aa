"""The compiled Kubeflow spec, executed in the image's layout: every task through KFP's own
local orchestrator.

``tfx-accum run-compiled`` runs the very YAML a user uploads with ``kfp.local`` (KFP 2.17, in
its own environment). The "image" is ``kubeflow/Dockerfile`` replayed without Docker (the
``image`` fixture: the project's wheel installed by the Dockerfile's own lines into a fresh
environment), and each task runs in the image's ``WORKDIR`` with its ``ENV``, as a pod
does. Three runs of one compiled spec, no recompile:

1. the defaults: trains and pushes on the digits;
2. the same data with other run-time parameters (``max_trials=3``, ``train_steps=20``, a
   threshold no model reaches): the Tuner continues the first run's search (it is keyed by
   the examples' content, which a new ExampleGen run on the same data keeps), the Trainer
   makes 20 updates, and nothing is pushed;
3. rows added to the data root: ExampleGen reads them (on KFP nothing fingerprints the data
   root, so a cached ExampleGen would serve the old examples) and a new search starts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import yaml
from image_layout import image_env
from pipeline_runs import COMPONENTS, ROOT, digits_examples

from tfx_accum.pipeline.data import write_embedded_digits

TASKS = COMPONENTS  # the compiled spec's tasks are the pipeline's components
# The compile-time values, and the second run's (run-time parameters).
COMPILED = {"max_trials": 2, "train_steps": 100, "accuracy_threshold": 0.95}
SECOND = {"max_trials": 3, "train_steps": 20, "accuracy_threshold": 1.0}


def tfx_accum(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from tfx_accum.pipeline.cli import entry; entry()", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )


def run_in_image(image, spec: Path, **parameters) -> subprocess.CompletedProcess:
    """``tfx-accum run-compiled`` with the replayed image standing in for the container."""
    arguments = [f"{name}={value}" for name, value in parameters.items()]
    return tfx_accum(
        "run-compiled", str(spec), *arguments,
        "--image-python", str(image.python), "--workdir", str(image.workdir),
        env=image_env(image),
    )  # fmt: skip


def run_dirs(root: Path) -> list[Path]:
    return sorted(root.glob("tfx-accum-*"), key=lambda p: p.name)


def example_count(run_dir: Path) -> int:
    files = (run_dir / "CsvExampleGen" / "examples").rglob("*.gz")
    return sum(1 for path in files for _ in tf.data.TFRecordDataset(str(path), "GZIP"))


def searches(root: Path) -> list[Path]:
    return sorted((root / "_search").glob("search-*"))


def trials(search: Path) -> dict[str, dict]:
    """The search's trials by id (Keras Tuner's trial.json files)."""
    found = (json.loads(p.read_text()) for p in search.glob("*/trial_*/trial.json"))
    return {trial["trial_id"]: trial for trial in found}


def budget(run_dir: Path) -> dict:
    (path,) = (run_dir / "Trainer").rglob("budget.json")
    return json.loads(path.read_text())


def blessed(run_dir: Path) -> bool:
    (blessing,) = {p.name for p in (run_dir / "Evaluator").rglob("*BLESSED")}
    return blessing == "BLESSED"


@pytest.fixture(scope="module")
def compiled_run(tmp_path_factory, image):
    work = tmp_path_factory.mktemp("kfp-local")
    data, root = work / "data", work / "root"
    write_embedded_digits(data)
    (csv,) = data.glob("*.csv")
    spec = work / "spec.yaml"
    proc = tfx_accum(
        "compile", "--node-pool", "cpu", "--output", str(spec),
        "--image", "europe-docker.pkg.dev/proj/repo/tfx-accum:0.1.0",
        "--pipeline-root", str(root), "--data-root", str(data), "--model", "cnn",
        "--max-trials", str(COMPILED["max_trials"]), "--tuning-epochs", "1",
        "--train-steps", str(COMPILED["train_steps"]),
        "--accuracy-threshold", str(COMPILED["accuracy_threshold"]),
        "--accumulation-steps-choices", "1,2", "--micro-batch-choices", "16,32",
        "--lr-min", "2e-3", "--lr-max", "1e-2",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = run_in_image(image, spec)
    assert first.returncode == 0, first.stdout[-5000:] + first.stderr[-3000:]
    first_search = {s: trials(s) for s in searches(root)}
    return work, spec, root, data, csv, first_search


def test_every_task_of_the_compiled_spec_runs_in_the_image_and_the_pushed_model_serves(
    compiled_run, image
):
    _, spec, root, _, _, first_search = compiled_run
    (run,) = run_dirs(root)
    for task in TASKS:  # each task wrote its executor output (kfp.local read it)
        assert (run / task / "executor_output.json").is_file(), task
    uploaded = next(yaml.safe_load_all(spec.read_text()))
    assert set(uploaded["root"]["dag"]["tasks"]) == set(TASKS)
    # The image's working directory holds nothing of the project (nothing to shadow it).
    assert list(image.workdir.iterdir()) == []
    # The compile-time values are the defaults: 2 trials, 100 updates, pushed at 0.95.
    ((search, found),) = first_search.items()
    assert len(found) == COMPILED["max_trials"]
    assert budget(run)["updates"] == COMPILED["train_steps"] and blessed(run)

    (pushed,) = (root / "serving_model").iterdir()
    serve = tf.saved_model.load(str(pushed)).signatures["serving_default"]
    serialized, labels = digits_examples()
    scores = serve(examples=tf.constant(serialized))["scores"].numpy()
    assert float(np.mean(scores.argmax(axis=1) == labels)) >= 0.9


@pytest.fixture(scope="module")
def second_run(compiled_run, image):
    _, spec, root, _, _, _ = compiled_run
    proc = run_in_image(image, spec, **SECOND)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    return run_dirs(root)[-1]


def test_run_time_parameters_change_a_run_without_a_recompile(compiled_run, second_run):
    _, _, root, _, _, first_search = compiled_run
    assert len(run_dirs(root)) == 2
    assert budget(second_run)["updates"] == SECOND["train_steps"]
    # No model reaches accuracy 1.0: not blessed, so nothing more was pushed.
    assert not blessed(second_run)
    assert len(list((root / "serving_model").iterdir())) == 1
    ((search, _),) = first_search.items()
    assert len(trials(search)) == SECOND["max_trials"]


def test_a_rerun_on_the_same_data_continues_the_finished_search(compiled_run, second_run):
    """ExampleGen ran again (new files, new paths); the search is keyed by their content."""
    _, _, root, _, _, first_search = compiled_run
    ((search, before),) = first_search.items()
    assert searches(root) == [search]  # the same search, not a new one
    after = trials(search)
    for trial_id, trial in before.items():  # the first run's trials were not run again
        assert after[trial_id] == trial
    (new,) = set(after) - set(before)
    assert after[new]["status"] == "COMPLETED"


def test_rows_added_to_the_data_root_are_read_by_the_next_run(compiled_run, second_run, image):
    _, spec, root, data, csv, _ = compiled_run
    first_count = example_count(run_dirs(root)[0])
    # New rows under the same data root: a second file of 200 more digits.
    lines = csv.read_text().splitlines()
    (data / "more.csv").write_text("\n".join([lines[0], *lines[1:201]]) + "\n")
    third = run_in_image(image, spec, max_trials=1, train_steps=20)
    assert third.returncode == 0, third.stdout[-5000:] + third.stderr[-3000:]
    runs = run_dirs(root)
    assert len(runs) == 3
    assert example_count(runs[2]) == first_count + 200
    assert budget(runs[2])["updates"] == 20  # retrained on them
    assert len(searches(root)) == 2  # other data: a search of its own
