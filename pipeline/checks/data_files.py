"""The files ExampleGen reads from a data root, and how it decompresses them: one place for
the pipeline and the input checks, so that the checks read exactly what ExampleGen will.

- **CSV** (CsvExampleGen): ``<root>/*.csv``, matched by ``tf.io.gfile.glob``: names that
  start with a dot too, and directories (which ExampleGen then fails to read). Each file is
  read as UTF-8 lines.
- **TFRecord** (ImportExampleGen): ``<root>/*.tfrecord*``, matched by Beam's
  ``ReadFromTFRecord``: the files (not directories) in the root whose names match, so
  ``data.tfrecord.bak`` is read as well; each is decompressed by its suffix (Beam's
  ``CompressionTypes.AUTO``: ``.gz`` GZIP, ``.bz2``, ``.deflate``, ``.zst``/``.zstd``,
  ``.xz``/``.lzma``, case-insensitive), else read uncompressed.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

PATTERNS = {"csv": "*.csv", "tfrecord": "*.tfrecord*"}
# Beam's CompressionTypes.detect_compression_type, by lower-cased suffix.
COMPRESSION_SUFFIXES = {
    ".bz2": "BZIP2",
    ".deflate": "DEFLATE",
    ".gz": "GZIP",
    ".zst": "ZSTD",
    ".zstd": "ZSTD",
    ".xz": "LZMA",
    ".lzma": "LZMA",
}


def example_gen_files(data_root: str | os.PathLike, data_format: str) -> list[Path]:
    """What ExampleGen reads for ``data_format``, sorted (CSV: directories included)."""
    root = Path(data_root)
    pattern = PATTERNS[data_format]
    found = []
    for name in sorted(os.listdir(root)):
        if not fnmatch.fnmatchcase(name, pattern):
            continue
        path = root / name
        if data_format == "tfrecord" and path.is_dir():
            continue  # Beam lists files only
        found.append(path)
    return found


def compression(path: str | os.PathLike) -> str:
    """The compression ExampleGen reads ``path`` with: ``""`` (none), ``GZIP``, ``BZIP2``..."""
    name = str(path).lower()
    for suffix, kind in COMPRESSION_SUFFIXES.items():
        if name.endswith(suffix):
            return kind
    return ""
