"""The code of a model function, as a key: what a cached model and a resumed search are for.

``--model m1:net`` names a function; what it builds is its code. TFX's cache keys a
component by its properties (``custom_config`` holds the name), and the Tuner's search and
the Trainer's backup were keyed by the same settings: an edited ``m1.py`` was served the
old model from the cache, and a search resumed with the old model's trial scores.
:func:`model_code` is the key of the code: the SHA-256 of the module's source and of
every module it imports from the user's directory, each by its path, found by reading the
``import`` statements (recursively; a module loaded by name at run time, with
``importlib``, is not seen). The user's directory is the one the module is found in on the
module search path; a module installed among the libraries (``site-packages``) counts its
own package's files only.

The model settings name up to two functions (:data:`FUNCTION_KEYS`): the model's and
``model_hyperparameters``, the one that declares the hyperparameters the model reads; the
code of both is the settings' (:func:`settings_code`), in ``ModelSettings.model_code``
(:func:`with_code`: TFX's cache key) and in the search's and backup's key
(:func:`model_key`).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.util
import json
import sysconfig
from pathlib import Path

from tfx_accum.components.settings import ModelSettings, is_model_function

_LIBRARY_DIRS = ("site-packages", "dist-packages")
# The ModelSettings fields that name a function of the user's, whose code is the settings'.
FUNCTION_KEYS = ("model", "model_hyperparameters")


def _origin(name: str) -> Path | None:
    """The source file of module ``name`` (a package's ``__init__.py``), if it has one."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None or not spec.origin or not spec.has_location:
        return None
    path = Path(spec.origin)
    return path if path.suffix == ".py" and path.is_file() else None


def _imported(path: Path, name: str) -> set[str]:
    """The modules ``path`` (module ``name``) imports, by absolute name, with the packages
    they are in (a submodule's import runs its packages' ``__init__``)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - node.level + 1] if node.level > 1 else base
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module:
                found.add(module)
                found.update(f"{module}.{alias.name}" for alias in node.names)
    with_packages = set()
    for module in found:
        parts = module.split(".")
        with_packages.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return with_packages


def _is_library(directory: Path) -> bool:
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    return any(part in _LIBRARY_DIRS for part in directory.parts) or directory == stdlib


def model_code(reference: str) -> dict[str, str]:
    """``{path: SHA-256 of the file}`` for a model function's module and the modules it
    imports from the user's directory (paths relative to it); empty where the module is
    not found here (a compile for an image that holds it)."""
    if not is_model_function(reference):
        return {}
    module = reference.partition(":")[0]
    top = module.split(".")[0]
    top_file = _origin(top)
    if top_file is None:
        return {}
    root = (top_file.parent.parent if top_file.name == "__init__.py" else top_file.parent).resolve()
    inside = root / top if _is_library(root) else root
    names = {".".join(module.split(".")[: i + 1]) for i in range(module.count(".") + 1)}
    files: dict[str, str] = {}
    pending = sorted(names)
    seen = set(pending)
    tops: dict[str, bool] = {}  # top-level name -> whether it is the user's

    def users(name: str) -> Path | None:
        first = name.split(".")[0]
        if first not in tops:  # a top-level find_spec imports nothing
            origin = _origin(first)
            tops[first] = origin is not None and origin.resolve().is_relative_to(inside)
        if not tops[first]:
            return None  # a library's module: not looked into (nor imported)
        path = _origin(name)  # imports the user's packages above it, as the model does
        return path if path is not None and path.resolve().is_relative_to(inside) else None

    while pending:
        name = pending.pop()
        path = users(name)
        if path is None:
            continue
        relative = str(path.resolve().relative_to(root))
        files[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
        for imported in sorted(_imported(path, name) - seen):
            seen.add(imported)
            pending.append(imported)
    return dict(sorted(files.items()))


def code_key(files: dict[str, str]) -> str:
    """One digest of :func:`model_code`'s files (``""`` for none)."""
    if not files:
        return ""
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


def changed_files(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The files whose code differs between two :func:`model_code` results (added and
    removed ones too)."""
    return sorted(p for p in {*before, *after} if before.get(p) != after.get(p))


def functions(settings: ModelSettings) -> list[tuple[str, str]]:
    """``(setting, package.module:function)`` of each function the settings name."""
    named = [(key, getattr(settings, key)) for key in FUNCTION_KEYS]
    return [(key, reference) for key, reference in named if is_model_function(reference)]


def settings_code(settings: ModelSettings) -> dict[str, str]:
    """:func:`model_code` of the model function and of ``model_hyperparameters``'
    function, together (``{}`` for a built-in model without one)."""
    files: dict[str, str] = {}
    for _, reference in functions(settings):
        files.update(model_code(reference))
    return dict(sorted(files.items()))


def with_code(settings: ModelSettings) -> ModelSettings:
    """``settings`` with ``model_code`` set to :func:`settings_code`, so that the Tuner's
    and Trainer's ``custom_config`` (TFX's cache key) changes with the code; as they are
    where no function's module is found here (a pipeline compiled for an image that holds
    it)."""
    code = settings_code(settings)
    return dataclasses.replace(settings, model_code=tuple(code.items())) if code else settings


def changed_functions(settings: ModelSettings, changed: list[str]) -> list[tuple[str, str]]:
    """``(setting, reference)`` of the functions whose code holds one of the ``changed``
    files (:func:`changed_files`); the model's alone when none does (a file its code no
    longer imports)."""
    owners = [(key, ref) for key, ref in functions(settings) if set(model_code(ref)) & {*changed}]
    return owners or functions(settings)[:1]


def model_key(settings: ModelSettings) -> dict:
    """The model settings as the Tuner's search and the Trainer's backup are keyed by
    them: with the digest of their functions' code (:func:`settings_code`; a built-in
    model's key is its settings alone)."""
    config = settings.to_custom_config()
    code = code_key(settings_code(settings))
    return {**config, "code": code} if code else config
