"""The CSV check (tfx_accum.pipeline.checks.csv_check) and the embedded digits
(tfx_accum.pipeline.checks.data)."""

from __future__ import annotations

import hashlib
import re

import pytest

from tfx_accum.components.config.settings import ModelSettings
from tfx_accum.pipeline.checks.csv_check import validate_csv_dir
from tfx_accum.pipeline.checks.data import (
    DIGITS_CLASS_COUNTS,
    DIGITS_CSV_SHA256,
    DataError,
    digits_csv_text,
    validate_data_root,
    write_embedded_digits,
)


def test_embedded_digits_are_real_and_written_once(tmp_path):
    directory = write_embedded_digits(tmp_path)
    target = directory / "digits.csv"
    mtime = target.stat().st_mtime_ns
    summary = validate_data_root(str(directory), ModelSettings())
    assert summary.rows == 1797 and summary.num_classes == 10 and len(summary.columns) == 65
    assert summary.task == "multiclass"
    assert tuple(c for _, c, _ in sorted(summary.label_values)) == DIGITS_CLASS_COUNTS
    write_embedded_digits(tmp_path)
    assert target.stat().st_mtime_ns == mtime  # unchanged file keeps the TFX cache valid
    assert target.read_text() == digits_csv_text()
    assert hashlib.sha256(digits_csv_text().encode()).hexdigest() == DIGITS_CSV_SHA256
    target.write_text(digits_csv_text().replace("\n0,", "\n1,", 1))  # a changed file
    write_embedded_digits(tmp_path)
    assert target.read_text() == digits_csv_text()  # is written again


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "is empty"),
        ("a,label\n1,0\n2\n", "line 3: 1 values for 2 columns"),
        ("a,label\n", "no data rows"),
        ("a,label\nnan,1\n1,0\n", "not a finite number"),
        # What CsvExampleGen would read differently from what the user meant:
        ("\ufeffa,label\n1,0\n2,1\n", "byte-order mark"),
        (",a,label\n0,1,0\n1,2,1\n", "column 1 has no name (a pandas index"),
        ("a, label\n1,0\n2,1\n", "spaces around it"),
        ("a,label\n1, 0\n2,1\n", "' 0' has spaces around it"),
        ("a,a,label\n1,2,0\n2,3,1\n", "columns 1 and 2 are both named 'a'"),
    ],
)
def test_csv_validation_messages(tmp_path, text, message):
    (tmp_path / "d.csv").write_text(text)
    with pytest.raises(DataError, match=re.escape(message)):
        validate_csv_dir(str(tmp_path), "label")


def test_labels_that_skip_class_zero_are_warned_about(tmp_path):
    rows = "".join(f"{i},{1 + i % 2}\n" for i in range(40))
    (tmp_path / "d.csv").write_text("a,label\n" + rows)
    summary = validate_data_root(str(tmp_path), ModelSettings())
    assert summary.num_classes == 3 and summary.labels == (1, 2)
    assert "1 of the 3 classes 0..2 have no example" in summary.label_warning()


def test_a_column_that_copies_the_label_is_refused_with_the_way_out(tmp_path):
    """A `Label` column equal to `label` trained to accuracy 1.0, blessed and pushed."""
    rows = "".join(f"{i % 7},{i % 3},{i % 3}\n" for i in range(60))
    (tmp_path / "d.csv").write_text("a,Label,label\n" + rows)
    with pytest.raises(DataError) as raised:
        validate_data_root(str(tmp_path), ModelSettings())
    message = str(raised.value)
    assert message.startswith("Column 'Label' equals the label 'label' in every row")
    assert "--exclude-features Label" in message and "\n" not in message
    # The way out works; and a column equal to the label in all rows but one is a feature.
    excluded = ModelSettings(exclude_features=("Label",))
    assert validate_data_root(str(tmp_path), excluded).num_classes == 3
    (tmp_path / "d.csv").write_text("a,Label,label\n" + rows + "1,2,0\n")
    assert validate_data_root(str(tmp_path), ModelSettings()).label_copies == ()
