"""End to end: the local pipeline on the embedded digits, its cache, and bad inputs."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from pipeline_runs import COMPONENTS, ROOT, SMALL, digits_examples, run_cli  # noqa: F401 - first_run: conftest.py

# Runs the pipeline or a command in subprocesses (minutes): `pytest -m "not e2e"` skips it.
pytestmark = pytest.mark.e2e


def test_pipeline_pushes_a_blessed_model_that_classifies_digits(first_run):
    out, stdout, _ = first_run
    for component in COMPONENTS:
        assert f"[pipeline] {component} done" in stdout, component
    assert re.search(r"\[tuner\] trial \d+: accumulation_steps=\d+ micro_batch=\d+", stdout)
    assert "blessed: yes" in stdout
    pushed = re.search(r"pushed to: (\S+)", stdout).group(1)
    assert Path(pushed).is_dir() and Path(pushed).parent == out / "serving_model"

    # The pushed model is a plain SavedModel whose serving_default parses tf.Examples.
    model = tf.saved_model.load(pushed)
    serve = model.signatures["serving_default"]
    serialized, labels = digits_examples()
    scores = serve(examples=tf.constant(serialized))["scores"].numpy()
    assert scores.shape == (len(labels), 10)
    accuracy = float(np.mean(scores.argmax(axis=1) == labels))
    assert accuracy >= 0.95, accuracy

    # The best-hyperparameters artifact holds all three searched hyperparameters.
    best_files = list(
        (out / "pipeline" / "Tuner" / "best_hyperparameters").glob("*/best_hyperparameters.txt")
    )
    assert len(best_files) == 1
    values = json.loads(best_files[0].read_text())["values"]
    assert values["accumulation_steps"] in (1, 2)
    assert values["micro_batch_size"] in (16, 32)
    assert 2e-3 <= values["learning_rate"] <= 1e-2

    assert (out / "trials.png").stat().st_size > 1000
    rows = (out / "trials.csv").read_text().strip().splitlines()
    assert rows[0].startswith(
        "trial_id,score,accumulation_steps,micro_batch_size,effective_batch,learning_rate"
    )
    assert len(rows) == 3  # header + 2 completed trials
    trials = list(csv.DictReader((out / "trials.csv").open()))
    for trial in trials:  # speed, memory and budget beside each score
        assert float(trial["examples_per_second"]) > 0
        assert float(trial["peak_memory_mb"]) > 0
        # Two tuning epochs of the training split less its held-out fifth (937 of 1,171).
        assert 2 * 937 <= float(trial["examples"]) < 2 * 937 + 2 * 64
    # The Trainer trains the best trial's configuration for the best trial's budget, and
    # keeps the best trial's epoch: it ends with the best trial's validation score.
    budget = json.loads(
        next((out / "pipeline" / "Trainer" / "model_run").glob("*/budget.json")).read_text()
    )
    assert budget["examples"] == budget["updates"] * budget["global_batch"] == values["examples"]
    assert budget["global_batch"] == values["accumulation_steps"] * values["micro_batch_size"]
    best = max(trials, key=lambda t: float(t["score"]))
    assert budget["validation_score"] == pytest.approx(float(best["score"]), abs=1e-6)
    # TensorBoard logs of the Trainer run.
    assert list((out / "pipeline" / "Trainer" / "model_run").rglob("events.out.tfevents*"))


# The project's own console lines: tagged progress lines, the summary, blank lines.
OWN_LINE = re.compile(
    r"^(\[(tfx-accum|data|pipeline|tuner( w\d+)?|trainer)\] |=== tfx-accum summary ===$|"
    r"(best trial|tuning|budget|evaluation accuracy|blessed|pushed to|trials|wall time|"
    r"data anomalies): |  \(trial \d+ ran it as |  \S.*: .* \(\w+ split\)$|$)"
)


def test_console_shows_only_the_projects_own_lines_and_the_log_has_the_rest(first_run):
    out, stdout, _ = first_run
    lines = stdout.splitlines()
    foreign = [line for line in lines if not OWN_LINE.match(line)]
    assert not foreign, foreign
    assert len(lines) <= 60, len(lines)
    # Training shows progress with a throughput, and the log path is given up front.
    assert re.search(r"\[trainer\] \d+/\d+ updates \(\d+%\).*examples/s", stdout)
    log = Path(re.search(r"^\[tfx-accum\] log: (\S+)", stdout, re.M).group(1))
    assert lines.index(f"[tfx-accum] log: {log}") < 5  # before any component
    assert log.parent == out / "logs"
    text = log.read_text()
    assert "[pipeline] Trainer done" in text  # our lines, in order with the libraries'
    assert len(text.splitlines()) > len(lines)  # and the libraries' output that we hid


def execution_dirs(pipeline_root: Path) -> set[Path]:
    """Every component output's execution directory (``<Component>/<output>/<id>``)."""
    return {path for path in pipeline_root.glob("*/*/*") if path.name.isdigit()}


