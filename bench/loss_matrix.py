"""The loss matrix's figures: how far each way of writing a loss is from plain Keras.

``python -m bench.loss_matrix [--output DIR]`` (``KERAS_BACKEND=jax`` for JAX, ``torch`` for
PyTorch) runs every cell of ``tests/accumulation/test_loss_matrix.py`` (its losses, data,
models and cells: one definition, the test's; on JAX its compiled cells and on PyTorch its
eager ones, as CI runs them) and reports, per loss
and weighting, the largest absolute weight difference from plain Keras ``fit`` on the whole
batches and the largest relative difference of the logged loss, at ``k=3`` and ``k=1``,
without and with XLA; a cell the model warns about is marked ``warned``, one that plain
Keras cannot train either (reduction None on JAX and PyTorch) ``refused``. Writes
``loss_matrix[-jax|-torch].md`` and ``.json`` to the output directory (default
``bench/results``) and prints the Markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _matrix():
    """The test module, imported as the tests import it (tests/ and its folders on the path)."""
    for folder in (ROOT / "tests", ROOT / "tests" / "accumulation"):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    import test_loss_matrix

    return test_loss_matrix


def run(log=print) -> list[dict]:
    import keras
    import numpy as np

    matrix = _matrix()
    from equivalence import max_abs_diff  # tests/equivalence.py, on the path now

    # On JAX, jit_compile=False runs the same step op by op: the compiled cells, as CI runs.
    # On PyTorch, Keras's default is eager; jit_compile=True (torch.compile) compiles for
    # minutes per model on a CPU: the eager cells, as CI runs.
    only = {"jax": True, "torch": False}.get(keras.backend.backend())
    plain = "eager" if keras.backend.backend() == "torch" else "graph"
    rows = []
    for param in matrix._cells():
        style, column, k, jit = param.values
        if only is not None and jit != only:
            continue
        path = "xla" if jit else plain
        expected = matrix.reference(style, column)
        row = dict(style=style, column=column, k=k, path=path)
        if isinstance(expected, Exception):
            try:
                matrix._cell(style, column, k, jit)
                row.update(status="trains where plain fit fails")
            except matrix.FIT_FAILS as error:
                row.update(status="refused", message=str(error).splitlines()[0])
            rows.append(row)
            continue
        weights, losses, inexact = matrix._cell(style, column, k, jit)
        plain_weights, plain_losses = expected
        logged = float(np.max(np.abs(np.asarray(losses) - plain_losses) / np.abs(plain_losses)))
        row.update(
            status="warned" if inexact else "exact",
            weights=max_abs_diff(plain_weights, weights),
            logged=logged,
        )
        rows.append(row)
        log(f"[loss-matrix] {style} x {column}, k={k}, {path}: {row['status']} "
            f"{row['weights']:.1e}")  # fmt: skip
    return rows


def to_markdown(rows: list[dict], backend: str) -> str:
    """One line per loss: the largest differences over its exact cells, per k and path."""
    styles = list(dict.fromkeys(r["style"] for r in rows))
    paths = list(dict.fromkeys(r["path"] for r in rows))
    head = [f"k={k} {p}" for k in (3, 1) for p in paths]
    command = "python -m bench.loss_matrix"
    if not backend.startswith("tensorflow"):
        command = f"KERAS_BACKEND={backend.split(',')[0]} {command}"
    columns = (
        "no weights, sample_weight, temporal sample_weight, a mask with temporal sample_weight, "
        "class_weight"
    )
    cells = {
        "graph": f"without XLA: {columns}",
        "eager": f"eagerly, Keras's default on PyTorch: {columns}",
        "xla": "with XLA: no weights, the mask, class_weight at k=3, and class_weight at k=1",
    }
    lines = [
        "# The loss matrix against plain Keras",
        "",
        f"`{command}`: {backend}. Per loss (the rows of `tests/accumulation/test_loss_matrix.py`),"
        " the largest absolute weight difference from plain Keras `fit` over its cells ("
        + "; ".join(cells[p] for p in paths)
        + "), and in brackets the largest relative difference of the logged loss; `warned`: "
        "an `InexactAccumulationWarning` (the figure is then the inexactness it names), "
        "`refused`: an error naming the loss, where plain `fit` fails too.",
        "",
        "| loss | " + " | ".join(head) + " |",
        "| --- | " + " | ".join("---" for _ in head) + " |",
    ]
    for style in styles:
        cells = []
        for k in (3, 1):
            for path in paths:
                mine = [r for r in rows if (r["style"], r["k"], r["path"]) == (style, k, path)]
                cells.append(_summary(mine))
        lines.append(f"| `{style}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _summary(rows: list[dict]) -> str:
    """The largest differences over the cells measured, and how many cells were not exact."""
    if not rows:
        return "-"
    measured = [r for r in rows if "weights" in r]
    figure = ""
    if measured:
        weights = max(r["weights"] for r in measured)
        logged = max(r["logged"] for r in measured)
        figure = f"{weights:.1e} [{logged:.0e}]"
    others = [r["status"] for r in rows if r["status"] != "exact"]
    if not others:
        return figure
    counts = ", ".join(f"{s} {others.count(s)} of {len(rows)}" for s in sorted(set(others)))
    return f"{figure} ({counts})" if figure else counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.simplefilter("ignore")
    import keras

    backend = keras.backend.backend()
    rows = run()
    versions = f"{backend}, Keras {keras.__version__}"
    if backend == "jax":
        import jax

        versions += f", JAX {jax.__version__}"
    elif backend == "torch":
        import torch

        versions += f", PyTorch {torch.__version__}"
    else:
        import tensorflow as tf

        versions += f", TensorFlow {tf.__version__}"
    markdown = to_markdown(rows, versions)
    suffix = "" if backend == "tensorflow" else f"-{backend}"
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / f"loss_matrix{suffix}.md").write_text(markdown)
    (args.output / f"loss_matrix{suffix}.json").write_text(
        json.dumps({"versions": versions, "cells": rows}, indent=1) + "\n"
    )
    print(markdown)


if __name__ == "__main__":
    main()
