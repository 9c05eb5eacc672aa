"""The modules the wheel installs, and those of them that nothing installed imports.

A module is used when another installed module imports it (anywhere in its code, lazily
too), names it in a string (TFX's ``module_file``, ``run_fn`` and executor class paths), or
is an entry point (pyproject.toml's ``[project.scripts]``) or one of :data:`RUN_DIRECTLY`.
Read from the source (``ast``), nothing imported. Shared by tests/code/test_package.py (the
packages as pyproject.toml maps them from the checkout) and tests/kubeflow/test_wheel.py
(the wheel the image's builder builds).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Run as programs, not imported: ``python -m tfx_accum.pipeline``; the image's last build
# step (kubeflow/Dockerfile); the KFP environment's script of ``tfx-accum run-compiled``,
# run by its path (tfx_accum.pipeline.kubeflow.local_run).
RUN_DIRECTLY = {
    "tfx_accum.pipeline.__main__",
    "tfx_accum.kubeflow.image_check",
    "tfx_accum.kubeflow.run_compiled",
}
DOTTED = re.compile(r"\btfx_accum(?:\.\w+)+")


def module_name(path_in_wheel: str) -> str:
    """The import name of the module at ``path_in_wheel`` (a package for its ``__init__``)."""
    name = path_in_wheel.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


def _pyproject() -> str:
    return (ROOT / "pyproject.toml").read_text()


def entry_point_modules() -> set[str]:
    """The modules of ``[project.scripts]``."""
    section = _pyproject().split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r'=\s*"([\w.]+):', section))


def checkout_modules() -> dict[str, str]:
    """Each module of the packages pyproject.toml installs (its ``packages`` and
    ``package-dir``), read from the checkout: {name: source}."""
    text = _pyproject()
    packages = re.findall(r'"(tfx_accum[\w.]*)"', text.split("packages = [", 1)[1].split("]")[0])
    mapping = dict(
        re.findall(
            r'"([\w.]+)" = "([\w/]+)"',
            text.split("[tool.setuptools.package-dir]", 1)[1].split("\n[", 1)[0],
        )
    )
    found = {}
    for package in packages:
        base = max((p for p in mapping if package == p or package.startswith(p + ".")), key=len)
        folder = ROOT / mapping[base] / Path(*package[len(base) :].strip(".").split("."))
        for path in sorted(folder.glob("*.py")):
            found[module_name(f"{package.replace('.', '/')}/{path.name}")] = path.read_text()
    return found


def used_names(source: str) -> set[str]:
    """The tfx_accum modules (and names) ``source`` imports or names in a string."""
    used = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            used.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            used.add(node.module)
            used.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            used.update(DOTTED.findall(node.value))
    return {name for name in used if name.startswith("tfx_accum")}


def unused(modules: Mapping[str, str]) -> list[str]:
    """The modules of ``modules`` ({name: source}) that nothing installed uses."""
    used = set(RUN_DIRECTLY) | entry_point_modules()
    for name, source in modules.items():
        for other in used_names(source):
            # `a.b.c` uses the modules a.b.c and a.b (a function or class c of module a.b).
            used.update({other, other.rsplit(".", 1)[0]} - {name})
    packages = {name.rsplit(".", 1)[0] for name in modules if "." in name}
    return sorted(n for n in modules if n not in used and n not in packages and n != "tfx_accum")
