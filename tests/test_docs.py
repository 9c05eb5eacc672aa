"""The README and docs/: a front door under 300 lines, links that resolve, and no
figure that is not a committed bench output (every generated block fresh, every measured
figure in the prose found in ``bench/results/``)."""

from __future__ import annotations

import functools
import re

import pytest

from bench.figures import BLOCK, RESULTS, ROOT, documents, render

# A figure with a unit of time, memory or ratio (seconds, GiB, "15.6x"; not "4 x 32").
FIGURE = re.compile(
    r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)\s?(s|ms|min|minutes|GiB|MiB|MB|x)(?!\w)(?!\s?\d)"
)
# Settings, not measurements: each is a threshold or a limit in the code, named where it lives.
SETTINGS = {
    ("64", "MiB"),  # tfx_accum.pipeline.beam_args: in-process Beam below this much input
    ("128", "MiB"),  # tfx_accum.pipeline.beam_args: one Beam worker per this much input
    ("60", "s"),  # tfx_accum.pipeline.kubeflow.spec: the retry policy's first back-off
    ("600", "s"),  # tfx_accum.pipeline.kubeflow.spec: its longest back-off
}


@functools.cache
def _measured() -> frozenset[tuple[str, str]]:
    """Every figure with a unit in the committed bench outputs, read once per session."""
    return frozenset(
        (m[1], m[2]) for output in RESULTS.glob("*.md") for m in FIGURE.finditer(output.read_text())
    )


def _prose(text: str) -> str:
    """The text a reader takes as claims: without generated blocks, code and code spans."""
    text = BLOCK.sub("", text)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def test_the_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 300
    for page in ("model", "pipeline", "data", "search", "tfx", "reliability", "performance"):
        assert f"(docs/{page}.md)" in readme, page
    assert "(kubeflow/README.md)" in readme


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_generated_block_is_fresh(path):
    text = path.read_text()
    for match in BLOCK.finditer(text):
        assert match[4] == render(match[2], match[3]), (
            f"{path.relative_to(ROOT)}: the {match[2]}:{match[3]} block is stale; "
            "regenerate with python -m bench.figures"
        )


def test_the_option_tables_are_in_the_docs():
    blocks = {(m[2], m[3]) for path in documents() for m in BLOCK.finditer(path.read_text())}
    assert {("options", "run"), ("options", "compile"), ("bench", "headline")} <= blocks


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
        if "://" not in target:
            assert (path.parent / target).exists(), f"{path.relative_to(ROOT)}: {target}"


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_measured_figure_is_a_committed_bench_output(path):
    measured = _measured()
    prose = _prose(path.read_text())
    unknown = [m[0] for m in FIGURE.finditer(prose) if (m[1], m[2]) not in measured | SETTINGS]
    assert not unknown, (
        f"{path.relative_to(ROOT)}: figures found in no bench/results/*.md: {unknown}; "
        "embed the bench's table (<!-- bench:NAME -->) or cite it without the number"
    )


def test_the_figure_check_sees_a_stale_figure(tmp_path):
    assert [
        m[0] for m in FIGURE.finditer(_prose("took 249.9 s, 3.1x; `12 s` in code; 4 x 32"))
    ] == [
        "249.9 s",
        "3.1x",
    ]
