"""The figures of the README and docs/, embedded from the committed bench outputs.

``python -m bench.figures`` rewrites every generated block in ``README.md``, ``docs/*.md`` and
``kubeflow/README.md``; ``--check`` only says which are stale (exit 1). ``tests/test_docs.py``
runs the check, so a bench rerun whose results are committed without the docs fails CI.

Blocks: ``<!-- bench:NAME -->`` ... ``<!-- /bench:NAME -->`` holds ``bench/results/NAME.md``
(its title dropped, its headings moved under the page's); ``NAME`` ``headline`` is the
README's table of headline figures, made from the JSON outputs. The option tables
(``<!-- options:run -->``) come from the parser (``bench/options_table.py``).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
BLOCK = re.compile(r"(<!-- (bench|options):([\w-]+) -->\n)(.*?)(<!-- /\2:\3 -->)", re.S)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "kubeflow/README.md"]


def bench_table(name: str) -> str:
    """``bench/results/NAME.md`` without its title, its ``##`` headings as ``####``."""
    lines = (RESULTS / f"{name}.md").read_text().strip().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    lines = [("##" + line) if line.startswith("#") else line for line in lines]
    return "\n".join(lines).strip() + "\n"


def _load(name: str):
    return json.loads((RESULTS / f"{name}.json").read_text())


def headline() -> str:
    """The README's headline figures, each from a committed bench output."""
    bench, images, scale = _load("bench"), _load("images"), _load("scale")
    pipeline, search = _load("pipeline"), _load("search")
    diff = {e["method"]: e["max_weight_diff"] for e in bench["exactness"]}
    speed = {
        (s["model"], s["jit_compile"]): s["ratio"]["plain_big"]["median"] for s in bench["speed"]
    }
    dense = [i for i in images if i["effective_batch"] == images[0]["effective_batch"]]
    big = max((s for s in scale if s["columns"] <= 4), key=lambda s: s["rows"])
    default = pipeline["runs"]["default"]
    distinct = next(d for d in search["distinct"] if d["max_trials"] == 8)
    quality = _load("search_quality")
    digits = quality["datasets"]["digits"]["methods"]
    ours = digits["tfx_accum"]["median_curve"]
    theirs = digits["keras_tuner_random"]["median_curve"]
    memory = "; ".join(
        f"k={i['accumulation_steps']}: {i['increase_mib']:,} MiB, {i['seconds_per_update']:.2f} s"
        for i in dense
    )
    rows = [
        (
            "Exact",
            "max weight difference from plain `fit` on the whole batch, 2 epochs",
            f"{diff['tfx_accum']:.2e} (Keras 3 optimizer option {diff['keras_option']:.2e}, "
            f"StackOverflow override {diff['stackoverflow']:.2e})",
            "[bench.md](bench/results/bench.md)",
        ),
        (
            "Memory",
            f"DenseNet121 at an effective batch of {dense[0]['effective_batch']:,}: "
            "peak memory increase, time per update",
            memory,
            "[images.md](bench/results/images.md)",
        ),
        (
            "Speed",
            "time per epoch against plain `fit` at the same updates (median, CPU)",
            f"conv {speed[('conv', False)]:.2f}x, dense {speed[('dense', False)]:.2f}x "
            f"(XLA: {speed[('conv', True)]:.2f}x, {speed[('dense', True)]:.2f}x)",
            "[bench.md](bench/results/bench.md)",
        ),
        (
            "Scale",
            f"{big['rows']:,} rows x {big['columns']} columns end to end, 2 trials",
            f"{big['pipeline']['wall_s']:.0f} s, {big['ratio_wall']:.1f}x a plain process; "
            f"peak {big['pipeline']['peak_gib']:.1f} GiB",
            "[scale.md](bench/results/scale.md)",
        ),
        (
            "Pipeline",
            "the default run on the embedded digits (8 trials) against the same "
            "search in one plain process",
            f"{default['wall_s']:.0f} s against {pipeline['plain']['wall_s']:.0f} s "
            f"({default['wall_s'] / pipeline['plain']['wall_s']:.2f}x)",
            "[pipeline.md](bench/results/pipeline.md)",
        ),
        (
            "Search",
            "distinct models trained by the default 8-trial Bayesian search",
            f"{distinct['distinct']['distinct_models']} of 8 (Keras Tuner as proposed: "
            f"{distinct['as_proposed']['distinct_models']} of 8)",
            "[search.md](bench/results/search.md)",
        ),
        (
            "Search quality",
            "the digits: best validation accuracy after 1 and 8 trials, median of "
            f"{len(quality['settings']['seeds'])} seeds, against Keras Tuner's RandomSearch",
            f"{ours[0]:.4f} and {ours[-1]:.4f} against {theirs[0]:.4f} and {theirs[-1]:.4f}",
            "[search_quality.md](bench/results/search_quality.md)",
        ),
    ]
    table = ["| | what | measured (2 CPU cores) | output |", "| --- | --- | --- | --- |"]
    table += [f"| **{a}** | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(table) + "\n"


def options_table(command: str) -> str:
    from bench.options_table import options_markdown

    return options_markdown(command) + "\n"


def render(kind: str, name: str) -> str:
    makers: dict[str, Callable[[str], str]] = {"bench": bench_table, "options": options_table}
    if kind == "bench" and name == "headline":
        return headline()
    return makers[kind](name)


def refreshed(text: str) -> str:
    return BLOCK.sub(lambda m: m[1] + render(m[2], m[3]) + m[5], text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    stale = []
    for path in documents():
        text = path.read_text()
        new = refreshed(text)
        if new != text:
            stale.append(path.relative_to(ROOT))
            if "--check" not in argv:
                path.write_text(new)
    verb = "stale" if "--check" in argv else "rewritten"
    for path in stale:
        print(f"{path}: {verb} (python -m bench.figures)")
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main())
