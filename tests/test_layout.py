"""The tree shows the architecture: rooms in strict layers, small modules.

Read from the source with ``ast``: nothing is imported. Every import of every installed
module counts (function-level and ``TYPE_CHECKING`` ones too), each resolved to the module it
names through the package-dir mapping of ``pyproject.toml``; the order below is checked on
the whole graph, indirect dependencies included, so a cycle between two rooms fails.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 500

# The layers, bottom first: a module imports its own room and the rooms of lower layers only.
# Rooms in one layer are siblings and import nothing of each other. Each room is a list of
# module prefixes (a package and everything in it, or one module). The same order is drawn in
# docs/architecture.md and tfx_accum.components's docstring.
LAYERS: tuple[tuple[tuple[str, tuple[str, ...]], ...], ...] = (
    (("accumulation", ("tfx_accum.components.accumulation",)),),
    (
        (
            "base",
            tuple(
                f"tfx_accum.{name}"
                for name in ("atomic_files", "backends", "console", "extras", "interrupts")
            )
            + ("tfx_accum.needs_tfx",),
        ),
    ),
    (("config", ("tfx_accum.components.config",)),),
    (("data", ("tfx_accum.components.data",)),),
    (("models", ("tfx_accum.components.models",)),),
    (
        ("search", ("tfx_accum.components.search",)),
        ("training", ("tfx_accum.components.training",)),
    ),
    (("components", ("tfx_accum.components",)),),  # the public API: tfx_accum.components
    (
        (
            "pipeline.base",
            ("tfx_accum.pipeline.errors", "tfx_accum.pipeline.config"),
        ),
    ),
    (("pipeline.checks", ("tfx_accum.pipeline.checks",)),),
    (
        (
            "pipeline.evaluation",
            ("tfx_accum.pipeline.evaluation", "tfx_accum.pipeline.evaluator_inputs"),
        ),
        ("pipeline.beam", ("tfx_accum.pipeline.beam_args", "tfx_accum.pipeline.tfxio_batching")),
    ),
    (("pipeline.run_parameters", ("tfx_accum.pipeline.run_parameters",)),),
    (("pipeline.pipeline", ("tfx_accum.pipeline.pipeline",)),),
    (("pipeline.local", ("tfx_accum.pipeline.local",)),),
    (("pipeline.kubeflow", ("tfx_accum.pipeline.kubeflow",)),),
    (("pipeline.cli", ("tfx_accum.pipeline.cli",)),),
    (("pipeline", ("tfx_accum.pipeline",)),),  # the public API and ``python -m``
    (("kubeflow", ("tfx_accum.kubeflow",)),),  # the image's last check, node-pool profiles
    (
        (
            "tfx_accum",
            ("tfx_accum", "tfx_accum.command", "tfx_accum.keras_registration"),
        ),
    ),
)
ORDER = [room for layer in LAYERS for room, _ in layer]
LAYER_OF = {room: index for index, layer in enumerate(LAYERS) for room, _ in layer}


def package_dirs() -> dict[str, Path]:
    """``[tool.setuptools.package-dir]`` of pyproject.toml: package -> folder."""
    text = (ROOT / "pyproject.toml").read_text()
    table = text.split("[tool.setuptools.package-dir]", 1)[1].split("\n[", 1)[0]
    pairs = re.findall(r'^"([\w.]+)"\s*=\s*"([\w./]+)"', table, flags=re.M)
    assert pairs, "pyproject.toml: no [tool.setuptools.package-dir] table"
    return {package: ROOT / folder for package, folder in pairs}


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module the package-dir mapping installs."""
    found = {}
    for package, folder in package_dirs().items():
        for path in sorted(folder.glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            found[name] = path
        for sub in sorted(p for p in folder.iterdir() if (p / "__init__.py").exists()):
            if f"{package}.{sub.name}" in package_dirs():
                continue  # mapped on its own
            for path in sorted(sub.rglob("*.py")):
                parts = path.relative_to(folder).with_suffix("").parts
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                found[".".join((package, *parts))] = path
    return found


def imported(path: Path, name: str, known: set[str]) -> set[str]:
    """Every project module the file ``name`` imports: at the top, inside a function or under
    ``TYPE_CHECKING``, relative or absolute; ``from a import b`` is ``a.b`` where that is a
    module, else ``a``."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    resolved = set()
    for target in found:
        while target and target not in known:  # ``import a.b.c``: the deepest module known
            target = target.rpartition(".")[0]
        if target and target.startswith("tfx_accum"):
            resolved.add(target)
    return resolved


def room_of(module: str) -> str | None:
    """The room whose longest prefix names ``module``."""
    best, length = None, -1
    for layer in LAYERS:
        for room, prefixes in layer:
            for prefix in prefixes:
                if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                    best, length = room, len(prefix)
    return best


@functools.cache
def _graph() -> tuple[tuple[str, frozenset[str]], ...]:
    found = modules()
    known = set(found)
    return tuple((name, frozenset(imported(path, name, known))) for name, path in found.items())


def module_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (a fresh copy: the tests may add to it)."""
    return {name: set(targets) for name, targets in _graph()}


def room_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(room, room it imports) -> the module imports that make the edge."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, targets in graph.items():
        for target in targets:
            a, b = room_of(module), room_of(target)
            if a != b:
                edges.setdefault((a, b), []).append(f"{module} -> {target}")
    return edges


def layering_errors(graph: dict[str, set[str]]) -> list[str]:
    """What breaks the order: a cycle between rooms, or a room reaching (directly or through
    others) a room that is not in a lower layer."""
    edges = room_edges(graph)
    direct: dict[str, set[str]] = {}
    for a, b in edges:
        direct.setdefault(a, set()).add(b)
    errors = []
    for room in ORDER:
        paths = {room: [room]}  # every room reachable from ``room``, with one path to it
        stack = [room]
        while stack:
            here = stack.pop()
            for there in sorted(direct.get(here, ())):
                if there not in paths:
                    paths[there] = [*paths[here], there]
                    stack.append(there)
                elif there == room:
                    cycle = " -> ".join([*paths[here], room])
                    errors.append(f"cycle {cycle} ({'; '.join(edges[here, room][:2])})")
        for there, path in paths.items():
            if there != room and LAYER_OF[there] >= LAYER_OF[room]:
                hops = " -> ".join(path)
                first = "; ".join(edges[path[0], path[1]][:2])
                errors.append(f"{room} reaches {there}, not below it: {hops} ({first})")
    return sorted(set(errors))


def sub_packages() -> list[Path]:
    return sorted(
        p
        for folder in ("components", "pipeline")
        for p in (ROOT / folder).iterdir()
        if p.is_dir() and (p / "__init__.py").exists()
    )


def test_every_sub_package_says_what_it_owns():
    packages = sub_packages()
    assert {p.name for p in packages} == {
        "accumulation",
        "config",
        "data",
        "models",
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


def test_every_module_has_a_room():
    assert not [name for name in modules() if room_of(name) is None]
    assert len(modules()) > 120  # the mapping found the tree


def test_the_rooms_are_strictly_layered_on_the_whole_import_graph():
    assert not layering_errors(module_graph())


@pytest.mark.parametrize(
    "extra,expected",
    [
        # Each of these made a cycle between rooms; the check must refuse it again.
        (
            ("tfx_accum.components.search.hypermodel", "tfx_accum.components.training.export"),
            "search reaches training",
        ),
        (
            (
                "tfx_accum.components.training.trainer_module",
                "tfx_accum.components.search.search_policy",
            ),
            "training reaches search",
        ),
        (
            ("tfx_accum.components.data.datasets", "tfx_accum.components.models.custom_model"),
            "cycle data -> models -> data",
        ),
        (
            ("tfx_accum.components.accumulation.model", "tfx_accum.components.config.settings"),
            "cycle accumulation -> config -> accumulation",
        ),
        (
            (
                "tfx_accum.components.config.custom_config",
                "tfx_accum.components.search.tuner_module",
            ),
            "cycle config -> search",
        ),
        (  # indirect: pipeline.local -> pipeline.pipeline -> pipeline.local
            ("tfx_accum.pipeline.pipeline", "tfx_accum.pipeline.local.runner"),
            "cycle pipeline.pipeline -> pipeline.local -> pipeline.pipeline",
        ),
    ],
    ids=[
        "search-training",
        "training-search",
        "data-models",
        "accumulation-config",
        "config-search",
        "pipeline-local",
    ],
)
def test_the_check_refuses_the_cycles_it_guards_against(extra, expected):
    graph = module_graph()
    importer, target = extra
    assert importer in graph and target in graph
    graph[importer] = {*graph[importer], target}
    errors = layering_errors(graph)
    assert any(expected in error for error in errors), errors


def test_an_indirect_dependency_on_a_higher_room_is_refused():
    graph = {name: set() for name in module_graph()}
    # Through another room: data -> config -> models.
    graph["tfx_accum.components.data.datasets"] = {"tfx_accum.components.config.settings"}
    graph["tfx_accum.components.config.settings"] = {"tfx_accum.components.models.models"}
    errors = layering_errors(graph)
    assert any(e.startswith("config reaches models") for e in errors), errors
    assert any(
        e.startswith("data reaches models, not below it: data -> config -> models") for e in errors
    ), errors


def test_the_import_check_sees_function_level_and_relative_imports(tmp_path):
    known = {"tfx_accum.pipeline.cli.parser", "tfx_accum.pipeline.cli", "tfx_accum.console"}
    source = tmp_path / "m.py"
    source.write_text(
        "def f():\n    from tfx_accum.pipeline.cli import parser\n"
        "if False:\n    from .. import console\n"
    )
    found = imported(source, "tfx_accum.pipeline.m", known)
    assert found == {"tfx_accum.pipeline.cli.parser", "tfx_accum.console"}


def test_the_package_dir_mapping_is_resolved():
    found = modules()
    assert found["tfx_accum.components.accumulation.model"] == (
        ROOT / "components" / "accumulation" / "model.py"
    )
    assert found["tfx_accum.kubeflow"] == ROOT / "kubeflow" / "__init__.py"
    assert found["tfx_accum.console"] == ROOT / "tfx_accum" / "console.py"


def test_the_order_is_written_down_where_a_reader_looks():
    """tfx_accum.components's docstring and docs/architecture.md draw the same order as LAYERS."""
    drawn = " -> ".join(" | ".join(room for room, _ in layer) for layer in LAYERS)
    for path in (ROOT / "components" / "__init__.py", ROOT / "docs" / "architecture.md"):
        text = re.sub(r"\s+", " ", path.read_text())
        assert drawn in text, f"{path.name}: the layer order {drawn!r}"


FILE = re.compile(r"\b([\w-]+\.(?:py|yaml|txt|sh|md|toml))\b")
PATH = re.compile(
    r"(?<![\w./-])((?:components|pipeline|kubeflow|tfx_accum|tests|bench|docs|scripts)"
    r"/[\w/.-]*\.(?:py|md|yaml|txt|sh|toml|json))\b"
)


def architecture_files() -> list[str]:
    """Every file docs/architecture.md's drawing of the tree names, as a path: a line
    starting with ``folder/`` (or, indented, ``sub/``) opens that folder, and the file names
    on it and on the lines that continue it are in it."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("```\n", 2)[1]
    top, folder, named = "", "", []
    for line in block.splitlines():
        head = line.split(maxsplit=1)[0] if line.strip() else ""
        if head.endswith("/") and not line.startswith("    "):
            if line.startswith("  "):
                folder = f"{top}{head}"
            else:
                top = folder = head
            line = line.split(maxsplit=1)[1] if len(line.split(maxsplit=1)) > 1 else ""
        named += [f"{folder}{name}" for name in FILE.findall(line)]
    return named


def test_the_architecture_drawing_names_only_files_that_exist():
    named = architecture_files()
    assert len(named) > 100, named  # the drawing was read
    assert not [path for path in named if not (ROOT / path).is_file()]


def test_the_drawing_check_finds_a_file_that_moved(monkeypatch, tmp_path):
    drawing = (ROOT / "docs" / "architecture.md").read_text()
    moved = drawing.replace("budget.py (the Trainer's budget rule)", "trainer_budget.py (gone)")
    assert moved != drawing
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "architecture.md").write_text(moved)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    named = architecture_files()
    assert "components/training/trainer_budget.py" in named
    assert not (tmp_path / "components/training/trainer_budget.py").is_file()


def test_every_path_a_module_or_the_architecture_names_exists():
    """A file path in a module's docstring or comment, or in docs/architecture.md, names a
    file of the tree (a moved module leaves none behind)."""
    sources = [*modules().values(), ROOT / "docs" / "architecture.md"]
    missing = [
        f"{source.relative_to(ROOT)}: {path}"
        for source in sources
        for path in PATH.findall(source.read_text())
        if not (ROOT / path).exists()
    ]
    assert not missing


def test_every_package_docstring_names_its_room():
    """Each sub-package's docstring says which room it is (the words of LAYERS)."""
    for package in sub_packages():
        room = package.name if package.parent.name == "components" else f"pipeline.{package.name}"
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
        assert room.split(".")[-1] in doc.lower() and "room" in doc.lower(), package


ROOM_WORDS = re.compile(r"\b([a-z][a-z_.]*) room\b")


def misplaced(name: str, doc: str) -> list[str]:
    """The rooms a module's docstring names as its own (in its first paragraph: later ones may
    point to a sibling elsewhere) that are not the room the module is in."""
    room = room_of(name).split(".")[-1]
    named = [word.split(".")[-1] for word in ROOM_WORDS.findall(doc.split("\n\n")[0].lower())]
    # ("the configuration room" is the config room)
    return [word for word in named if not (word.startswith(room) or room.startswith(word))]


def test_every_module_is_in_the_room_its_docstring_names():
    docs = {
        name: ast.get_docstring(ast.parse(path.read_text())) for name, path in modules().items()
    }
    assert not {name: wrong for name, doc in docs.items() if (wrong := misplaced(name, doc or ""))}


def test_the_room_check_sees_a_module_in_the_wrong_room():
    both = "The training room's TFX components: the Trainer, and the Tuner."
    assert misplaced("tfx_accum.components.training.tfx_components", both) == []
    assert misplaced("tfx_accum.components.search.tfx_components", both) == ["training"]
    sibling = "The Trainer.\n\nThe Tuner is its sibling in the search room."
    assert misplaced("tfx_accum.components.training.trainer_component", sibling) == []


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


def test_the_fast_tier_keeps_graph_cases_and_xlas_own_tests():
    from types import SimpleNamespace

    from conftest import XLA_SWEEP, slow_xla_case

    def case(path: str, function: str, case_id: str | None):
        nodeid = f"{path}::{function}" + (f"[{case_id}]" if case_id else "")
        spec = SimpleNamespace(id=case_id) if case_id else None
        return SimpleNamespace(nodeid=nodeid, name=function, originalname=function, callspec=spec)

    matrix = "tests/accumulation/test_exactness_matrix.py"
    assert slow_xla_case(case(matrix, "test_embedding_sparse_gradients", "sgd-uneven-xla"))
    assert not slow_xla_case(case(matrix, "test_embedding_sparse_gradients", "sgd-uneven-graph"))
    assert not slow_xla_case(case(matrix, "test_subclass_after_a_functional_instance_exists", None))
    micro = "tests/accumulation/test_micro_batches.py"
    assert not slow_xla_case(case(micro, "test_each_forward_pass_sees_one_micro_batch", "k1-xla"))
    swept = XLA_SWEEP[0].partition("::")[2].partition("[")
    assert slow_xla_case(case(micro, swept[0], swept[2].rstrip("]")))


@pytest.mark.e2e
def test_the_fast_tier_collects_no_xla_case_outside_xlas_own_tests():
    """The marks are applied at collection, so ``-m "not e2e"`` leaves the XLA cases out."""
    from conftest import XLA_OWN

    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider"]
        + ["-m", "not e2e", "tests/accumulation/test_exactness_matrix.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert any("-graph]" in node for node in ids)
    assert not [n for n in ids if "-xla]" in n and n.split("::")[1].split("[")[0] not in XLA_OWN]


def test_every_slow_xla_case_names_a_test():
    from conftest import XLA_OWN, XLA_SWEEP

    sources = "".join(p.read_text() for p in (ROOT / "tests" / "accumulation").glob("test_*.py"))
    for function in XLA_OWN:
        assert f"def {function}(" in sources, function
    for node in XLA_SWEEP:
        path, _, name = node.partition("::")
        function, _, case = name.partition("[")
        source = (ROOT / path).read_text()
        assert f"def {function}(" in source and case.endswith("]"), node
        assert function in XLA_OWN, node
