"""Checks, without Docker, that every variant of ``kubeflow/Dockerfile`` can be built.

What broke the image before: a pinned requirement (``pyfarmhash`` 0.3.2) that exists only as
a source distribution, on a slim base image without a compiler. This check reads the
Dockerfile's own ``pip wheel`` and ``pip install`` lines
(``tfx_accum.kubeflow.image_tools.dockerfile``) and, for each variant
(``ACCELERATOR`` = cpu, gpu, tpu), works out the distributions it installs with their pinned
versions, then asks their package index whether each has a wheel for the image's platform
(CPython 3.10, manylinux x86_64 up to glibc 2.36: Debian bookworm). A requirement without
one must be built in the builder stage (a ``pip wheel ... -w /wheels NAME`` line). It also
checks that each variant ends with exactly one TensorFlow distribution.

The pins come from this environment, which ``scripts/setup_env.sh`` installs from the same
``constraints.txt`` as the image: ``.`` is ``tfx-accum``'s requirements, walked through the
installed distributions' metadata; an extra (``tensorflow[and-cuda]``) adds the pins that
extra declares. Indexes: PyPI's JSON simple API, or the ``-f`` URL of the line; an index that
cannot be reached from here is reported as not verified (not as a pass).

Usage: ``python -m tfx_accum.kubeflow.image_tools.check_image_wheels [DOCKERFILE]`` (exit 1 on a
problem). Needs network access to the package indexes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

from packaging import tags
from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from tfx_accum.kubeflow.image_tools import dockerfile

PYPI_SIMPLE = "https://pypi.org/simple/{name}/"
PYTHON = (3, 10)
GLIBC_MINOR = 36  # Debian bookworm, the base image python:3.10-slim-bookworm
VARIANTS = ("cpu", "gpu", "tpu")
TENSORFLOW_DISTRIBUTIONS = {
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tensorflow-tpu",
    "tensorflow-intel",
    "tf-nightly",
}
# The environment the image's markers are evaluated in.
MARKER_ENV = {
    "python_version": "3.10",
    "python_full_version": "3.10.13",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}


@dataclasses.dataclass(frozen=True)
class Pin:
    name: str  # canonical
    version: str
    index: str | None = None  # a -f URL; None: PyPI


def _supported_tags() -> set[tags.Tag]:
    platforms = [f"manylinux_2_{minor}_x86_64" for minor in range(GLIBC_MINOR, 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    interpreter = f"cp{PYTHON[0]}{PYTHON[1]}"
    supported = set(
        tags.cpython_tags(PYTHON, abis=[interpreter, "abi3", "none"], platforms=platforms)
    )
    supported.update(tags.compatible_tags(PYTHON, interpreter, platforms))
    return supported


SUPPORTED = _supported_tags()


PROJECT = "tfx-accum"


def _commands(text: str) -> tuple[set[str], dict[str, list[list[str]]]]:
    """``(built, commands)``: names built in the builder stage, pip commands per variant."""
    stages = dockerfile.parse(text)
    final = stages[-1]
    # (the stage's RUN line, whether it is the image's): the builder stages' own `pip install`
    # lines (their pinned build tools) install nothing into the image.
    runs = [(i.arguments, stage is final) for stage in stages for i in stage.all("RUN")]
    built: set[str] = set()
    per_variant: dict[str, list[list[str]]] = {v: [] for v in VARIANTS}
    for run, in_image in runs:
        common, branches = run, {}
        case = re.search(r'case\s+"\$ACCELERATOR"\s+in(.*?)esac', run, re.S)
        if case:
            common = run[: case.start()] + run[case.end() :]
            branches = {
                name: body for name, body in re.findall(r"(\w+)\)\s*(.*?);;", case.group(1), re.S)
            }
        for variant in VARIANTS:
            for part in (common, branches.get(variant, "")):
                for words in dockerfile.shell_commands(part):
                    if words[:4] == ["python", "-m", "pip", "wheel"]:
                        built.update(_wheel_names(words[4:]))
                    elif in_image and words[:4] in (
                        ["python", "-m", "pip", "install"],
                        ["python", "-m", "pip", "uninstall"],
                    ):
                        per_variant[variant].append(words[3:])
    return {canonicalize_name(n) for n in built}, per_variant


def _is_path(arg: str) -> bool:
    return arg.startswith((".", "/"))


def _path_extras(arg: str) -> tuple[str, ...]:
    """The extras of a path requirement: ``.[tfx]`` -> ``("tfx",)``."""
    found = re.search(r"\[([^\]]*)\]$", arg)
    return tuple(e.strip() for e in found.group(1).split(",") if e.strip()) if found else ()


def _wheel_names(args: list[str]) -> list[str]:
    """The names a ``pip wheel`` line builds; a path is this project's source tree."""
    names, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-c", "-w", "--constraint", "--wheel-dir", "-f", "--find-links"):
            skip = True
        elif _is_path(arg):
            names.append(PROJECT)
        elif not arg.startswith("-"):
            names.append(Requirement(arg).name)
    return names


