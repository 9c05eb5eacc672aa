"""The CSV check's fast path for the tables that are large: every cell a plain number.

:func:`~tfx_accum.pipeline.checks.csv_check.validate_csv_dir` reads each cell in Python
(slow on tables of millions of cells) because its rules are
Python's (``float()``, ``int()``, the ``csv`` module's parsing) and its errors name a line.
A table whose every cell is empty or a plain decimal number (``-12``, ``3.5``, ``.5``,
``1e-3``) and whose every line is one row leaves none of those rules anything to decide:
this reads it with pyarrow, column by column, and returns the same summary.

Anything else (a text cell, ``nan``, ``+5``, a space, a blank line, a value over two
lines, a cell pyarrow cannot parse, a missing label) returns None, and the check reads the
table cell by cell, so it reports what it always did. A cell that is one of the
``missing_values`` (``--missing-values``) is an empty cell here too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tfx_accum.components.data.csv_reader import BLOCK_BYTES, read_rows
from tfx_accum.components.data.feature_kinds import NUMERIC
from tfx_accum.pipeline.checks.data import CSV, DataSummary

# What Python's float() and this check read alike, and int() for the integers.
NUMBER = r"^-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$"
INTEGER = r"^-?[0-9]+$"


@dataclasses.dataclass
class _Column:
    integers: bool = True
    missing: int = 0


def _line_count(path: Path) -> int:
    """Lines in ``path`` (a last line without a line break counts)."""
    count, last = 0, b"\n"
    with path.open("rb") as handle:
        while block := handle.read(BLOCK_BYTES):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def _equal(values: pa.Array, label: pa.Array) -> bool:
    """Whether every cell of ``values`` is the label's text (an empty cell is not)."""
    return bool(pc.all(pc.fill_null(pc.equal(values, label), False)).as_py())


def _first_and_counts(label: pa.Array) -> list[tuple[str, int, int]]:
    """Each distinct value of ``label``: where it is first, and how often it occurs."""
    encoded = label.dictionary_encode()  # the dictionary in order of first occurrence
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    seen = np.maximum.accumulate(indices)  # rises exactly where a new value first occurs
    first = np.flatnonzero(np.diff(seen, prepend=-1) > 0)
    counts = np.bincount(indices, minlength=len(encoded.dictionary))
    values = encoded.dictionary.to_pylist()
    return list(zip(values, first.tolist(), counts.tolist()))


def numeric_summary(
    files: list[Path], columns: list[str], label_key: str, missing_values: Collection[str] = ()
) -> DataSummary | None:
    """The check's summary of ``files`` (one header, ``columns``), or None where a cell or
    a line needs the cell-by-cell check (``missing_values``: cells read as empty)."""
    try:
        return _summary(files, columns, label_key, missing_values)
    except (pa.ArrowException, UnicodeDecodeError, ValueError):
        return None


def _summary(
    files: list[Path], columns: list[str], label_key: str, missing_values: Collection[str]
) -> DataSummary | None:
    label_index = columns.index(label_key)
    tracked = [_Column() for _ in columns]
    copies = set(range(len(columns))) - {label_index}
    first_seen: dict[str, tuple[str, int]] = {}
    counts: dict[str, int] = {}
    rows = 0
    for path in files:
        in_file = 0
        for batch in read_rows(str(path), columns, missing_values):
            for column, values in zip(tracked, batch.columns):
                present = values.drop_null()
                column.missing += values.null_count
                if pc.all(pc.match_substring_regex(present, NUMBER)).as_py() is False:
                    return None
                if column.integers and len(present):
                    integers = pc.match_substring_regex(present, INTEGER)
                    column.integers = bool(pc.all(integers).as_py())
                numbers = pc.cast(present, pa.float64())
                if pc.all(pc.is_finite(numbers)).as_py() is False:
                    return None
            label = batch.column(label_index)
            if label.null_count:
                return None
            copies = {i for i in copies if _equal(batch.column(i), label)}
            for value, index, count in _first_and_counts(label):
                if value not in first_seen:
                    first_seen[value] = (str(path), in_file + index + 2)  # line 1: the header
                counts[value] = counts.get(value, 0) + count
            in_file += batch.num_rows
        if _line_count(path) != in_file + 1:  # a blank line, or a value over two lines
            return None
        rows += in_file
    features = [(name, c) for name, c in zip(columns, tracked) if name != label_key]
    if rows == 0 or len(columns) < 2:
        return None
    where = {str(path): n for n, path in enumerate(files)}
    order = sorted(first_seen, key=lambda v: (where[first_seen[v][0]], first_seen[v][1]))
    return DataSummary(
        format=CSV,
        files=tuple(str(f) for f in files),
        columns=tuple(columns),
        kinds=tuple((name, NUMERIC) for name, _ in features),
        rows=rows,
        missing=tuple((name, c.missing) for name, c in features if c.missing),
        vocabularies=(),
        label_dtype="int" if tracked[label_index].integers else "float",
        label_copies=tuple(columns[i] for i in sorted(copies)),
        label_values=tuple(
            (value, counts[value], f"{first_seen[value][0]}, line {first_seen[value][1]}")
            for value in order
        ),
    )
