"""Checks a directory of CSV files the way CsvExampleGen and the model will read it.

CsvExampleGen (tfx_bsl's CSV decoder) types each column as INT when every value is an
integer, FLOAT when every value is a number, and BYTES otherwise; an empty cell is a missing
value. This check reads the files with the same rules, so what it accepts the pipeline
reads with the same columns and types, and it names the file, line and column of the first
problem (exit code 2 before anything runs). It reads exactly the files CsvExampleGen will
(``tfx_accum.pipeline.checks.data_files``), as UTF-8 text as CsvExampleGen does, and what the
CSV parser both share cannot read (a NUL byte, a field over its limit of 131,072
characters, bytes that are not UTF-8) is a one-line error too, never a traceback.
"""

from __future__ import annotations

import contextlib
import csv
import math
from collections.abc import Collection, Iterator
from pathlib import Path

from tfx_accum.components.data.feature_kinds import MAX_VOCABULARY, NUMERIC, STRING
from tfx_accum.pipeline.checks.csv_numeric import numeric_summary
from tfx_accum.pipeline.checks.data import CSV, DataError, DataSummary
from tfx_accum.pipeline.checks.data_files import example_gen_files
from tfx_accum.pipeline.checks.stray_tokens import (
    MISSING_MARKERS,
    StrayToken,
    is_numbers_with_stray_tokens,
)

FIELD_LIMIT = csv.field_size_limit()  # 131,072: tfx_bsl parses with Python's csv module too


def _check_header(path: Path, header: list[str]) -> None:
    """What CsvExampleGen would read differently from what the user meant."""
    if header and header[0].startswith("\ufeff"):
        raise DataError(
            f"{path} starts with a UTF-8 byte-order mark (BOM), which would become part of "
            f"the first column's name ({header[0][1:]!r}); save it as UTF-8 without BOM."
        )
    if all(_number(name) is not None for name in header):
        raise DataError(
            f"{path}, line 1 looks like data ({', '.join(header[:4])}...), not a header: "
            "every CSV file needs the same header row."
        )
    seen: dict[str, int] = {}
    for index, name in enumerate(header, start=1):
        if name in seen:
            raise DataError(
                f"{path}: columns {seen[name]} and {index} are both named {name!r}; "
                "CsvExampleGen would keep only one of them. Rename or drop one."
            )
        seen[name] = index
        if not name.strip():
            raise DataError(
                f"{path}, column {index} has no name (a pandas index written by to_csv?); "
                "it would become a feature and can leak the label. Write the CSV with "
                "index=False, or name or drop that column."
            )
        if name != name.strip():
            raise DataError(
                f"{path}, column {index}: the name {name!r} has spaces around it (spaces "
                "after the commas?). CsvExampleGen keeps them; remove them."
            )


def _shown(names: list[str], limit: int = 4) -> str:
    return ",".join(names[:limit]) + (",..." if len(names) > limit else "")


def _check_same_columns(path: Path, header: list[str], first: Path, columns: list[str]) -> None:
    if header == columns:
        return
    lacking = [c for c in columns if c not in header]
    extra = [c for c in header if c not in columns]
    if lacking:
        why = f"lacks column(s) {', '.join(map(repr, lacking[:5]))} that {first} has"
    elif extra:
        why = f"has column(s) {', '.join(map(repr, extra[:5]))} that {first} lacks"
    else:
        why = f"has the columns of {first} in another order"
    raise DataError(f"{path} {why}: all CSV files must share one header.")


def _is_int(value: str) -> bool:
    try:
        int(value)
    except ValueError:
        return False
    return True


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


