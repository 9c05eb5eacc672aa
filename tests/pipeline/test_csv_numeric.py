"""The CSV check's pyarrow path (tfx_accum.pipeline.checks.csv_numeric) gives the cell-by-cell
check's summary for tables of plain numbers, and steps aside for anything else."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfx_accum.pipeline.checks import csv_check
from tfx_accum.pipeline.checks.csv_numeric import numeric_summary

NUMERIC_TABLES = {
    "ints": "a,b,label\n1,2,0\n3,4,1\n5,6,1\n",
    "floats, missing cells, a float label": "a,b,label\n1.5,,0.25\n.5,-2e3,1\n,7,0.25\n-0,1E-2,3\n",
    "a column copying the label": "a,copy,label\n9,1,1\n8,0,0\n7,2,2\n",
    "quoted numbers, CRLF, no last line break": 'a,label\r\n"1",0\r\n2,"1"\r\n3,0',
    "an empty column (refused later, if the model reads it)": "a,b,label\n,1,0\n,2,1\n,3,0\n",
    "many rows, labels first seen late": "a,label\n"
    + "".join(f"{i},{min(i // 700, 9)}\n" for i in range(7000)),
}
OTHER_TABLES = {
    "a text cell": "a,label\n1,0\nx,1\n",
    "nan": "a,label\nnan,0\n1,1\n",
    "a plus sign": "a,label\n+1,0\n1,1\n",
    "spaces": "a,label\n 1,0\n1,1\n",
    "a blank line": "a,label\n1,0\n\n2,1\n",
    "a value over two lines": 'a,label\n"1\n",0\n2,1\n',
    "a missing label": "a,label\n1,\n2,1\n",
    "a short row": "a,b,label\n1,2,0\n2,1\n",
    "a string label": "a,label\n1,cat\n2,dog\n",
    "an overflow": "a,label\n1e999,0\n2,1\n",
}


def _write(root: Path, texts: list[str]) -> list[Path]:
    paths = []
    for n, text in enumerate(texts):
        path = root / f"part-{n}.csv"
        path.write_bytes(text.encode())
        paths.append(path)
    return paths


def _cell_by_cell(root: Path, monkeypatch) -> object:
    with monkeypatch.context() as patch:
        patch.setattr(csv_check, "numeric_summary", lambda *args: None)
        return csv_check.validate_csv_dir(str(root), "label")


@pytest.mark.parametrize("name", sorted(NUMERIC_TABLES))
def test_a_table_of_numbers_has_the_cell_by_cell_summary(tmp_path, monkeypatch, name):
    text = NUMERIC_TABLES[name]
    header, _, body = text.partition("\n")
    lines = body.splitlines(keepends=True)
    half = len(lines) // 2  # two files: line numbers and first sightings per file
    _write(
        tmp_path,
        [text]
        if "CRLF" in name
        else [header + "\n" + "".join(lines[:half]), header + "\n" + "".join(lines[half:])],
    )
    expected = _cell_by_cell(tmp_path, monkeypatch)
    files = sorted(tmp_path.glob("*.csv"))
    fast = numeric_summary(files, header.strip().split(","), "label")
    assert fast is not None
    assert fast == expected
    assert csv_check.validate_csv_dir(str(tmp_path), "label") == expected


@pytest.mark.parametrize("name", sorted(OTHER_TABLES))
def test_any_other_table_is_left_to_the_cell_by_cell_check(tmp_path, name):
    (path,) = _write(tmp_path, [OTHER_TABLES[name]])
    header = OTHER_TABLES[name].split("\n", 1)[0].split(",")
    assert numeric_summary([path], header, "label") is None


def test_missing_value_tokens_are_empty_cells_in_both_readings(tmp_path, monkeypatch):
    tokens = ("N/A", "-")
    _write(tmp_path, ["a,b,label\n1,N/A,0\n2,-,1\n3,4,0\n-,5,1\n"])
    with monkeypatch.context() as patch:
        patch.setattr(csv_check, "numeric_summary", lambda *args: None)
        expected = csv_check.validate_csv_dir(str(tmp_path), "label", tokens)
    fast = numeric_summary(sorted(tmp_path.glob("*.csv")), ["a", "b", "label"], "label", tokens)
    assert fast == expected
    assert dict(fast.missing) == {"a": 1, "b": 2} and not fast.stray_tokens
