"""Checks an installed image's layout: ``python -m tfx_accum.kubeflow.image_check``.

The last build step of ``kubeflow/Dockerfile`` (and so of its replay without Docker,
``tfx_accum.kubeflow.image_tools.image_replay``), run in the image's ``WORKDIR`` as its user:

- ``tfx_accum`` and the code every pipeline task imports (TFX's container entry point, the
  Tuner, Trainer and run-time-parameter executors) import from site-packages, not from the
  working directory, which ``python -m`` puts first on ``sys.path``;
- every installed module has current bytecode (a ``.pyc`` matching its source), so no pod
  pays the import compile (seconds of CPU for this stack) and nothing needs writing at run
  time; a ``.py`` that does not compile on this Python (a template, a Python 2 file) is
  not importable and is skipped;
- Keras is 3 and ``TF_USE_LEGACY_KERAS`` is unset.

Exit status 0, or 1 with one line per problem.
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # what this check finds must be what the install wrote

import importlib  # noqa: E402
import importlib.util  # noqa: E402
import os  # noqa: E402
import sysconfig  # noqa: E402
from pathlib import Path  # noqa: E402

# What the pipeline's tasks import in the container.
TASK_MODULES = (
    "tfx_accum.components.search.tuner_module",
    "tfx_accum.components.training.trainer_module",
    "tfx_accum.pipeline.run_parameters",
    "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor",
)
_FLAG_HASH_BASED = 0b1  # PEP 552: the pyc's flags word


def site_directories() -> list[Path]:
    paths = sysconfig.get_paths()
    return sorted({Path(paths["purelib"]).resolve(), Path(paths["platlib"]).resolve()})


def _current_bytecode(source: Path) -> bool:
    """True if ``source``'s cached ``.pyc`` exists and matches it (timestamp or hash based)."""
    cached = Path(importlib.util.cache_from_source(str(source)))
    try:
        header = cached.read_bytes()[:16]
    except OSError:
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags = int.from_bytes(header[4:8], "little")
    if flags & _FLAG_HASH_BASED:
        return True  # checked against the source's hash at import, not by time
    stat = source.stat()
    mtime = int.from_bytes(header[8:12], "little")
    size = int.from_bytes(header[12:16], "little")
    return mtime == (int(stat.st_mtime) & 0xFFFFFFFF) and size == (stat.st_size & 0xFFFFFFFF)


def _compiles(source: Path) -> bool:
    try:
        compile(source.read_bytes(), str(source), "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def missing_bytecode(directories: list[Path]) -> tuple[list[Path], int]:
    """``(sources without current bytecode, sources checked)`` under ``directories``."""
    missing, checked = [], 0
    for directory in directories:
        for source in directory.rglob("*.py"):
            checked += 1
            if not _current_bytecode(source) and _compiles(source):
                missing.append(source)
    return missing, checked


def _inside(path: str | None, directories: list[Path]) -> bool:
    if not path:
        return False
    resolved = Path(path).resolve()
    return any(resolved.is_relative_to(d) for d in directories)


def check() -> tuple[list[str], str]:
    """``(problems, summary)`` for this interpreter and working directory."""
    problems: list[str] = []
    sites = site_directories()
    missing, checked = missing_bytecode(sites)
    if missing:
        shown = ", ".join(str(p) for p in missing[:3])
        problems.append(
            f"{len(missing)} of {checked} installed modules have no current bytecode "
            f"(e.g. {shown}): install with pip install --compile (or python -m compileall)"
        )
    if os.environ.get("TF_USE_LEGACY_KERAS"):
        problems.append("TF_USE_LEGACY_KERAS is set: the project needs Keras 3")
    for name in TASK_MODULES:
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - reported as the problem it is
            problems.append(
                f"import {name} fails in {os.getcwd()}: {type(error).__name__}: {error}"
            )
    outside = sorted(
        f"{name} ({module.__file__})"
        for name, module in list(sys.modules.items())
        if name.split(".")[0] == "tfx_accum"
        and getattr(module, "__file__", None)
        and not _inside(module.__file__, sites)
    )
    if outside:
        problems.append(
            f"tfx_accum is imported from outside site-packages: {', '.join(outside[:3])} "
            "(project sources on sys.path, e.g. in the WORKDIR)"
        )
    import keras

    if not keras.__version__.startswith("3"):
        problems.append(f"Keras {keras.__version__} is installed; the project needs Keras 3")
    summary = (
        f"image check ok: tfx_accum from {sites[0]}, {checked} installed modules with "
        f"bytecode, Keras {keras.__version__}, working directory {os.getcwd()}"
    )
    return problems, summary


def main() -> int:
    problems, summary = check()
    for problem in problems:
        print(f"image check: error: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
