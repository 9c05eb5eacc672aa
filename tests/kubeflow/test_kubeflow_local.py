"""The compiled Kubeflow spec, executed in the image's layout: every task through KFP's own
local orchestrator.

``tfx-accum run-compiled`` runs the very YAML a user uploads with ``kfp.local`` (KFP 2.17, in
its own environment). The "image" is ``kubeflow/Dockerfile`` replayed without Docker (the
``image`` fixture: the project's wheel installed by the Dockerfile's own lines into a fresh
environment), and each task runs in the image's ``WORKDIR`` with its ``ENV``, as a pod
does. Two runs of one compiled spec, no recompile:

1. the defaults: trains and pushes on the digits;
2. the same data with other run-time parameters (``max_trials=3``, ``train_steps=20``, a
   threshold no model reaches): ExampleGen reads the data root again (it is never served
   from the cache: on KFP nothing fingerprints the data root, so a cached ExampleGen would
   serve old examples when rows are added), the Tuner continues the first run's search (it
   is keyed by the examples' content, which ExampleGen's new files keep), the Trainer makes
   20 updates, and nothing is pushed.

(Other data gives another search: tests/data/test_fingerprint.py.)
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

from tfx_accum.pipeline.checks.data import write_embedded_digits

# Runs the pipeline or a command in subprocesses (minutes): `pytest -m "not e2e"` skips it.
pytestmark = pytest.mark.e2e

TASKS = COMPONENTS  # the compiled spec's tasks are the pipeline's components
# The compile-time values, and the second run's (run-time parameters).
COMPILED = {"max_trials": 2, "train_steps": 100, "bless_threshold": 0.95}
SECOND = {"max_trials": 3, "train_steps": 20, "bless_threshold": 1.0}


def tfx_accum(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from tfx_accum.pipeline.cli.parser import entry; entry()", *args],
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
    spec = work / "spec.yaml"
    proc = tfx_accum(
        "compile", "--node-pool", "cpu", "--output", str(spec),
        "--image", "europe-docker.pkg.dev/proj/repo/tfx-accum:0.1.0",
        "--pipeline-root", str(root), "--data-root", str(data), "--model", "cnn",
        "--max-trials", str(COMPILED["max_trials"]), "--tuning-epochs", "1",
        "--train-steps", str(COMPILED["train_steps"]),
        "--bless-threshold", str(COMPILED["bless_threshold"]),
        "--accumulation-steps-choices", "1,2", "--micro-batch-choices", "16,32",
        "--lr-min", "2e-3", "--lr-max", "1e-2",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = run_in_image(image, spec)
    assert first.returncode == 0, first.stdout[-5000:] + first.stderr[-3000:]
    first_search = {s: trials(s) for s in searches(root)}
    return spec, root, first_search


def test_every_task_of_the_compiled_spec_runs_in_the_image_and_the_pushed_model_serves(
    compiled_run, image
):
    spec, root, first_search = compiled_run
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
    spec, root, _ = compiled_run
    proc = run_in_image(image, spec, **SECOND)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    return run_dirs(root)[-1]


def test_run_time_parameters_change_a_run_without_a_recompile(compiled_run, second_run):
    _, root, first_search = compiled_run
    assert len(run_dirs(root)) == 2
    assert budget(second_run)["updates"] == SECOND["train_steps"]
    # No model reaches accuracy 1.0: not blessed, so nothing more was pushed.
    assert not blessed(second_run)
    assert len(list((root / "serving_model").iterdir())) == 1
    ((search, _),) = first_search.items()
    assert len(trials(search)) == SECOND["max_trials"]


def test_a_rerun_on_the_same_data_continues_the_finished_search(compiled_run, second_run):
    """ExampleGen ran again (new files, new paths); the search is keyed by their content."""
    _, root, first_search = compiled_run
    ((search, before),) = first_search.items()
    assert searches(root) == [search]  # the same search, not a new one
    after = trials(search)
    for trial_id, trial in before.items():  # the first run's trials were not run again
        assert after[trial_id] == trial
    (new,) = set(after) - set(before)
    assert after[new]["status"] == "COMPLETED"


def test_example_gen_reads_the_data_root_on_every_run(compiled_run, second_run):
    """Not served from the cache: new files, in the second run's own directory, so rows
    added to the data root would be read (kfp.local caches a task whose cache is on)."""
    _, root, _ = compiled_run
    first, second = run_dirs(root)
    assert second == second_run
    assert (second / "CsvExampleGen" / "executor_output.json").is_file()
    assert example_count(second) == example_count(first) > 0
    # Everything downstream ran on those new examples (not the first run's, from a cache).
    for task in ("StatisticsGen", "Tuner", "Trainer"):
        assert (second / task / "executor_output.json").is_file(), task
