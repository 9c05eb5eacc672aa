"""The one pyarrow reader of a CSV file's rows: ExampleGen's and the data check's.

Both read every column as text, an empty cell (or one of ``missing_values``) as null, a
quoted value over several lines as one cell and blank lines as no row, so the check judges
the rows ExampleGen writes. pyarrow only: the check runs before TensorFlow or TFX is
imported.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyarrow import csv as pa_csv

BLOCK_BYTES = 8 * 2**20  # pyarrow's read block


def read_rows(
    source: Any, names: Sequence[str], missing_values: Sequence[str] = ()
) -> Iterator[pa.RecordBatch]:
    """The rows after the header of ``source`` (a path or a file object) in pyarrow's
    blocks, the columns named ``names``, every cell text or null."""
    reader = pa_csv.open_csv(
        source,
        read_options=pa_csv.ReadOptions(
            column_names=list(names), skip_rows=1, block_size=BLOCK_BYTES, use_threads=True
        ),
        parse_options=pa_csv.ParseOptions(newlines_in_values=True, ignore_empty_lines=True),
        convert_options=pa_csv.ConvertOptions(
            column_types={name: pa.string() for name in names},
            null_values=["", *missing_values],
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
        ),
    )
    yield from reader
