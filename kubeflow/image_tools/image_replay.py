"""Replays ``kubeflow/Dockerfile`` without Docker: its install steps into a fresh environment.

``docker build`` is not available everywhere (CI has no Docker engine), yet what breaks an
image is often its layout: where the project lands, what the ``WORKDIR`` holds, whether the
code imports there. This replays the Dockerfile's own instructions, stage by stage, into a
directory that stands for each stage's file system:

- ``COPY`` copies from the build context (minus ``.dockerignore``) or an earlier stage;
  ``WORKDIR``, ``ENV``, ``ARG`` and ``USER`` are followed; ``RUN`` lines run with
  ``/bin/sh -c`` as written, in the stage's working directory and environment, with every
  absolute path the Dockerfile creates (``/wheels``, ``/src``, the ``WORKDIR``...) moved
  under the stage's directory;
- ``python`` is a fresh virtual environment of the base interpreter (no system
  site-packages) and pip's cache a fresh, empty directory, as in a docker build: in the
  builder stage with pip (``pip wheel``), in the final stage empty,
  where ``python -m pip install`` and ``uninstall`` run as ``uv pip`` with the same
  arguments when ``uv`` is present (the same resolution from the same indexes, much faster;
  pip's default ``--compile`` becomes ``--compile-bytecode``), else as pip;
- ``RUN`` lines of system commands only (``apt-get``, ``useradd``, ``install -d``, ...)
  are skipped: they need root and change no Python environment. A line that mixes them with
  other commands is refused.

The result (:class:`ReplayedImage`) names the image's interpreter, its ``WORKDIR`` (as a
directory) and environment: ``tfx-accum run-compiled SPEC --image-python PYTHON --workdir
WORKDIR`` then runs a compiled pipeline in the image's layout.

Usage::

    python -m tfx_accum.kubeflow.image_tools.image_replay [--variant cpu]
        [--dockerfile kubeflow/Dockerfile] [--context .] DIRECTORY
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

from tfx_accum.kubeflow.image_tools import dockerfile

SYSTEM_COMMANDS = ("apt-get", "apt", "useradd", "groupadd", "install", "chown", "chmod", "rm")
# Environment variables of the host that would change what the replayed steps do. A docker
# build sees none of them. TF_USE_LEGACY_KERAS in particular is set in the host's own process by
# importing TFX (tensorflow_transform sets it on import), so a replay started from a process that
# imported the pipeline would otherwise fail the image's Keras 3 check.
_HOST_ONLY = (
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "CONDA_PREFIX",
    "TF_USE_LEGACY_KERAS",
)
_PIP_SHIM = r'''#!{host_python}
"""`python` in a replayed stage: the stage's interpreter; pip as uv pip where uv is given."""
import os, sys
TARGET, UV = {target!r}, {uv!r}
args = sys.argv[1:]
if UV and args[:2] == ["-m", "pip"] and args[2:3] in (["install"], ["uninstall"]):
    verb, rest = args[2], args[3:]
    if verb == "uninstall":
        rest = [a for a in rest if a not in ("-y", "--yes")]
    else:  # pip compiles bytecode unless told not to; uv only when asked
        compile_ = "--no-compile" not in rest
        rest = [a for a in rest if a not in ("--compile", "--no-compile", "--no-cache-dir")]
        rest = (["--compile-bytecode"] if compile_ else []) + rest
        # pip builds a local project into a wheel even with --only-binary=:all:; uv refuses
        # to: build it first, as pip does, and install the wheel.
        import subprocess, tempfile
        for i, arg in enumerate(rest):
            if arg.startswith((".", "/")) and os.path.isdir(arg) and rest[i - 1][:2] not in (
                "-c", "-f", "--"
            ):
                out = tempfile.mkdtemp(prefix="replay-wheel-")
                subprocess.run([UV, "build", "-q", "--wheel", "--out-dir", out, arg], check=True)
                rest[i] = os.path.join(out, next(n for n in os.listdir(out) if n.endswith(".whl")))
    os.execv(UV, [UV, "pip", verb, "--python", TARGET, *rest])
