"""The embedded default data set and the checks that run before any component.

With no data given, the pipeline trains on the 8x8 handwritten digits that ship with
scikit-learn (1,797 real images, no network), written as one CSV: ``pixel_00`` ...
``pixel_63`` (integers 0-16) and ``label`` (0-9).
"""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path

from tfx_accum.pipeline.errors import InputError
from tfx_accum.pipeline.files import atomic_write_text

DIGITS_FILE = "digits.csv"
DIGITS_FEATURES = 64  # 8x8 pixels
DIGITS_COLUMNS = tuple(f"pixel_{i:02d}" for i in range(DIGITS_FEATURES))
DIGITS_CLASSES = 10


class DataError(InputError):
    """The input data cannot be used; the message says what is wrong and how to fix it."""


def digits_csv_text() -> str:
    from sklearn.datasets import load_digits

    digits = load_digits()
    header = [*DIGITS_COLUMNS, "label"]
    lines = [",".join(header)]
    for row, label in zip(digits.data.astype(int), digits.target):
        lines.append(",".join(str(v) for v in row) + f",{int(label)}")
    return "\n".join(lines) + "\n"


def write_embedded_digits(directory: str | Path) -> Path:
    """Writes the digits CSV into ``directory`` unless an identical file is already there.

    Rewriting an identical file would change its timestamp and defeat the TFX cache, so it
    is left alone; the write itself is atomic (temporary file, then rename).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / DIGITS_FILE
    text = digits_csv_text()
    if target.exists() and target.read_text() == text:
        return directory
    atomic_write_text(target, text)
    return directory


@dataclasses.dataclass(frozen=True)
class CsvSummary:
    files: tuple[str, ...]
    columns: tuple[str, ...]
    rows: int
    num_classes: int
    labels: tuple[int, ...] = ()  # the distinct class indices seen

    def label_warning(self) -> str | None:
        """A line to show when class indices do not start at 0 or leave gaps."""
        unused = self.num_classes - len(self.labels)
        if unused <= 0:
            return None
        return (
            f"labels {_ranges(self.labels)}: {unused} of the {self.num_classes} classes "
            "0..{0} have no example (class indices should be 0..N-1)".format(self.num_classes - 1)
        )


def _ranges(values: tuple[int, ...]) -> str:
    shown = ", ".join(str(v) for v in values[:6])
    return shown + (", ..." if len(values) > 6 else "")


def _check_header(path: Path, header: list[str], label_key: str) -> None:
    """What CsvExampleGen would read differently from what the user meant."""
    if header and header[0].startswith("\ufeff"):
        raise DataError(
            f"{path} starts with a UTF-8 byte-order mark (BOM), which would become part of "
            f"the first column's name ({header[0][1:]!r}); save it as UTF-8 without BOM."
        )
    for index, name in enumerate(header, start=1):
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


def _is_remote(path: str) -> bool:
    return "://" in path


def validate_csv_dir(data_root: str, label_key: str) -> CsvSummary:
    """Checks a CSV directory the way CsvExampleGen and the model will need it.

    Raises DataError naming the file, line and column of the first problem.
    """
    root = Path(data_root)
    if not root.exists():
        raise DataError(
            f"Data root {data_root!r} does not exist. Pass --data-root DIR with "
            "CSV files, or leave it out to use the embedded digits."
        )
    if not root.is_dir():
        raise DataError(
            f"Data root {data_root!r} is a file; pass the directory that holds the CSV files."
        )
    files = sorted(p for p in root.iterdir() if p.suffix == ".csv" and p.is_file())
    if not files:
        raise DataError(
            f"Data root {data_root!r} holds no .csv file. Put one or more CSV "
            f"files with a header row and a {label_key!r} column there."
        )
    columns: list[str] | None = None
    rows, max_label = 0, -1
    labels: set[int] = set()
    for path in files:
        with path.open(newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if not header:
                raise DataError(f"{path} is empty: a header row is required.")
            _check_header(path, header, label_key)
            if label_key not in header:
                raise DataError(
                    f"{path} has no label column {label_key!r} (columns: "
                    f"{', '.join(header[:8])}{'...' if len(header) > 8 else ''}). Add it, or "
                    "name the label column with --label-key."
                )
            if columns is None:
                columns = header
            elif header != columns:
                raise DataError(
                    f"{path} has different columns from {files[0]}; all CSV files "
                    "must share one header."
                )
            label_index = header.index(label_key)
            for line_no, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) != len(header):
                    raise DataError(
                        f"{path}, line {line_no}: {len(row)} values for {len(header)} columns."
                    )
                for name, value in zip(header, row):
                    if value != value.strip():
                        raise DataError(
                            f"{path}, line {line_no}, column {name!r}: {value!r} has spaces "
                            "around it, which CsvExampleGen reads as text, not a number; "
                            "remove them."
                        )
                    try:
                        number = float(value)
                    except ValueError:
                        raise DataError(
                            f"{path}, line {line_no}, column {name!r}: {value!r} is not a "
                            "number. Every feature and the label must be numeric."
                        ) from None
                    if not math.isfinite(number):
                        raise DataError(
                            f"{path}, line {line_no}, column {name!r}: {value!r} "
                            "is not a finite number."
                        )
                label = float(row[label_index])
                if label < 0 or label != int(label):
                    raise DataError(
                        f"{path}, line {line_no}: label {row[label_index]!r} must be "
                        "a class index (integer >= 0)."
                    )
                max_label = max(max_label, int(label))
                labels.add(int(label))
                rows += 1
    if rows == 0:
        raise DataError(f"The CSV files in {data_root!r} have a header but no data rows.")
    if max_label < 1:
        raise DataError("The label column has a single class; classification needs at least 2.")
    if len(columns) < 2:
        raise DataError("The CSV has no feature column besides the label.")
    if max_label + 1 > 2 * len(labels) and max_label + 1 > len(labels) + 10:
        raise DataError(
            f"The label column has {len(labels)} distinct values up to {max_label} "
            f"({_ranges(tuple(sorted(labels)))}): as class indices that is a "
            f"{max_label + 1}-class output with {max_label + 1 - len(labels)} empty classes. "
            "Map the labels to 0..N-1 first."
        )
    return CsvSummary(
        tuple(str(f) for f in files),
        tuple(columns),
        rows,
        max_label + 1,
        tuple(sorted(labels)),
    )