def _installed_closure(root: str, extras: tuple[str, ...] = ()) -> dict[str, Pin]:
    """``root`` and its requirements as installed here (pinned), markers for the image."""
    pins: dict[str, Pin] = {}
    todo = [(root, extras)]
    while todo:
        name, wanted = todo.pop()
        dist = metadata.distribution(name)
        key = canonicalize_name(dist.metadata["Name"])
        if key in pins and not wanted:
            continue
        pins[key] = Pin(key, dist.version)
        for text in dist.requires or []:
            requirement = Requirement(text)
            environments = [{**MARKER_ENV, "extra": extra} for extra in ("", *wanted)]
            if requirement.marker and not any(
                requirement.marker.evaluate(env) for env in environments
            ):
                continue
            try:
                metadata.distribution(requirement.name)
            except metadata.PackageNotFoundError:
                version = _exact(requirement)
                if version is None:
                    raise RuntimeError(
                        f"{requirement} (required by {name}) is neither installed here nor pinned"
                    ) from None
                pins[canonicalize_name(requirement.name)] = Pin(
                    canonicalize_name(requirement.name), version
                )
                continue
            if canonicalize_name(requirement.name) not in pins:
                todo.append((requirement.name, tuple(requirement.extras)))
    return pins


def _exact(requirement: Requirement) -> str | None:
    pinned = [
        s.version
        for s in requirement.specifier
        if s.operator in ("==", "===") and "*" not in s.version
    ]
    return pinned[0] if pinned else None


def variant_pins(dockerfile: str) -> tuple[set[str], dict[str, dict[str, Pin]]]:
    """The distributions each variant installs, pinned, and the names built from source."""
    built, per_variant = _commands(dockerfile)
    result: dict[str, dict[str, Pin]] = {}
    for variant, commands in per_variant.items():
        pins: dict[str, Pin] = {}
        for words in commands:
            verb, args = words[0], words[1:]
            if verb == "uninstall":
                for arg in args:
                    if not arg.startswith("-"):
                        pins.pop(canonicalize_name(arg), None)
                continue
            no_deps, skip = "--no-deps" in args, False
            links = [
                args[i + 1]
                for i, arg in enumerate(args[:-1])
                if arg in ("-f", "--find-links") and "://" in args[i + 1]
            ]
            index = links[0] if links else None
            for arg in args:
                if skip:
                    skip = False
                    continue
                if arg in ("-f", "--find-links", "-c", "--constraint"):
                    skip = True
                    continue
                if arg.startswith("-") or arg == "pip":  # options; pip upgrades itself
                    continue
                if _is_path(arg) or canonicalize_name(Requirement(arg).name) == PROJECT:
                    # This project (its wheel, or its source tree): its pinned requirements,
                    # with the extras asked for ("tfx-accum[tfx]": the TFX parts).
                    extras = _path_extras(arg) if _is_path(arg) else tuple(Requirement(arg).extras)
                    pins.update(_installed_closure(PROJECT, extras))
                    pins.pop(PROJECT)
                    continue
                requirement = Requirement(arg)
                name = canonicalize_name(requirement.name)
                version = _exact(requirement)
                if version is not None:
                    pins[name] = Pin(name, version, index)
                elif name in pins and requirement.extras and not no_deps:
                    pins.update(
                        {
                            key: pin
                            for key, pin in _installed_closure(
                                requirement.name, tuple(requirement.extras)
                            ).items()
                            if key not in pins
                        }
                    )
                else:  # unpinned: counted, and reported by check()
                    pins[name] = Pin(name, "", index)
        result[variant] = pins
    return built, result


