"""Streaming: the Tuner's and Trainer's peak memory does not grow with the data.

Generates a CSV of ``ROWS`` x 64 numeric features (a 10-class label from a fixed linear
rule, so there is something to learn) at two sizes, runs ``tfx-accum run`` on each with a
small search, and reports every component's wall time and the process's peak memory while
it ran, from the run's own ``[pipeline] X done (T s, peak memory M GiB)`` lines. The
components run in one process (Beam in-memory below 64 MiB of input, else worker processes
whose memory is not in the figure), so what CsvExampleGen leaves resident is in every later
component's figure. A second run per size changes only the search (``RERUN``): the data
components come from the cache, and the Tuner and Trainer run in a process that never read
the CSV, as each component does in a Kubeflow pod of its own. Their peaks there are what
they cost.

Run with ``python -m bench.streaming [--rows 200000 1000000]``; the figures go to
``bench/results/streaming.md`` and ``streaming.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.csv_tables import write_csv
from bench.pipeline import COMPONENT

ROOT = Path(__file__).resolve().parents[1]
FEATURES = 64
SEARCH = [
    "--max-trials", "2", "--tuning-epochs", "1", "--train-steps", "300",
    "--accumulation-steps-choices", "2,4", "--micro-batch-choices", "64,128",
    "--lr-min", "1e-3", "--lr-max", "1e-2", "--accuracy-threshold", "0", "--allow-unblessed",
]  # fmt: skip


RERUN = ["--lr-min", "1.5e-3"]  # a new search: Tuner and Trainer run again, data cached


def _run_cli(rows: int, work: Path, data: Path, extra: list[str]) -> tuple[dict, float]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tfx_accum.pipeline", "--output-dir", str(work / f"out-{rows}"),
         "--data-root", str(data), *SEARCH, *extra],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(
            f"run on {rows} rows failed:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"
        )
    components = {}
    for line in proc.stdout.splitlines():
        if (match := COMPONENT.match(line)) and match.group(2) != "served from cache":
            components[match.group(1)] = {
                "seconds": float(match.group(3)),
                "peak_gib": float(match.group(4)) if match.group(4) else None,
            }
    return components, time.monotonic() - start


def run(rows: int, work: Path) -> dict:
    data = work / f"data-{rows}"
    data.mkdir()
    write_csv(data / "rows.csv", rows, FEATURES)
    components, wall = _run_cli(rows, work, data, [])
    fresh, _ = _run_cli(rows, work, data, RERUN)
    for name in ("Tuner", "Trainer"):
        components[f"{name} (fresh process, data cached)"] = fresh[name]
    return {
        "rows": rows,
        "csv_mb": round((data / "rows.csv").stat().st_size / 2**20),
        "wall_s": round(wall),
        "components": components,
    }


def markdown(results: list[dict]) -> str:
    names = list(results[0]["components"])
    head = " | ".join(f"{r['rows']:,} rows ({r['csv_mb']} MB)" for r in results)
    lines = [
        "# Streaming benchmark (`python -m bench.streaming`)",
        "",
        f"Machine: {os.cpu_count()} CPU cores. Per component: wall time, and the peak "
        "memory of the process while it ran.",
        "",
        f"| component | {head} |",
        "| --- |" + " --- |" * len(results),
    ]
    for name in names:
        cells = []
        for r in results:
            c = r["components"].get(name, {})
            peak = f", {c['peak_gib']:.1f} GiB" if c.get("peak_gib") else ""
            cells.append(f"{c.get('seconds', 0):.0f} s{peak}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| **wall time** | " + " | ".join(f"**{r['wall_s']} s**" for r in results) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.streaming", description=__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[500_000, 1_000_000])
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        results = [run(rows, Path(tmp)) for rows in args.rows]
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "streaming.json").write_text(json.dumps(results, indent=2) + "\n")
    text = markdown(results)
    (args.output / "streaming.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