class _Column:
    """What one column's values are, as CsvExampleGen will type them."""

    def __init__(self, name: str, missing_values: frozenset[str] = frozenset()):
        self.name = name
        self.missing_values = missing_values  # cells read as empty (--missing-values)
        self.numeric = True  # until a value is not a number
        self.integers = True  # until a value is not an integer (CsvExampleGen: INT)
        self.missing = 0
        self.numbers = 0  # cells that are numbers
        self.texts = 0  # cells that are not
        self.tokens: dict[str, str] = {}  # the first text values: where each is first
        self.texts_seen: set[str] = set()  # up to MAX_VOCABULARY text values (no float())
        self.values: set[str] = set()  # up to MAX_VOCABULARY + 1 distinct values

    def add(self, value: str, path: Path, line: int) -> None:
        if value == "" or value in self.missing_values:
            self.missing += 1
            return
        if len(self.values) <= MAX_VOCABULARY:
            self.values.add(value)
        if value in self.texts_seen:
            self.texts += 1
            return
        number = _number(value)
        if number is None:
            self.texts += 1
            self.numeric = self.integers = False
            if len(self.texts_seen) < MAX_VOCABULARY:
                self.texts_seen.add(value)
            if len(self.tokens) <= len(MISSING_MARKERS) and value not in self.tokens:
                self.tokens[value] = f"{path}, line {line}"
            return
        self.numbers += 1
        if not self.numeric:
            return
        if self.integers and not _is_int(value):
            self.integers = False
        if value != value.strip():
            raise DataError(
                f"{path}, line {line}, column {self.name!r}: {value!r} has spaces around it, "
                "which CsvExampleGen reads as text, not a number; remove them."
            )
        if not math.isfinite(number):
            raise DataError(
                f"{path}, line {line}, column {self.name!r}: {value!r} is not a finite number."
            )

    def stray_token(self) -> StrayToken | None:
        """The column's first text value if the column is numbers with stray tokens
        (``tfx_accum.pipeline.checks.stray_tokens``), else None (numbers only, or text)."""
        if not is_numbers_with_stray_tokens(self.numbers, self.texts, self.tokens):
            return None
        token, where = next(iter(self.tokens.items()))
        return StrayToken(self.name, token, where, self.numbers, self.numbers + self.texts)


@contextlib.contextmanager
def _rows(path: Path) -> Iterator[Iterator[list[str]]]:
    """The rows of ``path`` as CsvExampleGen reads them; what it cannot read is a DataError."""
    try:
        handle = path.open(encoding="utf-8", newline="")
    except OSError as error:
        raise DataError(f"{path} cannot be read ({error.strerror}).") from None
    with handle:
        reader = csv.reader(handle)

        def rows() -> Iterator[list[str]]:
            while True:
                try:
                    row = next(reader)
                except StopIteration:
                    return
                except UnicodeDecodeError as error:
                    raise DataError(_not_utf8(path, error)) from None
                except csv.Error as error:
                    raise DataError(_unreadable(path, max(reader.line_num, 1), error)) from None
                except OSError as error:
                    raise DataError(f"{path} cannot be read ({error.strerror}).") from None
                yield row

        yield rows()


def _not_utf8(path: Path, error: UnicodeDecodeError) -> str:
    line, sample = 0, error.object[error.start : error.start + 4]
    with path.open("rb") as raw:
        for line, data in enumerate(raw, start=1):  # noqa: B007 - the line is the result
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as bad:
                sample = data[bad.start : bad.start + 4]
                break
    return (
        f"{path}, line {line}: bytes that are not UTF-8 ({sample!r}); CsvExampleGen reads "
        "CSV files as UTF-8. Save the file as UTF-8 (for Latin-1 text: iconv -f latin1 -t "
        "utf-8)."
    )


def _unreadable(path: Path, line: int, error: csv.Error) -> str:
    text = str(error)
    if "NUL" in text:
        return (
            f"{path}, line {line}: a NUL byte, which the CSV parser CsvExampleGen uses cannot "
            "read (a binary file, or text saved as UTF-16?). Save the file as UTF-8 text."
        )
    if "field limit" in text:
        return (
            f"{path}, line {line}: a field longer than {FIELD_LIMIT:,} characters, the limit "
            "of the CSV parser CsvExampleGen uses (an unclosed quote makes the rest of the "
            "file one field). Close the quote, or shorten the value."
        )
    return f"{path}, line {line}: {text}; CsvExampleGen's CSV parser cannot read it."


def _checked_header(files: list[Path], label_key: str) -> list[str]:
    """The files' one header, with the label; DataError naming the file otherwise."""
    columns: list[str] | None = None
    for path in files:
        with _rows(path) as reader:
            header = next(reader, None)
        if not header:
            raise DataError(f"{path} is empty: a header row is required.")
        _check_header(path, header)
        if label_key not in header:
            raise DataError(
                f"{path} has no label column {label_key!r} (columns: "
                f"{', '.join(header[:8])}{'...' if len(header) > 8 else ''}). Add it, or "
                "name the label column with --label-key."
            )
        columns = columns or header
        _check_same_columns(path, header, files[0], columns)
    return columns


