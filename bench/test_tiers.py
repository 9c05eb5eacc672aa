"""How long the test tiers take: ``python -m bench.test_tiers [--rounds N] [--full]``.

The fast tier (``pytest -m "not e2e" -n 2``, the inner loop) is run ``--rounds`` times in
this checkout; ``--full`` also times CI itself (``.ci/run``) on a fresh clone of ``HEAD``
with empty pip and uv caches, as CI starts. Writes ``bench/results/tests.json`` and
``tests.md``, which the README embeds (``python -m bench.figures``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
FAST = [sys.executable, "-m", "pytest", "-m", "not e2e", "-n", "2", "-q", "-p", "no:cacheprovider"]
SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?)")


def _counts(output: str) -> dict[str, int]:
    last = [line for line in output.splitlines() if " in " in line and "passed" in line]
    return {kind: int(n) for n, kind in SUMMARY.findall(last[-1] if last else "")}


def _timed(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> dict:
    # The run's whole output goes to the log as it comes (follow it with tail -f; after a
    # failure it holds the reason): the last run's only.
    log = Path(tempfile.gettempdir()) / "tfx-accum-test-tiers.log"
    print(f"{' '.join(command)} in {cwd}: output in {log}", flush=True)
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    output = log.read_text(errors="replace")
    return {
        "seconds": round(time.monotonic() - start, 1),
        "exit": proc.returncode,
        "counts": _counts(output),
        # (pytest's -ra summary names them: a failure in one round only is order or timing)
        "failed_tests": re.findall(r"^(?:FAILED|ERROR) (\S+)", output, re.M),
    }


def _full() -> dict:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = {
            **os.environ,
            "PIP_CACHE_DIR": f"{tmp}/pip",
            "UV_CACHE_DIR": f"{tmp}/uv",
            "CI": "true",
        }
        result = _timed(["bash", ".ci/run"], clone, env)
    return {"commit": commit, **result}


def _markdown(report: dict) -> str:
    rows = ["| tier | command | tests | wall time | exit |", "| --- | --- | --- | --- | --- |"]
    for run in report["fast"]:
        c = run["counts"]
        rows.append(
            f'| fast | `pytest -m "not e2e" -n 2` | {c.get("passed", 0)} passed, '
            f"{c.get('failed', 0)} failed | {run['seconds'] / 60:.1f} min | {run['exit']} |"
        )
    full = report.get("full")
    if full:
        c = full["counts"]
        rows.append(
            f"| whole CI (fresh clone of {full['commit']}, empty caches) | `.ci/run` | "
            f"{c.get('passed', 0)} passed, {c.get('failed', 0)} failed (last stage) | "
            f"{full['seconds'] / 60:.1f} min | {full['exit']} |"
        )
    return (
        "# Test tiers (`python -m bench.test_tiers`)\n\n"
        f"Machine: {os.cpu_count()} CPU cores. {report['date']}.\n\n" + "\n".join(rows) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="fast-tier runs (default 1; 0 keeps the recorded ones)",
    )
    parser.add_argument("--full", action="store_true", help="also time .ci/run on a fresh clone")
    parser.add_argument("--keep-full", action="store_true", help="keep the recorded CI run")
    args = parser.parse_args(argv)
    previous = (
        json.loads((RESULTS / "tests.json").read_text())
        if (RESULTS / "tests.json").exists()
        else {}
    )
    report = {"date": time.strftime("%Y-%m-%d"), "fast": []}
    if args.rounds == 0:  # only the CI run: the fast tier's recorded rounds stay
        report["fast"] = previous.get("fast", [])
    for _ in range(args.rounds):
        report["fast"].append(_timed(FAST, ROOT))
        print(f"fast tier: {report['fast'][-1]}", flush=True)
    if args.full:
        report["full"] = _full()
        print(f"CI: {report['full']}", flush=True)
    elif args.keep_full and previous.get("full"):
        report["full"] = previous["full"]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tests.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "tests.md").write_text(_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
