"""The benchmarks run against today's code: every ``bench/*.py`` imports, and every project
name it imports (at the top or inside a function, where a renamed API fails only when the
benchmark runs) exists; ``bench.images`` runs its steps on the embedded digit images."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

# Fresh processes and a benchmark run: the slow tier.
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ("tfx_accum", "bench")

# Run in a fresh process: a benchmark may set the process up at import (bench.gpu_jax
# chooses Keras' JAX backend), which must not leak into the tests.
CHECK = """
import importlib, importlib.util, json, sys
missing = []
for where, module, name in json.loads(sys.argv[1]):
    try:
        imported = importlib.import_module(module)
    except Exception as error:
        missing.append(f"{where}: import {module}: {type(error).__name__}: {error}")
        continue
    if name and not hasattr(imported, name):
        package = hasattr(imported, "__path__")  # a submodule: `from package import module`
        if not package or importlib.util.find_spec(f"{module}.{name}") is None:
            missing.append(f"{where}: {module} has no {name!r}")
print(json.dumps(missing))
"""


def project_imports(path: Path, shown: str) -> list[tuple[str, str, str | None]]:
    """``(shown:line, module, name or None)`` for every import of a project module in
    ``path``, at any depth (``from m import n`` and ``import m``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        where = f"{shown}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in PROJECT:
                found += [(where, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(where, a.name, None) for a in node.names if a.name.split(".")[0] in PROJECT]
    return found


def missing_imports(names: list[tuple[str, str, str | None]]) -> list[str]:
    """Which of ``names`` (:func:`project_imports`') do not exist: each module imported,
    each name looked up, in one fresh process."""
    proc = subprocess.run(
        [sys.executable, "-c", CHECK, json.dumps(names)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_bench_module_imports_what_it_names():
    paths = sorted((ROOT / "bench").glob("*.py"))
    assert len(paths) > 20
    names = [(f"bench/{p.name}", f"bench.{p.stem}", None) for p in paths]
    names += [entry for p in paths for entry in project_imports(p, f"bench/{p.name}")]
    assert len(names) > 100
    assert missing_imports(names) == []


def test_the_import_check_sees_a_name_that_is_gone(tmp_path):
    """A function-level import of a name that is gone (bench.images' ``describe_data``
    from tfx_accum.components.data.features) is found; a module that is gone too."""
    stale = tmp_path / "stale.py"
    stale.write_text(
        "def one():\n"
        "    from tfx_accum.components.data.features import Preprocessor, describe_data\n"
        "    from tfx_accum.components.data import features, no_such_module\n"
        "    import tfx_accum.components.no_such_package\n"
    )
    assert missing_imports(project_imports(stale, "stale.py")) == [
        "stale.py:2: tfx_accum.components.data.features has no 'describe_data'",
        "stale.py:3: tfx_accum.components.data has no 'no_such_module'",
        "stale.py:4: import tfx_accum.components.no_such_package: ModuleNotFoundError: "
        "No module named 'tfx_accum.components.no_such_package'",
    ]


def test_the_images_bench_trains_on_the_embedded_images():
    """bench.images' steps (the description from TFDV's statistics, the exported
    Preprocessor, a model built by build_model, GA training, peak RSS), on the ``cnn``
    image model: DenseNet121's training step takes minutes to trace on two cores."""
    code = "import json; from bench import images; print(json.dumps(images.one(2, 4, 1, 'cnn')))"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (row["accumulation_steps"], row["micro_batch"], row["effective_batch"]) == (2, 4, 8)
    assert row["image"] == [32, 32, 1]  # the embedded digits, read as PNG images
    assert row["peak_mib"] >= row["idle_mib"] > 100 and row["seconds_per_update"] > 0
