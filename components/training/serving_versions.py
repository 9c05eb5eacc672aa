"""The versions in a serving directory, as a model server counts them.

TF Serving (and every server that follows its layout) watches a base directory and loads
the version whose name is the largest number: ``<base>/<version>/saved_model.pb``. Other
names (the Pusher's ``.incoming-*`` staging directories) are not versions. What a run
reports as pushed must be the version a server loads: this module says which one that is,
and which name a new push takes so that it is the one (never an existing version's).
"""

from __future__ import annotations

import os
from collections.abc import Iterable


def version_names(names: Iterable[str]) -> list[str]:
    """The entries of a base directory that are versions (names of digits), oldest first."""
    found = [name.rstrip("/") for name in names]
    return sorted((name for name in found if name.isdigit()), key=int)


def newest(names: Iterable[str]) -> str | None:
    """The version a model server loads: the largest number, or None without versions."""
    versions = version_names(names)
    return versions[-1] if versions else None


def next_version(names: Iterable[str], proposed: str) -> str:
    """``proposed`` (TFX's Unix time), or one past the newest version if that is not newer:
    a push never lands in an existing version and always becomes the newest."""
    latest = newest(names)
    if latest is None or int(proposed) > int(latest):
        return proposed
    return str(int(latest) + 1)


def local_versions(base: str) -> list[str]:
    """The versions under a local base directory (none if it does not exist)."""
    try:
        return version_names(entry.name for entry in os.scandir(base) if entry.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def serves(base: str, destination: str | None) -> str | None:
    """Why ``destination`` (a pushed version's path) is not what a server of ``base`` loads
    now, or None when it is: it exists, holds a model, and is the newest version."""
    if not destination:
        return None
    if os.path.normpath(os.path.dirname(os.path.normpath(destination))) != os.path.normpath(base):
        return f"{destination} is not a version of {base}"
    if not os.path.isfile(os.path.join(destination, "saved_model.pb")):
        return f"{destination} does not exist any more"
    latest = newest(local_versions(base))
    name = os.path.basename(os.path.normpath(destination))
    if latest != name:
        return f"{os.path.join(base, str(latest))} is a newer version, which a server loads"
    return None
