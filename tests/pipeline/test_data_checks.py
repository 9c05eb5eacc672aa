"""The data check on users' tables: tasks, columns, schemas, and never a silently
wrong model. Each bad case is a one-line error with exit code 2 and nothing written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tfx_accum.components.config.settings import ModelSettings
from tfx_accum.components.data.columns import input_names
from tfx_accum.pipeline.checks.data import DataError, validate_data_root
from tfx_accum.pipeline.cli.parser import main


def _csv(directory: Path, header: list[str], rows: list[list]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    lines = [",".join(header)] + [",".join(str(v) for v in row) for row in rows]
    (directory / "d.csv").write_text("\n".join(lines) + "\n")
    return directory


def _labels(directory: Path, labels: list, extra: int = 2) -> Path:
    rng = np.random.default_rng(0)
    rows = [[*np.round(rng.normal(size=extra), 3), label] for label in labels]
    return _csv(directory, [f"x{i}" for i in range(extra)] + ["label"], rows)


def _check(directory: Path, **settings):
    return validate_data_root(str(directory), ModelSettings(**settings))


def test_whole_number_labels_with_few_values_are_classes(tmp_path):
    summary = _check(_labels(tmp_path, [i % 3 for i in range(60)]))
    assert (summary.task, summary.num_classes) == ("multiclass", 3)
    assert summary.task_reason == "whole-number label with 3 classes 0..2"


def test_integer_valued_float_labels_are_classes_not_a_type_error(tmp_path):
    summary = _check(_labels(tmp_path, [f"{i % 2}.0" for i in range(60)]))
    assert summary.label_dtype == "float"  # what CsvExampleGen types the column as
    assert (summary.task, summary.num_classes) == ("binary", 2)


def test_many_whole_numbers_are_a_regression_target(tmp_path):
    # As load_diabetes: whole numbers 25..346, not 347 classes.
    values = list(np.random.default_rng(1).integers(25, 347, size=120))
    summary = _check(_labels(tmp_path, values))
    assert summary.task == "regression" and summary.num_classes is None
    assert "distinct whole numbers from" in summary.task_reason


def test_fractional_labels_are_a_regression_target(tmp_path):
    summary = _check(_labels(tmp_path, [round(0.1 * i, 2) for i in range(60)]))
    assert summary.task == "regression"
    assert summary.task_reason.startswith("fractional numbers")


def test_text_labels_are_classes(tmp_path):
    summary = _check(_labels(tmp_path, ["cat", "dog"] * 30))
    assert (summary.task, summary.label_vocabulary) == ("binary", ("cat", "dog"))


@pytest.mark.parametrize(
    "labels,settings,message",
    [
        ([0] * 60, {}, "single class"),
        ([i % 2 for i in range(3)], {}, "3 rows: too few"),
        ([0] * 50 + [1] * 5, {}, "1 class(es) have fewer than 6 examples ('1': 5)"),
        ([0, 1000] * 30, {}, "2 distinct values up to 1000"),
        (list(range(25, 85)), {"task": "classification"}, "looks like a regression target"),
        (["a", "b"] * 30, {"task": "regression"}, "A text label cannot be a regression target"),
        ([0.5, 1.5] * 30, {"task": "classification", "num_classes": 2}, "fractional values"),
        ([0, 1, 2] * 20, {"task": "binary"}, "--task binary, but the label has 3 classes"),
    ],
)
def test_labels_that_cannot_train_a_sound_model_are_refused(tmp_path, labels, settings, message):
    with pytest.raises(DataError, match=re.escape(message)):
        _check(_labels(tmp_path, labels), **settings)


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"features": ("x0", "nope")}, "--features names 'nope', not a feature of the data"),
        ({"exclude_features": ("label",)}, "names the label 'label'"),
        ({"features": ("x0",), "exclude_features": ("x0",)}, "No feature is left"),
        ({"categorical_features": ("nope",)}, "'nope' is not a feature"),
    ],
)
def test_column_settings_that_do_not_fit_the_data_are_refused(tmp_path, settings, message):
    rows = [[i, i % 7, "ab"[i % 2], i % 2] for i in range(40)]
    directory = _csv(tmp_path, ["x0", "x1", "t", "label"], rows)
    with pytest.raises(DataError, match=re.escape(message)):
        _check(directory, **settings)


def test_the_data_lines_feature_counts_are_the_columns_the_model_reads(tmp_path):
    """An excluded column (here empty in every row) is neither counted as a feature nor
    are its empty cells missing values; ``--categorical`` integers count as categories."""
    rng = np.random.default_rng(0)
    rows = [[*np.round(rng.normal(size=2), 3), "", i % 7, i % 3] for i in range(60)]
    rows[5][1] = ""  # one missing value in a column the model reads
    root = _csv(tmp_path, ["x0", "x1", "empty", "zip", "label"], rows)
    settings = ModelSettings(exclude_features=("empty",), categorical_features=("zip",))
    summary = validate_data_root(str(root), settings)
    assert dict(summary.kinds)["empty"] == "numeric"  # the data's column, as read
    assert (
        summary.kind_counts(settings)
        == "2 numeric, 1 categorical; 1 missing values; 1 column left out"
    )
    only = ModelSettings(features=("x0",))
    assert summary.kind_counts(only) == "1 numeric; 3 columns left out"


def test_the_data_line_is_made_without_keras(tmp_path):
    """The data check and its line run before the run's console takes over the process's
    output (TensorFlow writes to it at import), so they import neither Keras nor TensorFlow:
    checked in a fresh process, as the command runs them."""
    rows = [[i, i % 7, i % 2] for i in range(40)]
    root = _csv(tmp_path, ["x0", "zip", "label"], rows)
    code = (
        "import sys\n"
        "from tfx_accum.components.config.settings import ModelSettings\n"
        "from tfx_accum.pipeline.checks.data import validate_data_root\n"
        "settings = ModelSettings(categorical_features=('zip',))\n"
        f"summary = validate_data_root({str(root)!r}, settings)\n"
        "print(summary.kind_counts(settings))\n"
        "print(sorted(m for m in ('keras', 'tensorflow') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["1 numeric, 1 categorical", "[]"], proc.stdout


def test_scikit_learn_column_names_get_safe_model_input_names():
    names = ["sepal length (cm)", "od280/od315_of_diluted_wines", "a b", "../x", "pixel_00"]
    safe = input_names(names)
    assert safe["pixel_00"] == "pixel_00"  # valid names are kept
    assert safe["sepal length (cm)"] == "sepal_length_cm"
    assert len(set(safe.values())) == len(names)
    assert all(re.fullmatch(r"[A-Za-z0-9.][A-Za-z0-9_.\-]*", n) for n in safe.values())


def _schema(path: Path, features: dict[str, str], categorical: tuple[str, ...] = ()) -> str:
    parts = []
    for name, kind in features.items():
        domain = "  int_domain { is_categorical: true }\n" if name in categorical else ""
        parts.append(f'feature {{\n  name: "{name}"\n  type: {kind}\n{domain}}}\n')
    path.write_text("".join(parts))
    return str(path)


def test_a_schema_drops_columns_and_declares_categories(tmp_path):
    rows = [[i, i % 5, i * 0.5, i % 2] for i in range(40)]
    directory = _csv(tmp_path / "d", ["id", "zip", "x", "label"], rows)
    schema = _schema(tmp_path / "s.pbtxt", {"zip": "INT", "x": "FLOAT", "label": "INT"}, ("zip",))
    summary = validate_data_root(str(directory), ModelSettings(), None, schema)
    assert dict(summary.kinds) == {"zip": "categorical", "x": "numeric"}  # no "id"


@pytest.mark.parametrize(
    "features,message",
    [
        ({"x": "FLOAT"}, "no feature for the label 'label'"),
        ({"x": "FLOAT", "y": "INT", "label": "INT"}, "names 'y', which the data does not have"),
        ({"x": "BYTES", "label": "INT"}, "types 'x' as BYTES, but the data holds numeric"),
        # A BYTES label over integers: refused here, not in the Trainer after the data's pass.
        (
            {"x": "FLOAT", "label": "BYTES"},
            "types the label 'label' as BYTES, but the data holds integers",
        ),
    ],
)
def test_a_schema_that_disagrees_with_the_data_is_refused(tmp_path, features, message):
    directory = _csv(tmp_path / "d", ["x", "label"], [[i, i % 2] for i in range(40)])
    schema = _schema(tmp_path / "s.pbtxt", features)
    with pytest.raises(DataError, match=re.escape(message)):
        validate_data_root(str(directory), ModelSettings(), None, schema)


def test_a_file_that_is_not_a_schema_is_refused(tmp_path):
    directory = _csv(tmp_path / "d", ["x", "label"], [[i, i % 2] for i in range(40)])
    (tmp_path / "s.pbtxt").write_text("this is not a schema")
    with pytest.raises(DataError, match="is not a Schema in text format"):
        validate_data_root(str(directory), ModelSettings(), None, str(tmp_path / "s.pbtxt"))


@pytest.mark.parametrize(
    "text,extra,message",
    [
        ("a,a,label\n" + "".join(f"{i},{i},{i % 2}\n" for i in range(40)), [], "both named 'a'"),
        ("x,label\n" + "".join(f"{i},0\n" for i in range(40)), [], "single class"),
        ("x,label\n1,0\n2,1\n3,0\n", [], "3 rows: too few"),
        ("x,label\n" + "".join(f"{i},{i % 2}\n" for i in range(40)), ["--features", "y"], "'y'"),
    ],
)
def test_bad_tables_stop_the_command_with_one_line_and_nothing_written(
    tmp_path, capsys, text, extra, message
):
    data = tmp_path / "data"
    data.mkdir()
    (data / "d.csv").write_text(text)
    out = tmp_path / "out"
    code = main(["run", "--data-root", str(data), "--output-dir", str(out), *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()  # nothing written, not even the lock file
