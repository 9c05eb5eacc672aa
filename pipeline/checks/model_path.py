"""Finding the user's model module (``--model my_models:wide_mlp``) without implicit paths.

The library never adds a directory to ``sys.path`` on its own: an unexpected module of the
same name in whatever directory a process happens to run in would be imported instead.
The command line makes one explicit exception, and says so: when the module is not on the
module search path but sits in the current directory (as ``python -m`` would find it),
``tfx-accum run`` adds that directory for this run, to ``sys.path`` and to ``PYTHONPATH``
(so that a parallel search's worker processes find it too), and prints a line.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path


def add_current_directory(reference: str) -> str | None:
    """Makes ``reference``'s module importable from the current directory, if it is there.

    Returns the line to print when the directory was added; ``None`` when the module is
    found without it (or is not in the current directory either: the model check then
    says it cannot be imported).
    """
    module = reference.partition(":")[0]
    top = module.split(".", 1)[0]
    try:
        if importlib.util.find_spec(top) is not None:
            return None
    except (ImportError, ValueError):
        return None
    cwd = Path.cwd()
    if not ((cwd / f"{top}.py").is_file() or (cwd / top / "__init__.py").is_file()):
        return None
    sys.path.append(str(cwd))
    importlib.invalidate_caches()
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([*paths, str(cwd)])
    return (
        f"[data] --model {reference}: {top!r} is in the current directory {cwd}, which is "
        "added to the module search path (PYTHONPATH) for this run"
    )