def test_a_run_leaves_nothing_in_the_temporary_directory(first_run):
    """AutoGraph's generated sources (deleted at exit by atexit, which the command's
    os._exit skips) and Beam's staging directories go to the run's own directory, removed
    before the exit (tfx_accum.pipeline.cli.temp_dir)."""
    out, _, _ = first_run
    assert sorted(p.name for p in (out.parent / "tmp").iterdir()) == []


def test_second_run_is_served_from_cache(first_run):
    out, _, _ = first_run
    before = execution_dirs(out / "pipeline")
    proc, _ = run_cli("--output-dir", str(out), *SMALL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("served from cache") == 8, proc.stdout
    assert "blessed: yes" in proc.stdout
    # Nothing ran again: no component wrote a new output (a timing would only be noisy).
    assert before and execution_dirs(out / "pipeline") == before


def write_csv(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "data.csv").write_text(text)
    return directory


def write_csvs(directory: Path, *texts: str) -> Path:
    """Files a.csv, b.csv, ... with the given contents."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in zip("abcdef", texts):
        (directory / f"{name}.csv").write_text(text)
    return directory


def _png() -> bytes:
    return tf.io.encode_png(tf.zeros((4, 4, 1), tf.uint8)).numpy()


PNG = _png()


def write_records(directory: Path, *files: list[list]) -> Path:
    """TFRecord files a.tfrecord, b.tfrecord, ... of examples [image, label(, size)]."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, rows in zip("abcdef", files):
        with tf.io.TFRecordWriter(str(directory / f"{name}.tfrecord")) as writer:
            for row in rows:
                feature = {
                    "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[row[0]])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[row[1]])),
                }
                if len(row) > 2:
                    feature["size"] = tf.train.Feature(
                        float_list=tf.train.FloatList(value=[row[2]])
                    )
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
    return directory


BAD_INPUTS = {
    "missing data root": (lambda tmp: ["--data-root", str(tmp / "nope")], "does not exist"),
    "no csv": (
        lambda tmp: ["--data-root", str((tmp / "empty").mkdir() or tmp / "empty")],
        "holds no .csv",
    ),
    "no label column": (
        lambda tmp: ["--data-root", str(write_csv(tmp / "nolabel", "a,b\n1,2\n3,4\n"))],
        "no label column 'label'",
    ),
    "number with spaces": (
        lambda tmp: ["--data-root", str(write_csv(tmp / "text", "pixel_00,label\n1,0\n 2,1\n"))],
        "line 3, column 'pixel_00': ' 2' has spaces around it",
    ),
    "missing label": (
        lambda tmp: ["--data-root", str(write_csv(tmp / "nolab", "a,label\n1,0\n2,\n3,1\n"))],
        "line 3, column 'label': the label is missing",
    ),
    "label outside --num-classes": (
        lambda tmp: [
            "--data-root",
            str(write_csv(tmp / "range", "a,label\n1,0\n2,1\n3,2\n")),
            "--num-classes",
            "2",
        ],  # fmt: skip
        "line 4, column 'label': label 2 is outside 0..1 (--num-classes 2)",
    ),
    "string labels and --num-classes": (
        lambda tmp: [
            "--data-root",
            str(write_csv(tmp / "names", "a,label\n1,cat\n2,dog\n")),
            "--num-classes",
            "3",
        ],  # fmt: skip
        "--num-classes 3, but the labels have 2 distinct values",
    ),
    "a file lacks a column": (
        lambda tmp: [
            "--data-root",
            str(write_csvs(tmp / "mixed", "a,b,label\n1,2,0\n", "a,label\n1,1\n")),
        ],
        "b.csv lacks column(s) 'b' that",
    ),
    "a file without header": (
        lambda tmp: [
            "--data-root",
            str(write_csvs(tmp / "nohead", "a,label\n1,0\n", "2,1\n3,0\n")),
        ],
        "b.csv, line 1 looks like data (2, 1...), not a header",
    ),
    "image that does not decode": (
        lambda tmp: ["--data-root", str(write_records(tmp / "badimg", [[PNG, 0], [PNG[:40], 1]]))],
        "a.tfrecord, record 2, feature 'image': the image does not decode",
    ),
    "feature missing from a file": (
        lambda tmp: [
            "--data-root",
            str(write_records(tmp / "lack", [[PNG, 0, 1.0], [PNG, 1, 2.0]], [[PNG, 1]])),
        ],
        "b.tfrecord has no feature 'size' in any record, while",
    ),
    "label outside the class range (TFRecord)": (
        lambda tmp: [
            "--data-root",
            str(write_records(tmp / "lab", [[PNG, 0], [PNG, 5]])),
            "--num-classes",
            "3",
        ],  # fmt: skip
        "a.tfrecord, record 2, column 'label': label 5 is outside 0..2",
    ),
    "non-positive choices": (lambda tmp: ["--steps-choices", "0,2"], "positive integers"),
    "empty lr range": (
        lambda tmp: ["--lr-min", "0.1", "--lr-max", "0.01"],
        "learning-rate range is empty",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_fails_fast_and_leaves_outputs_intact(case, first_run, tmp_path, capsys):
    from tfx_accum.pipeline.cli.parser import main

    out, _, _ = first_run
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    make_args, expected = BAD_INPUTS[case]
    assert main(["run", "--output-dir", str(out), *make_args(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert expected in captured.err, captured.err
    assert captured.err.startswith("tfx-accum run: error: ")
    assert "[pipeline]" not in captured.out  # no component ran
    after = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert after == before


def test_beam_orchestrator_without_tuning(tmp_path):
    out = tmp_path / "beam"
    proc, _ = run_cli(
        "--output-dir",
        str(out),
        "--orchestrator",
        "beam",
        "--no-tune",
        "--train-steps",
        "40",
        "--accuracy-threshold",
        "0.5",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "[pipeline] Tuner" not in proc.stdout
    assert "[pipeline] Trainer done" in proc.stdout
    assert "tuning: off" in proc.stdout
    assert "hyperparameters (fixed (tuning off))" in proc.stdout
    assert list((out / "serving_model").iterdir())


def test_hyperband_runs_through_the_pipeline_and_unblessed_exits_3(tmp_path):
    out = tmp_path / "hyperband"
    proc, _ = run_cli(
        "--output-dir",
        str(out),
        "--algorithm",
        "hyperband",
        "--tuning-epochs",
        "2",
        "--accumulation-steps-choices",
        "1,2",
        "--micro-batch-choices",
        "32,64",
        "--train-steps",
        "30",
        "--accuracy-threshold",
        "0.999",
    )
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[pipeline] Tuner done" in proc.stdout
    assert re.search(
        r"^best trial: accumulation_steps=[12] micro_batch=(32|64) ", proc.stdout, re.M
    )
    assert re.search(
        r"^blessed: no \(accuracy 0\.\d{4} is below the threshold 0\.999\): not pushed",
        proc.stdout,
        re.M,
    ), proc.stdout[-3000:]
    assert "pushed to: not pushed" in proc.stdout
    assert not (out / "serving_model").exists() or not list((out / "serving_model").iterdir())
