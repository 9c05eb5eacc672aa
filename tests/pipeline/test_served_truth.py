"""What is served is what was trained: real ``tfx-accum run`` processes on one output
directory, changing one thing between runs as a user would.

- ``--model m1:net`` edited (Dense 32 -> 12): the run says so and trains the edited model,
  which is pushed; the TFX cache held the function's name, not its code.
- data A, then B under the same file name, then A again (restored with its time, as
  ``cp -p`` does): every component is served from the cache, the model is A's, and it is
  pushed again as the newest version (a cached Pusher reported A's first version while
  B's, newer, was what a server loads); an unchanged rerun pushes nothing.
- ``serving_model`` deleted: the rerun pushes again (it reported a version that did not
  exist).
- ``--label-key`` changed to a regression target: refused before anything runs, naming
  both signatures (a server watching ``serving_model`` switched outputs without a word).

One module fixture runs the sequence; each test checks one step.
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf
from reliability_runs import digits_csv, served_accuracy

pytestmark = pytest.mark.e2e  # pipeline runs in subprocesses (minutes)

ARGS = [
    "--no-tune",
    "--model",
    "m1:net",
    "--accumulation-steps",
    "2",
    "--micro-batch-size",
    "16",
    "--learning-rate",
    "0.01",
    "--train-steps",
    "60",
]
BLESS = ("--accuracy-threshold", "0.3")  # the classifier's runs; a regression has no accuracy
MODEL = """import keras


def net(features, num_classes, hp):
    inputs = {{name: keras.Input((1,), name=name) for name in sorted(features)}}
    x = keras.layers.Concatenate()(list(inputs.values()))
    x = keras.layers.Dense({width}, activation="relu")(x)
    if num_classes is None:  # a regression target
        return keras.Model(inputs, keras.layers.Dense(1)(x))
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))
"""


def _hidden_width(version: Path) -> int:
    """Units of the served model's hidden layer (its 64-row kernel)."""
    loaded = tf.saved_model.load(str(version))
    (kernel,) = [v for v in loaded.variables if tuple(v.shape)[:1] == (64,) and v.shape.rank == 2]
    return int(kernel.shape[1])


class Sequence:
    """The runs, in order, on one output directory."""

    def __init__(self, root: Path):
        self.data, self.out, self.project = root / "data", root / "out", root / "project"
        self.data.mkdir()
        self.project.mkdir()
        self.serving = self.out / "serving_model"
        self.csv = self.data / "digits.csv"
        self.kept = root / "pushed"  # a copy of every version pushed, for the checks
        self.runs: dict[str, tuple[subprocess.CompletedProcess, list[str]]] = {}
        self.started: dict[str, str] = {}  # ISO times: what names each run in ML Metadata

    def model(self, width: int) -> None:
        (self.project / "m1.py").write_text(MODEL.format(width=width))

    def run(
        self, name: str, *extra: str, bless: tuple[str, ...] = BLESS
    ) -> subprocess.CompletedProcess:
        self.started[name] = datetime.datetime.now().isoformat()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tfx_accum.pipeline",
                "--data-root",
                str(self.data),
                "--output-dir",
                str(self.out),
                *ARGS,
                *bless,
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "PYTHONPATH": str(self.project), "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
        self.runs[name] = (proc, self.versions())
        for version in self.versions():
            if not (self.kept / version).exists():
                shutil.copytree(self.serving / version, self.kept / version)
        return proc

    def pushed(self, name: str) -> Path:
        """The copy of what run ``name`` reports it pushed (the version may be gone)."""
        return self.kept / _pushed(self.runs[name][0]).name

    def versions(self) -> list[str]:
        if not self.serving.exists():
            return []
        return sorted((p.name for p in self.serving.iterdir() if p.name.isdigit()), key=int)


