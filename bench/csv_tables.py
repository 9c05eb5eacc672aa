"""The generated CSV tables the large-data benchmarks read (one writer for all of them).

``rows`` x ``columns`` numeric features in [-1, 1] (4 decimals) and a 10-class ``label``
from a fixed linear rule (so there is something to learn), written in chunks so that
memory does not grow with the rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def column_names(columns: int) -> list[str]:
    """The table's feature columns (``f00``, ``f01``, ...), then ``label``."""
    width = max(2, len(str(columns - 1)))
    return [f"f{i:0{width}d}" for i in range(columns)] + ["label"]


def write_csv(path: Path, rows: int, columns: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=(columns, 10))
    header = ",".join(column_names(columns))
    chunk = max(1, 4_000_000 // columns)
    with open(path, "w") as handle:
        handle.write(header + "\n")
        for start in range(0, rows, chunk):
            x = rng.uniform(-1, 1, size=(min(chunk, rows - start), columns)).round(4)
            labels = (x @ weights).argmax(axis=1)
            block = np.concatenate([x, labels[:, None]], axis=1)
            np.savetxt(handle, block, fmt=["%.4f"] * columns + ["%d"], delimiter=",")
