"""The project's docstrings and comments say what the code is and why, and name modules one way.

Read from the source (no import): every docstring and comment of the Python files under
components/, pipeline/, kubeflow/, tfx_accum/ and tests/.

- No issue number and no timing (a number of seconds or minutes): history and measurements
  go to commit messages and to docs/ beside the bench that measures them.
- A module of the installed package is named by its import path,
  ``tfx_accum.components.data.features``, never by its file path or a Sphinx module role,
  and every dotted ``tfx_accum.`` name resolves to a module, or a name defined in one, that
  exists (so a name goes stale with a move or a rename, and this test says where).

``python tests/code/test_code_text.py`` lists every finding, for fixing names after a move.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("components", "pipeline", "kubeflow", "tfx_accum", "tests")
# A dotted name ending so is a file's name (``tfx_accum.yaml``), not a module's.
FILE_SUFFIXES = {"yaml", "yml", "json", "csv", "txt", "md", "py", "keras", "png"}
# The installed package's import names -> the repository folders (pyproject.toml's package-dir).
PACKAGE_DIRS = {
    "tfx_accum.components": ROOT / "components",
    "tfx_accum.pipeline": ROOT / "pipeline",
    "tfx_accum.kubeflow": ROOT / "kubeflow",
    "tfx_accum": ROOT / "tfx_accum",
}

ISSUE = re.compile(r"(?<![\w&/])#\d+\b|\bissues? #?\d+\b", re.IGNORECASE)
TIMING = re.compile(
    r"(?<![\w.])\d+(?:[.,]\d+)?(?:\s?[-–]\s?\d+(?:[.,]\d+)?)?\s?"
    r"(?:s|ms|us|µs|sec|secs|seconds?|min|mins|minutes?|h|hours?|CPU-s)\b(?!\.\w|\()"
    r"|\b\d+(?:\.\d+)?x (?:faster|slower)\b"
)
FILE_PATH = re.compile(
    r"(?<![\w/.\-])(?:components|pipeline|kubeflow|tfx_accum)(?:/\w+)*/\w+\.py\b"
)
MOD_ROLE = re.compile(r":mod:`")
DOTTED = re.compile(r"(?<![\w.])tfx_accum(?:\.[A-Za-z_]\w*)+")


def python_files() -> list[Path]:
    return sorted(p for folder in CHECKED for p in (ROOT / folder).rglob("*.py"))


def texts(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of each docstring and comment of ``source``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                yield body[0].lineno, body[0].value.value
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string[1:]


def _module_file(name: str) -> Path | None:
    """The file of module ``name`` of the installed package, mapped to the checkout."""
    for prefix, folder in PACKAGE_DIRS.items():
        if name == prefix or name.startswith(prefix + "."):
            rest = name[len(prefix) :].strip(".").split(".") if name != prefix else []
            path = folder.joinpath(*rest)
            if (path / "__init__.py").is_file():
                return path / "__init__.py"
            if path.with_suffix(".py").is_file():
                return path.with_suffix(".py")
            return None
    return None


def _defined(tree: ast.AST, name: str) -> ast.AST | bool | None:
    """The top-level definition of ``name`` in ``tree`` (True where only named in
    ``__all__`` or bound by an assignment or import), else None."""
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                return node
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name | ast.Attribute) and name in (
                        getattr(leaf, "id", None),
                        getattr(leaf, "attr", None),
                    ):
                        return True
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)
                and isinstance(node.value, ast.List | ast.Tuple)
                and any(isinstance(e, ast.Constant) and e.value == name for e in node.value.elts)
            ):
                return True
        elif isinstance(node, ast.Import | ast.ImportFrom):
            if any((alias.asname or alias.name.split(".")[0]) == name for alias in node.names):
                return True
        elif isinstance(node, ast.If | ast.Try | ast.With):
            for part in (node.body, getattr(node, "orelse", []), getattr(node, "handlers", [])):
                found = _defined(ast.Module(body=list(part), type_ignores=[]), name)
                if found is not None:
                    return found
        elif isinstance(node, ast.ExceptHandler):
            found = _defined(ast.Module(body=node.body, type_ignores=[]), name)
            if found is not None:
                return found
    return None


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module of the package, or a name defined in one (a
    class's own attributes too)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = _module_file(".".join(parts[:cut]))
        if module is None:
            continue
        node: ast.AST | bool | None = ast.parse(module.read_text())
        for attribute in parts[cut:]:
            if not isinstance(node, ast.Module | ast.ClassDef):
                return True  # bound by an assignment or import: not followed further
            found = _defined(node, attribute)
            if found is None and isinstance(node, ast.ClassDef):
                found = (
                    any(
                        isinstance(n, ast.Attribute) and n.attr == attribute for n in ast.walk(node)
                    )
                    or None
                )
            node = found
            if node is None:
                return False
        return True
    return False


def findings() -> list[str]:
    found = []
    for path in python_files():
        where = path.relative_to(ROOT)
        for line, text in texts(path.read_text()):
            for rule, pattern in (
                ("an issue number", ISSUE),
                ("a timing", TIMING),
                ("a file path for a module (use its import path)", FILE_PATH),
                ("a :mod: role (use the import path in double backquotes)", MOD_ROLE),
            ):
                for match in pattern.finditer(text):
                    found.append(f"{where}:{line}: {rule}: {match[0]!r}")
            for match in DOTTED.finditer(text):
                if match[0].rsplit(".", 1)[1] in FILE_SUFFIXES:
                    continue
                if not resolves(match[0]):
                    found.append(f"{where}:{line}: no such module or name: {match[0]}")
    return found


def test_docstrings_and_comments_hold_no_history_and_name_modules_by_import_path():
    found = findings()
    assert not found, f"{len(found)} finding(s):\n" + "\n".join(found)


def test_the_rules_catch_what_they_forbid():
    """Each rule fails on its case (and only on it)."""
    assert ISSUE.findall("fixed in #31, see issue 20; not #1f77b4 nor &#39;") == ["#31", "issue 20"]
    assert TIMING.findall("284 s, 1.5 min, 15-20 s, 3 CPU-s, 2.5x slower; not 4 x 32") == [
        "284 s",
        "1.5 min",
        "15-20 s",
        "3 CPU-s",
        "2.5x slower",
    ]
    assert not TIMING.findall("feature.num_stats.min, a 2-core machine, 4 x 32")
    assert FILE_PATH.findall("see components/data/features.py, not tfx/utils/io.py") == [
        "components/data/features.py"
    ]
    assert resolves("tfx_accum.components.data.features")
    assert resolves("tfx_accum.backends.MissingBackend")
    assert resolves("tfx_accum.components.accumulation.model.GradientAccumulationModel")
    assert not resolves("tfx_accum.components.data.no_such_module")
    assert not resolves("tfx_accum.backends.no_such_name")
    assert not resolves("tfx_accum.components.search.tuners")


if __name__ == "__main__":
    print("\n".join(findings()) or "no findings")
