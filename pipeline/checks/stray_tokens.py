"""A CSV column of numbers with a few other values in it: which it is, and the way out.

CsvExampleGen types a column as numbers only when every cell is one: a single ``N/A``, ``-``
or repeated header among a column's numbers makes the whole column text, a vocabulary of
number strings, and the model trains on that without a word. The rule that tells such a
column from a text column, for the check to refuse it before anything runs (a feature or the label):

A column holding both numbers and other values is **numbers with stray tokens** when at
least half of its non-empty cells are numbers, or when every other value is a common
missing-value marker (:data:`MISSING_MARKERS`: ``NA``, ``N/A``, ``-``, ``?``, ...), in any
share. Otherwise (most cells text: ``red``, ``blue``, ``12``) it is a text column.

The ways out: ``--missing-values TOKENS`` reads those cells as empty (missing values) in
CsvExampleGen and in the check alike; ``--categorical NAME`` says the column's values are
categories (a grade ``K``, ``1`` .. ``12``), read as text. A label of numbers with stray
tokens has no such way out: those rows need a label.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Collection

MISSING_MARKERS = frozenset({"NA", "N/A", "n/a", "na", "#N/A", "NULL", "null", "-", "--", "?", "."})


@dataclasses.dataclass(frozen=True)
class StrayToken:
    """A column of numbers with other values: its first such value and where it is."""

    column: str
    token: str
    where: str  # "FILE, line N"
    numbers: int  # the column's cells that are numbers
    values: int  # the column's non-empty cells


def is_numbers_with_stray_tokens(numbers: int, texts: int, tokens: Collection[str]) -> bool:
    """The rule above: ``numbers`` and ``texts`` non-empty cells, ``tokens`` the distinct
    text values (at least the first ``len(MISSING_MARKERS) + 1`` of them)."""
    if numbers == 0 or texts == 0:
        return False
    markers_only = len(tokens) <= len(MISSING_MARKERS) and set(tokens) <= MISSING_MARKERS
    return numbers >= texts or markers_only


def refusal(stray: StrayToken, label_key: str) -> str:
    """The one line that refuses ``stray``, with the ways out."""
    option = f"--missing-values={shlex.quote(stray.token)}"
    if stray.column == label_key:
        way = "fix or drop those rows: every row needs a label"
    else:
        way = (
            f"pass {option} to read such cells as missing values, or --categorical "
            f"{shlex.quote(stray.column)} if the column's values are categories, not quantities"
        )
    return (
        f"{stray.where}, column {stray.column!r}: {stray.token!r} in a column of numbers "
        f"({stray.numbers:,} of its {stray.values:,} values are numbers), which CsvExampleGen "
        f"would read as text; {way}."
    )
