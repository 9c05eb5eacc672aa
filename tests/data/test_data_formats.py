"""Your data beyond the digits CSV: TFRecords with images, CSVs with text and gaps.

Each path runs the whole pipeline once (Tuner to Pusher) and checks the pushed model the
way a client would use it: serialized tf.Examples with the raw values in, classes out.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from pipeline_runs import SMALL, run_cli

from tfx_accum.components.data.features import (
    NUMERIC,
    STRING,
    DataDescription,
    InputFeature,
    Preprocessor,
)
from tfx_accum.pipeline.checks.data import digit_image_examples


def _pushed(out: Path):
    (pushed,) = (out / "serving_model").iterdir()
    return tf.saved_model.load(str(pushed))


@pytest.mark.e2e
def test_the_image_path_trains_on_png_examples_and_serves_image_bytes(tmp_path):
    out = tmp_path / "images"
    proc, _ = run_cli("--output-dir", str(out), "--embedded", "digit-images", *SMALL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[pipeline] ImportExampleGen done" in proc.stdout
    assert "features: 1 image 32x32x1; 10 classes" in proc.stdout
    assert "model: cnn (the default for the embedded digit-images" in proc.stdout

    # serving_default takes serialized tf.Examples carrying the PNG bytes.
    records = digit_image_examples()
    labels = np.array(
        [
            tf.train.Example.FromString(r).features.feature["label"].int64_list.value[0]
            for r in records
        ]
    )
    serve = _pushed(out).signatures["serving_default"]
    result = serve(examples=tf.constant(records))
    assert result["scores"].shape == (len(records), 10)
    predicted = result["scores"].numpy().argmax(axis=1)
    assert float(np.mean(predicted == labels)) >= 0.95
    assert [c.decode() for c in result["classes"].numpy()[:20, 0]] == [
        str(p) for p in predicted[:20]
    ]


def _tabular_csv(directory: Path) -> tuple[list[dict], list[str]]:
    """scikit-learn's breast cancer data: 10 numeric columns with 5% of the cells missing
    (empty, or ``N/A`` in every other one), a text column (size: small/medium/large, also
    with gaps), a column empty in every row (``notes``) and text labels."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    rng = np.random.default_rng(0)
    names = [n.replace(" ", "_") for n in data.feature_names[:10]]
    radius = data.data[:, 0]
    cuts = np.quantile(radius, [1 / 3, 2 / 3])
    sizes = np.where(radius < cuts[0], "small", np.where(radius < cuts[1], "medium", "large"))
    rows, labels = [], []
    directory.mkdir(parents=True)
    with (directory / "cancer.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*names, "size", "notes", "diagnosis"])
        for index, (values, size, target) in enumerate(zip(data.data[:, :10], sizes, data.target)):
            row = {n: f"{v:.6g}" for n, v in zip(names, values) if rng.random() > 0.05}
            if rng.random() > 0.05:
                row["size"] = str(size)
            label = str(data.target_names[target])
            gap = "N/A" if index % 2 else ""
            writer.writerow([row.get(n, gap) for n in names] + [row.get("size", ""), "", label])
            rows.append(row)
            labels.append(label)
    return rows, labels


def _integer_columns(rows: list[dict]) -> set[str]:
    """Columns whose every value is an integer: CsvExampleGen makes them INT features, and
    a client must send them as int64 (the schema says each feature's type)."""
    names = {name for row in rows for name in row if name != "size"}
    return {n for n in names if all(row[n].lstrip("-").isdigit() for row in rows if n in row)}


def _example(row: dict, integers: set[str] = frozenset()) -> bytes:
    feature = {}
    for name, value in row.items():
        if name == "size":
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode()]))
        elif name in integers:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))
        else:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(value)]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.mark.e2e
def test_a_csv_with_text_columns_missing_values_and_text_labels(tmp_path):
    """Also: ``N/A`` read as missing with --missing-values (the columns stay numeric), and
    a column empty in every row left out with --exclude-features."""
    rows, labels = _tabular_csv(tmp_path / "data")
    out = tmp_path / "out"
    proc, _ = run_cli(
        "--output-dir", str(out), "--data-root", str(tmp_path / "data"),
        "--label-key", "diagnosis", *SMALL, "--accuracy-threshold", "0.85",
        "--missing-values", "N/A", "--exclude-features", "notes",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # The columns the model reads: the 10 numbers and the size; notes is left out.
    assert "features: 10 numeric, 1 string;" in proc.stdout and "missing values" in proc.stdout
    assert "1 column left out" in proc.stdout
    assert "2 classes (benign, malignant)" in proc.stdout
    assert "blessed: yes" in proc.stdout

    model = _pushed(out)
    # The label vocabulary travels with the model: names out, and names to indices.
    serve = model.signatures["serving_default"]
    integers = _integer_columns(rows)
    result = serve(examples=tf.constant([_example(r, integers) for r in rows]))
    predicted = [c.decode() for c in result["classes"].numpy()[:, 0]]
    assert set(predicted) <= {"benign", "malignant"}
    assert float(np.mean(np.array(predicted) == np.array(labels))) >= 0.85
    indices = model.signatures["transform_labels"](
        examples=tf.constant([_label_example("benign"), _label_example("malignant")])
    )["diagnosis"]
    assert indices.numpy().tolist() == [0, 1]
    # A client may leave features out or send an unseen category: still one answer each.
    sparse = serve(examples=tf.constant([_example({}), _example({"size": "huge"})]))["scores"]
    assert np.isfinite(sparse.numpy()).all() and sparse.shape == (2, 2)


def _label_example(label: str) -> bytes:
    feature = {"diagnosis": tf.train.Feature(bytes_list=tf.train.BytesList(value=[label.encode()]))}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def test_preprocessing_fills_gaps_with_the_mean_and_unseen_text_with_index_zero():
    data = DataDescription(
        (
            InputFeature("x", NUMERIC, mean=2.5, variance=1.0),
            InputFeature("colour", STRING, "string", vocabulary=("red", "blue")),
        ),
        "label",
        2,
        ("no", "yes"),
    )
    pre = Preprocessor(data)
    out = pre({"x": tf.constant([[np.nan], [4.0]]), "colour": tf.constant([["blue"], ["green"]])})
    assert out["x"].numpy().ravel().tolist() == [2.5, 4.0]
    assert out["colour"].numpy().ravel().tolist() == [2, 0]  # 0: missing or unseen
    assert pre.encode_label(tf.constant(["yes", "no"])).numpy().tolist() == [1, 0]
    with pytest.raises(tf.errors.InvalidArgumentError, match="not in the training labels"):
        pre.encode_label(tf.constant(["maybe"]))