def _pushed(proc: subprocess.CompletedProcess) -> Path:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return Path(re.search(r"pushed to: (\S+)", proc.stdout).group(1))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Sequence:
    seq = Sequence(tmp_path_factory.mktemp("served"))
    seq.model(32)
    digits_csv(seq.csv, invert=False)
    a_file = seq.csv.stat()
    seq.run("first")
    seq.model(12)  # the user edits the model function
    seq.run("edited")
    digits_csv(seq.csv, invert=True)  # data B, same file name
    seq.run("b")
    digits_csv(seq.csv, invert=False)  # data A again, as `cp -p` restores it: its time too
    os.utime(seq.csv, ns=(a_file.st_atime_ns, a_file.st_mtime_ns))
    seq.run("a_again")
    seq.run("unchanged")
    shutil.rmtree(seq.serving)
    seq.run("serving_deleted")
    seq.run("label_changed", "--label-key", "p10", "--task", "regression", bless=())
    return seq


def test_an_edited_model_function_is_trained_again_and_pushed(runs):
    edited, versions = runs.runs["edited"]
    assert _hidden_width(runs.pushed("first")) == 32
    assert "[pipeline] --model m1:net: m1.py changed since the last run here" in edited.stdout
    assert "Trainer served from cache" not in edited.stdout, edited.stdout[-3000:]
    assert _pushed(edited).name == versions[-1]
    assert _hidden_width(runs.pushed("edited")) == 12


def test_data_a_again_after_b_pushes_as_model_again_as_the_newest_version(runs):
    x, labels = digits_csv(runs.data / "check.csv", invert=False)
    (runs.data / "check.csv").unlink()
    b_version = _pushed(runs.runs["b"][0])
    proc, versions = runs.runs["a_again"]
    pushed = _pushed(proc)
    assert "Trainer served from cache" in proc.stdout  # A's model, from the edited run
    assert pushed.name == versions[-1] and int(pushed.name) > int(b_version.name)
    assert "pushed again: this model's earlier push" in proc.stdout
    assert served_accuracy(runs.pushed("a_again"), x, labels) > 0.5
    assert served_accuracy(runs.pushed("b"), x, labels) < 0.3


def test_an_unchanged_rerun_is_served_from_the_cache_and_pushes_nothing_new(runs):
    before = runs.runs["a_again"][1]
    proc, versions = runs.runs["unchanged"]
    assert "Pusher served from cache" in proc.stdout, proc.stdout[-3000:]
    assert _pushed(proc).name == versions[-1] == before[-1]
    assert versions == before
    assert "pushed again" not in proc.stdout


def test_a_deleted_serving_directory_is_pushed_to_again(runs):
    proc, versions = runs.runs["serving_deleted"]
    pushed = _pushed(proc)
    assert (pushed / "saved_model.pb").exists()
    assert versions == [pushed.name]
    assert "is gone" in proc.stdout


def test_a_label_change_with_another_signature_is_refused_before_anything_runs(runs):
    proc, versions = runs.runs["label_changed"]
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert "serves serving_default with classes string (-1, 1), scores float32 (-1, 10)" in line
    assert "would serve predictions float32 (-1, 1)" in line
    assert "--allow-signature-change" in line
    assert versions == runs.runs["serving_deleted"][1]  # nothing pushed
    assert "[pipeline]" not in proc.stdout


def test_the_summary_never_names_a_version_that_is_not_what_a_server_loads(runs):
    """Read again after a newer version appeared (another process's push): the summary's
    line says so instead of reporting the push as what is served."""
    from tfx_accum.pipeline.cli.report import read_summary
    from tfx_accum.pipeline.cli.summary import pushed_line

    metadata = str(runs.out / "metadata.sqlite")
    summary = read_summary(metadata, runs.started["serving_deleted"], str(runs.serving))
    pushed = _pushed(runs.runs["serving_deleted"][0])
    assert (summary.pushed_to, summary.not_served) == (str(pushed), None)
    newer = runs.serving / str(int(pushed.name) + 1)
    shutil.copytree(pushed, newer)
    try:
        summary = read_summary(metadata, runs.started["serving_deleted"], str(runs.serving))
        assert summary.not_served == f"{newer} is a newer version, which a server loads"
        assert pushed_line(summary) == (
            f"pushed to: {pushed}, which is not what a server loads: {summary.not_served}; "
            "exit code 1"
        )
    finally:
        shutil.rmtree(newer)
