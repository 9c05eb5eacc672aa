"""Reads ``kubeflow/Dockerfile`` as Docker does: stages, instructions, shell commands.

Two tools read the image's definition without Docker, and both read it here:
``check_image_wheels`` (which distributions each variant installs) and ``image_replay``
(the install steps run into a fresh environment). Only what this project's Dockerfile
uses is understood: ``FROM``, ``ARG``, ``ENV``, ``WORKDIR``, ``COPY`` (with ``--from``),
``RUN`` (shell form), ``USER``, ``ENTRYPOINT``/``CMD``; line continuations and comment
lines inside them are handled as Docker handles them.

Example::

    stages = parse(Path("kubeflow/Dockerfile").read_text())
    final = stages[-1]
    final.last("WORKDIR"), final.last("USER")   # "/home/tfx", "tfx"
"""

from __future__ import annotations

import dataclasses
import shlex


@dataclasses.dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: RUN, COPY, ...
    arguments: str  # the rest of the instruction, continuation lines joined
    line: int  # where it starts (1-based)

    def words(self) -> list[str]:
        """The arguments split as a shell would (for COPY, ENV, ARG, USER, WORKDIR)."""
        return shlex.split(self.arguments)


@dataclasses.dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> str | None:
        """The arguments of the stage's last ``keyword`` instruction (None: there is none)."""
        found = self.all(keyword)
        return found[-1].arguments if found else None


def instructions(text: str) -> list[Instruction]:
    """Every instruction of a Dockerfile, in order."""
    result: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):  # a comment inside a continued instruction
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending.append(line[:-1].strip())
            continue
        pending.append(line)
        joined = " ".join(part for part in pending if part)
        pending = []
        keyword, _, arguments = joined.partition(" ")
        result.append(Instruction(keyword.upper(), arguments.strip(), start))
    if pending:
        raise ValueError(f"line {start}: the instruction ends with a line continuation")
    return result


def parse(text: str) -> list[Stage]:
    """The stages of a Dockerfile (``ARG`` before the first ``FROM`` belongs to none)."""
    stages: list[Stage] = []
    for instruction in instructions(text):
        if instruction.keyword == "FROM":
            words = instruction.words()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name, []))
        elif stages:
            stages[-1].instructions.append(instruction)
    if not stages:
        raise ValueError("the Dockerfile has no FROM instruction")
    return stages


def shell_commands(text: str) -> list[list[str]]:
    """The simple commands of a shell line: its words, split at ``&&``, ``;``, ``|``."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    commands, words = [], []
    for token in lexer:
        if token and set(token) <= set(";&|"):
            if words:
                commands.append(words)
            words = []
        else:
            words.append(token)
    if words:
        commands.append(words)
    return commands


def copy_arguments(instruction: Instruction) -> tuple[str | None, list[str], str]:
    """``(from_stage, sources, destination)`` of a ``COPY``."""
    words = instruction.words()
    source_stage = None
    while words and words[0].startswith("--"):
        flag = words.pop(0)
        if flag.startswith("--from="):
            source_stage = flag.split("=", 1)[1]
    if len(words) < 2:
        raise ValueError(f"line {instruction.line}: COPY needs a source and a destination")
    return source_stage, words[:-1], words[-1]


def assignments(instruction: Instruction) -> dict[str, str]:
    """``NAME=VALUE`` pairs of an ``ENV`` or ``ARG`` (an ``ARG NAME`` without one: "")."""
    pairs = {}
    for word in instruction.words():
        name, _, value = word.partition("=")
        pairs[name] = value
    return pairs