os.execv(TARGET, [TARGET, *args])
'''


class ReplayError(RuntimeError):
    """A step of the Dockerfile failed, or cannot be replayed."""


@dataclasses.dataclass(frozen=True)
class ReplayedImage:
    python: Path  # the image's interpreter (a virtual environment's)
    workdir: Path  # the final stage's WORKDIR, under root
    root: Path  # the final stage's file system
    env: dict[str, str]  # the final stage's ENV
    user: str | None  # the final stage's USER (None: root)
    skipped: list[str]  # system RUN lines not replayed
    stage_roots: dict[str, Path]  # every stage's file system, by name (or index)

    def to_json(self) -> str:
        def plain(value):
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            return str(value) if isinstance(value, Path) else value

        return json.dumps({k: plain(v) for k, v in vars(self).items()})


def ignore_patterns(context: Path) -> list[tuple[bool, str]]:
    path = context / ".dockerignore"
    if not path.is_file():
        return []
    patterns = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negated = line.startswith("!")
            patterns.append((negated, line.lstrip("!").strip("/")))
    return patterns


def ignored(relative: str, patterns: list[tuple[bool, str]]) -> bool:
    """``.dockerignore`` semantics for the patterns used here (``**/`` prefixes, ``!``)."""
    ignored = False
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for negated, pattern in patterns:
        bare = pattern[3:] if pattern.startswith("**/") else None
        hit = any(fnmatch.fnmatchcase(p, pattern) for p in prefixes) or (
            bare is not None and any(fnmatch.fnmatchcase(part, bare) for part in parts)
        )
        if hit:
            ignored = not negated
    return ignored


class _Stage:
    def __init__(self, index: int, stage: dockerfile.Stage, directory: Path):
        self.stage = stage
        self.home = directory / f"stage-{index}-{stage.name or 'final'}"
        self.root = self.home / "root"
        self.root.mkdir(parents=True)
        self.workdir = PurePosixPath("/")
        self.env: dict[str, str] = {}  # ENV: the image's, at build and run time
        self.args: dict[str, str] = {}  # ARG: at build time only
        self.user: str | None = None

    def host(self, image_path: str | PurePosixPath) -> Path:
        """Where an absolute path of the stage's file system is here."""
        path = PurePosixPath(self.workdir, image_path)
        return self.root.joinpath(*path.parts[1:])


class Replay:
    """One replay of a Dockerfile (see the module's docstring)."""

    def __init__(self, text: str, context: Path, directory: Path, variant: str, base_python: str):
        self.stages = dockerfile.parse(text)
        self.context = context.resolve()
        self.directory = directory.resolve()
        self.variant = variant
        self.base_python = base_python
        self.uv = _find_uv()
        self.ignore = ignore_patterns(self.context)
        self.skipped: list[str] = []
        # Absolute paths the Dockerfile creates: RUN lines see them under a stage's root.
        tops = set()
        for stage in self.stages:
            for instruction in stage.instructions:
                if instruction.keyword == "WORKDIR":
                    tops.add(PurePosixPath(instruction.arguments).parts[1:2])
                elif instruction.keyword == "COPY":
                    _, _, destination = dockerfile.copy_arguments(instruction)
                    if destination.startswith("/"):
                        tops.add(PurePosixPath(destination).parts[1:2])
        names = sorted(t[0] for t in tops if t)
        self._paths = (
            re.compile(r"(?<![\w.:/$-])/(?:" + "|".join(map(re.escape, names)) + r")\b")
            if names
            else None
        )

    def run(self) -> ReplayedImage:
        replayed: dict[str, _Stage] = {}
        stage = None
        for index, definition in enumerate(self.stages):
            stage = _Stage(index, definition, self.directory)
            python = self._interpreter(stage, final=index == len(self.stages) - 1)
            for instruction in definition.instructions:
                self._step(stage, instruction, replayed, python)
            replayed[definition.name or str(index)] = stage
        assert stage is not None
        return ReplayedImage(
            python=stage.home / "python" / "bin" / "python",
            workdir=stage.host(stage.workdir),
            root=stage.root,
            env=dict(stage.env),
            user=stage.user,
            skipped=self.skipped,
            stage_roots={name: replayed_stage.root for name, replayed_stage in replayed.items()},
        )

    def _interpreter(self, stage: _Stage, final: bool) -> Path:
        """A fresh environment for the stage's ``python``, and the shim that runs it."""
        venv = stage.home / "python"
        if final and self.uv:
            command = [self.uv, "venv", "-q", "--no-python-downloads", "--python"]
            _check([*command, self.base_python, str(venv)], "create the image's environment")
        else:
            _check([self.base_python, "-m", "venv", str(venv)], "create an environment")
        shims = stage.home / "bin"
        shims.mkdir()
        for name in ("python", "python3"):
            shim = shims / name
            shim.write_text(
                _PIP_SHIM.format(
                    host_python=sys.executable,
                    target=str(venv / "bin" / "python"),
                    uv=self.uv if final else None,
                )
            )
            shim.chmod(0o755)
        return shims

    def _step(self, stage: _Stage, instruction, replayed: dict[str, _Stage], shims: Path):
        keyword = instruction.keyword
        if keyword == "WORKDIR":
            stage.workdir = PurePosixPath(stage.workdir, instruction.arguments)
            stage.host(stage.workdir).mkdir(parents=True, exist_ok=True)
        elif keyword == "ENV":
            stage.env.update(dockerfile.assignments(instruction))
        elif keyword == "ARG":
            for name, default in dockerfile.assignments(instruction).items():
                stage.args[name] = self.variant if name == "ACCELERATOR" else default
        elif keyword == "USER":
            stage.user = instruction.arguments
        elif keyword == "COPY":
            self._copy(stage, instruction, replayed)
        elif keyword == "RUN":
            self._run(stage, instruction, shims)
        elif keyword not in ("ENTRYPOINT", "CMD", "LABEL", "EXPOSE"):
            raise ReplayError(f"line {instruction.line}: {keyword} is not replayed")

    def _copy(self, stage: _Stage, instruction, replayed: dict[str, _Stage]) -> None:
        source_stage, sources, destination = dockerfile.copy_arguments(instruction)
        target = stage.host(destination)
        into_directory = destination.endswith("/") or len(sources) > 1
        for source in sources:
            if source_stage is not None:
                origin = replayed[source_stage].host(source)
            else:
                origin = self.context / source
            if not origin.exists():
                raise ReplayError(f"line {instruction.line}: COPY {source}: no such file")
            if origin.is_dir():  # Docker copies a directory's contents
                self._copy_tree(origin, target, context_copy=source_stage is None)
            else:
                path = target / origin.name if into_directory else target
                path.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, path)

    def _copy_tree(self, origin: Path, target: Path, context_copy: bool) -> None:
        for path in sorted(origin.rglob("*")):
            if context_copy:
                relative = path.relative_to(self.context).as_posix()
                if ignored(relative, self.ignore):
                    continue
            destination = target / path.relative_to(origin)
            if path.is_dir():
                destination.mkdir(parents=True, exist_ok=True)
            else:
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, destination)
        target.mkdir(parents=True, exist_ok=True)

    def _run(self, stage: _Stage, instruction, shims: Path) -> None:
        commands = dockerfile.shell_commands(instruction.arguments)
        system = [words[0] in SYSTEM_COMMANDS for words in commands]
        if all(system):
            self.skipped.append(instruction.arguments)
            return
        offending = [w[0] for w, s in zip(commands, system) if s and w[0] != "rm"]
        if offending:
            raise ReplayError(
                f"line {instruction.line}: RUN mixes system commands ({', '.join(offending)}) "
                "with others; give them a RUN line of their own"
            )
        script = instruction.arguments
        if self._paths is not None:
            script = self._paths.sub(lambda m: str(stage.root) + m.group(0), script)
        env = {k: v for k, v in os.environ.items() if k not in _HOST_ONLY}
        env.update(stage.args)
        env.update(stage.env)
        # A docker build starts every stage with an empty pip cache: so does the replay, so
        # that a sdist that only builds from a warm cache fails here as it would there.
        # (The final stage's installs are binary-only; uv's cache only saves downloads.)
        env["PIP_CACHE_DIR"] = str(stage.home / "pip-cache")
        env["PATH"] = f"{shims}{os.pathsep}{env.get('PATH', '')}"
        cwd = stage.host(stage.workdir)
        cwd.mkdir(parents=True, exist_ok=True)
        process = subprocess.run(
            ["/bin/sh", "-c", script], cwd=cwd, env=env, capture_output=True, text=True
        )
        if process.returncode != 0:
            tail = (process.stderr or process.stdout).strip().splitlines()[-12:]
            raise ReplayError(
                f"line {instruction.line}: RUN failed with exit code {process.returncode}:\n"
                + "\n".join(tail)
            )


def _find_uv() -> str | None:
    beside = Path(sys.executable).with_name("uv")
    return str(beside) if beside.is_file() else shutil.which("uv")


def _check(command: list[str], what: str) -> None:
    process = subprocess.run(command, capture_output=True, text=True)
    if process.returncode != 0:
        raise ReplayError(f"could not {what}: {process.stderr.strip()[-2000:]}")


def base_interpreter() -> str:
    """The base Python of this environment (the replayed stages start from a bare one)."""
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def replay(
    dockerfile_path: Path,
    context: Path,
    directory: Path,
    variant: str = "cpu",
    base_python: str | None = None,
) -> ReplayedImage:
    """Replays ``dockerfile_path`` (build context ``context``) into ``directory`` (empty)."""
    directory.mkdir(parents=True, exist_ok=True)
    if any(directory.iterdir()):
        raise ReplayError(f"{directory} is not empty")
    text = dockerfile_path.read_text()
    return Replay(text, context, directory, variant, base_python or base_interpreter()).run()


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parents[1]  # kubeflow/, beside the Dockerfile
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help="an empty directory for the replay")
    parser.add_argument("--dockerfile", type=Path, default=here / "Dockerfile")
    parser.add_argument("--context", type=Path, default=here.parent, help="the build context")
    parser.add_argument("--variant", choices=("cpu", "gpu", "tpu"), default="cpu")
    args = parser.parse_args(argv)
    try:
        image = replay(args.dockerfile, args.context, args.directory, args.variant)
    except ReplayError as error:
        print(f"image_replay: error: {error}", file=sys.stderr)
        return 1
    print(image.to_json())
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in image.env.items())
    print(
        f"# run a compiled spec in this layout:\n{env} tfx-accum run-compiled SPEC "
        f"--image-python {image.python} --workdir {image.workdir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
