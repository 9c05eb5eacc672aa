"""Paths the TFX and Beam stack can use as given: checked before anything runs.

- **Control characters** (a newline): tfx_bsl and Beam match file names with patterns whose
  ``.`` does not match a newline (a Trainer failed with ``DataLossError``, reading gzip'd
  files as plain, four components into the run).
- **Glob characters** (``*``, ``?``, ``[``, and ``\\``, TensorFlow's escape): ExampleGen
  finds its input files with ``<data root>/*.csv`` (TensorFlow's ``tf.io.gfile.glob``,
  Beam's ``FileSystems.match``), and every component after it its input with
  ``<artifact>/*``, so a directory named ``data[1]`` is read as the pattern ``data1``: the
  check read ``data[1]/`` while the model was trained, blessed and pushed on a sibling
  ``data1/``. There is no escape that every reader honours (TFX's ``input_base`` is also
  used as a plain path, and a Kubeflow run-time parameter is never escaped), so such a path
  is refused, naming the character. The path checked is the resolved one, which the run
  gives ExampleGen (a link by a plain name to ``data[1]`` does not help).
- **Lengths**: a component longer than the file system's ``NAME_MAX`` (255 bytes), or a
  path that, with the longest path a run writes under the output directory
  (:data:`DERIVED_BYTES`), is longer than ``PATH_MAX`` (4,096 bytes), fails with
  ``ENAMETOOLONG`` wherever it is first opened.
"""

from __future__ import annotations

import os
from pathlib import Path

from tfx_accum.pipeline.errors import InputError

GLOB_CHARACTERS = "*?[\\"
# The longest path a run writes below the output directory, with room to spare: a tuned
# run's longest was 83 bytes (pipeline/Trainer/model_run/6/validation/events.out.tfevents.
# <time>.<host>.<pid>.1.v2, whose host name may take up to 64 bytes more).
DERIVED_BYTES = 512
NAME_MAX, PATH_MAX = 255, 4096  # Linux's; the file system's own where it says


def _limit(path: Path, name: str, default: int) -> int:
    """``os.pathconf``'s ``name`` for the nearest existing directory of ``path``."""
    for parent in (path, *path.parents):
        try:
            return os.pathconf(parent, name)
        except (OSError, ValueError):
            continue
    return default


def check_path(option: str, path: str, derived: int = 0) -> None:
    """One-line ``InputError`` for a path the stack cannot use (see the module's list);
    ``derived``: the bytes of the longest path the run writes below it (0: none)."""
    text = str(path)
    bad = next((c for c in text if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if bad is not None:
        raise InputError(
            f"{option} {text!r} holds the control character {bad!r}; TFX and Beam cannot "
            "read files under such a path: rename it."
        )
    absolute = Path(text).resolve()  # as the run passes it on
    glob = next((c for c in str(absolute) if c in GLOB_CHARACTERS), None)
    if glob is not None:
        raise InputError(
            f"{option} {text!r}: its path {str(absolute)!r} holds {glob!r}, which ExampleGen "
            "and the components after it read as a file pattern (data[1] would match "
            "data1); rename the directory, or move it, to a path without *?[\\."
        )
    name_max = _limit(absolute, "PC_NAME_MAX", NAME_MAX)
    for part in absolute.parts:
        if len(os.fsencode(part)) > name_max:
            raise InputError(
                f"{option}: the name {part[:40]!r}... is {len(os.fsencode(part)):,} bytes long, "
                f"over the file system's limit of {name_max} bytes for a file name; "
                "choose a shorter name."
            )
    path_max = _limit(absolute, "PC_PATH_MAX", PATH_MAX)
    length = len(os.fsencode(str(absolute)))
    if length + derived >= path_max:
        written = f" and the {derived} bytes the run adds below it" if derived else ""
        raise InputError(
            f"{option}: the path is {length:,} bytes long{written}, over the system's limit of "
            f"{path_max:,} bytes for a path; choose a shorter one."
        )
