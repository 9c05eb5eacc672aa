"""The tree shows the architecture (#33): sub-packages by concern, one-way dependencies, small
modules. Read from the source with ``ast``: nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"components": "tfx_accum.components", "pipeline": "tfx_accum.pipeline"}
MAX_LINES = 500


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of components/ and pipeline/."""
    found = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def imported(path: Path) -> set[str]:
    """Every tfx_accum module a file imports, at the top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name.startswith("tfx_accum")}


def sub_packages() -> list[Path]:
    return sorted(
        p
        for folder in PACKAGES
        for p in (ROOT / folder).iterdir()
        if p.is_dir() and (p / "__init__.py").exists()
    )


def test_every_sub_package_says_what_it_owns():
    packages = sub_packages()
    assert {p.name for p in packages} == {
        "accumulation",
        "data",
        "search",
        "training",
        "checks",
        "cli",
        "kubeflow",
        "local",
    }
    for package in packages:
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
        assert doc and len(doc) > 40, f"{package}/__init__.py: a docstring naming its concern"


@pytest.mark.parametrize(
    "importer,forbidden",
    [
        # The components never reach into the pipeline or its CLI.
        ("tfx_accum.components", ("tfx_accum.pipeline", "tfx_accum.kubeflow")),
        # The model stands alone: the search and training build on it, never the reverse.
        (
            "tfx_accum.components.accumulation",
            (
                "tfx_accum.components.search",
                "tfx_accum.components.training",
                "tfx_accum.components.data",
                "tfx_accum.pipeline",
            ),
        ),
    ],
    ids=["components-not-pipeline", "accumulation-alone"],
)
def test_dependencies_point_one_way(importer, forbidden):
    wrong = {
        name: sorted(i for i in imported(path) if i.startswith(forbidden))
        for name, path in modules().items()
        if name == importer or name.startswith(importer + ".")
    }
    assert not {name: found for name, found in wrong.items() if found}


def test_the_import_check_sees_function_level_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from tfx_accum.pipeline.cli import parser\n")
    assert "tfx_accum.pipeline.cli.parser" in imported(source)


def test_no_module_over_500_lines_without_a_reason():
    long = {}
    for name, path in modules().items():
        lines = len(path.read_text().splitlines())
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if lines > MAX_LINES and "Size (" not in doc:
            long[name] = lines
    assert not long, f"over {MAX_LINES} lines with no 'Size (...)' reason in the docstring"


def test_tests_mirror_the_layout():
    concerns = {p.name for p in sub_packages() if p.parent.name == "components"} | {
        "pipeline",
        "kubeflow",
    }
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and p.name[0] != "_"}
    assert concerns <= folders
    # Only the helpers shared across folders, and tests of the root package, stay at the top.
    top = {p.stem for p in (ROOT / "tests").glob("test_*.py")}
    assert top == {"test_atomic_files", "test_interrupts", "test_layout", "test_docs"}


def test_every_slow_xla_case_names_a_test():
    from conftest import XLA_SWEEP

    for node in XLA_SWEEP:
        path, _, name = node.partition("::")
        function, _, case = name.partition("[")
        source = (ROOT / path).read_text()
        assert f"def {function}(" in source and case.endswith("]"), node
        assert "xla" in name, node
