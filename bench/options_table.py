"""The option tables of the docs, made from the parser itself (tests/test_docs.py checks them).

A docs generator beside bench/figures.py, its one caller: not installed with the package.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence

from tfx_accum.pipeline.cli.arguments import FIXED


def _csv(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values)


def options_markdown(command: str) -> str:
    """The option table of ``tfx-accum COMMAND`` in Markdown, made from the parser itself.

    The README's tables are this function's output (a test checks it), so every default is
    written once, here in the code. Regenerated with the docs' other blocks:
    ``python -m bench.figures``.
    """
    subparsers = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    rows = ["| option | default | meaning |", "| --- | --- | --- |"]
    for action in subparsers.choices[command]._actions:
        if not action.option_strings or action.dest == "help":
            continue
        flags = " / ".join(f"`{flag}`" for flag in action.option_strings)
        if action.choices:
            flags += " " + "\\|".join(str(c) for c in action.choices)
        if action.required:
            default = "required"
        elif isinstance(action, argparse._StoreTrueAction):
            default = "off"
        elif action.dest in dataclasses.asdict(FIXED):
            default = f"{getattr(FIXED, action.dest):g}"
        elif action.default is None:
            default = "none"
        elif isinstance(action.default, tuple):
            default = _csv(action.default)
        else:
            default = (
                f"{action.default:g}" if isinstance(action.default, float) else str(action.default)
            )
        meaning = (action.help or "").replace("%(default)s", default)
        meaning = meaning.replace("%(default)g", default).replace("|", "\\|")
        rows.append(f"| {flags} | {default} | {meaning} |")
    return "\n".join(rows)


def _parser() -> argparse.ArgumentParser:
    from tfx_accum.pipeline.cli.parser import build_parser

    return build_parser()