@functools.cache
def _files(pin: Pin) -> list[str] | None:
    """File names the pin's index lists for its project (None: the index is unreachable)."""
    url = pin.index or PYPI_SIMPLE.format(name=pin.name)
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    body = None
    for attempt in range(4):  # an index under load answers late or not at all, now and then
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                body = response.read().decode()
            break
        except (urllib.error.URLError, TimeoutError, OSError):
            if attempt < 3 and not pin.index:  # PyPI: retry; a private index: report it
                time.sleep(2**attempt)
    if body is None:
        return None
    if body.lstrip().startswith("{"):
        return [f["filename"] for f in json.loads(body)["files"] if not f.get("yanked")]
    return [Path(href.split("#")[0]).name for href in re.findall(r'href="([^"]+)"', body)]


def has_wheel(files: list[str], pin: Pin) -> bool:
    for filename in files:
        if not filename.endswith(".whl"):
            continue
        try:
            name, version, _, wheel_tags = parse_wheel_filename(filename)
        except (InvalidWheelFilename, InvalidVersion):  # old uploads with odd names
            continue
        if canonicalize_name(name) == pin.name and version == Version(pin.version):
            if wheel_tags & SUPPORTED:
                return True
    return False


def check(dockerfile: str) -> tuple[list[str], list[str], dict[str, int]]:
    """``(problems, unverified, counts)`` for the Dockerfile's text."""
    built, variants = variant_pins(dockerfile)
    problems: list[str] = []
    for variant, pins in variants.items():
        tensorflows = sorted(TENSORFLOW_DISTRIBUTIONS & set(pins))
        if len(tensorflows) != 1:
            problems.append(
                f"{variant}: {len(tensorflows)} TensorFlow distributions "
                f"({', '.join(tensorflows)}); exactly one may write the `tensorflow` package"
            )
    unpinned = sorted(
        {p.name for pins in variants.values() for p in pins.values() if not p.version}
    )
    problems += [f"{name} is not pinned to one version (==VERSION)" for name in unpinned]
    unique = {pin for pins in variants.values() for pin in pins.values() if pin.version}
    with ThreadPoolExecutor(8) as pool:
        listings = dict(zip(unique, pool.map(_files, unique)))
    unverified = []
    for pin in sorted(unique, key=lambda p: p.name):
        files = listings[pin]
        if files is None:
            unverified.append(f"{pin.name}=={pin.version} ({pin.index or 'PyPI'} unreachable)")
        elif not has_wheel(files, pin) and pin.name not in built:
            problems.append(
                f"{pin.name}=={pin.version} has no wheel for CPython 3.10 on manylinux x86_64 "
                f"(glibc 2.{GLIBC_MINOR}) and is not built in the builder stage: add it to the "
                "builder's `pip wheel` line"
            )
    return problems, unverified, {v: len(p) for v, p in variants.items()}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "Dockerfile"
    problems, unverified, counts = check(path.read_text())
    for line in unverified:
        print(f"not verified: {line}")
    for line in problems:
        print(f"error: {line}")
    if problems:
        return 1
    print(
        "image requirements ok: "
        + ", ".join(f"{variant} {count}" for variant, count in counts.items())
        + " distributions, each with a wheel for the image or built in the builder stage"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