def validate_csv_dir(
    data_root: str, label_key: str, missing_values: Collection[str] = ()
) -> DataSummary:
    """Checks a CSV directory; raises DataError naming the file, line and column.

    A table of plain numbers is read by pyarrow (``tfx_accum.pipeline.checks.csv_numeric``,
    the same summary); any other cell by cell, here. ``missing_values``: cells read as
    empty (``--missing-values``), as CsvExampleGen is told to. A line that repeats the
    header (files joined with ``cat``) is an error; the columns of numbers with stray
    tokens are recorded in the summary (``stray_tokens``) for :func:`decide_label`, which
    knows the columns the model reads.
    """
    missing_values = frozenset(missing_values)
    files = example_gen_files(data_root, CSV)
    for path in files:
        if not path.is_file():
            raise DataError(
                f"{path} matches *.csv but is not a file; CsvExampleGen would fail to read "
                "it. Rename it or move it out of the data root."
            )
    if not files:
        raise DataError(
            f"Data root {data_root!r} holds no .csv file. Put one or more CSV "
            f"files with a header row and a {label_key!r} column there."
        )
    columns = _checked_header(files, label_key)
    summary = numeric_summary(files, columns, label_key, missing_values)
    if summary is not None:
        return summary
    tracked: list[_Column] = []
    rows = 0
    labels: dict[str, tuple[str, int]] = {}  # label value -> where it was first seen
    copies: set[int] | None = None  # indices of the columns equal to the label so far
    label_counts: dict[str, int] = {}
    for path in files:
        with _rows(path) as reader:
            header = next(reader)  # checked above
            if not tracked:
                tracked = [_Column(name, missing_values) for name in header]
            label_index = header.index(label_key)
            firsts = {header[0], "\ufeff" + header[0]}  # a part's header may keep its BOM
            for line_no, row in enumerate(reader, start=2):
                if not row:
                    continue
                if row[0] in firsts and row[1:] == header[1:]:
                    raise DataError(
                        f"{path}, line {line_no} repeats the header line ({_shown(header)}): "
                        "files joined with cat keep every part's header. Remove the line, "
                        "or join the parts without their headers (tail -n +2)."
                    )
                if len(row) != len(header):
                    raise DataError(
                        f"{path}, line {line_no}: {len(row)} values for {len(header)} columns."
                    )
                for column, value in zip(tracked, row):
                    column.add(value, path, line_no)
                label = row[label_index]
                if copies is None:
                    copies = {i for i, v in enumerate(row) if v == label and i != label_index}
                elif copies:
                    copies = {i for i in copies if row[i] == label}
                if label == "" or label in missing_values:
                    raise DataError(
                        f"{path}, line {line_no}, column {label_key!r}: the label is missing; "
                        "every row needs one."
                    )
                labels.setdefault(label, (str(path), line_no))
                label_counts[label] = label_counts.get(label, 0) + 1
                rows += 1
    if rows == 0:
        raise DataError(f"The CSV files in {data_root!r} have a header but no data rows.")
    if len(columns) < 2:
        raise DataError("The CSV has no feature column besides the label.")
    features = [c for c in tracked if c.name != label_key]
    label = tracked[label_index]
    label_dtype = ("int" if label.integers else "float") if label.numeric else "string"
    kinds = tuple((c.name, NUMERIC if c.numeric else STRING) for c in features)
    return DataSummary(
        format=CSV,
        files=tuple(str(f) for f in files),
        columns=tuple(columns),
        kinds=kinds,
        rows=rows,
        missing=tuple((c.name, c.missing) for c in features if c.missing),
        vocabularies=tuple(
            (c.name, tuple(sorted(c.values))[:MAX_VOCABULARY]) for c in features if not c.numeric
        ),
        label_dtype=label_dtype,
        label_copies=tuple(columns[i] for i in sorted(copies or ())),
        stray_tokens=tuple(s for s in (c.stray_token() for c in tracked) if s is not None),
        label_values=tuple(
            (value, label_counts[value], f"{path}, line {line}")
            for value, (path, line) in labels.items()
        ),
    )
