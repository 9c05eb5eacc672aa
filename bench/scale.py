"""Scale: the pipeline against a plain process doing the same work, as rows and columns grow.

For each shape (rows x numeric columns, a 10-class label from a fixed linear rule), it
writes the CSV, then in the same run:

1. ``tfx-accum run`` on it (a search of 2 trials, the default model and budget): its wall
   and CPU seconds, the largest resident memory of any of its processes (Beam's workers
   included), rows/s, and every component's wall time and peak memory as the run printed
   them;
2. ``python -m bench.scale_plain`` on the same CSV and the run's ``trials.csv``: the same
   work in one plain process (pandas, the same model, the same trials' configurations and
   examples, the best one trained for the best trial's examples, the eval split scored),
   measured the same way.

The ratio pipeline / plain is of the same minutes on the same machine. Run with
``python -m bench.scale [--shapes 1000000x4 2000000x4 1000000x64 1000x5000]``; the figures
go to ``bench/results/scale.md`` and ``scale.json``.
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
SEARCH = ["--max-trials", "2", "--accuracy-threshold", "0", "--allow-unblessed"]
DEFAULT_SHAPES = ("1000000x4", "2000000x4", "1000000x64", "1000x5000")
# Runs a command and writes its children's CPU seconds and largest resident set (KiB) as
# JSON to argv[1]: a fresh process per measurement, so the figures are this command's.
_MEASURE = (
    "import json, resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[2:]).returncode\n"
    "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "json.dump({'code': code, 'cpu_s': u.ru_utime + u.ru_stime, 'max_rss_kib': u.ru_maxrss},"
    " open(sys.argv[1], 'w'))\n"
)


def measured(command: list[str], work: Path, name: str) -> dict:
    """``command``'s wall and CPU seconds, largest resident memory, and its output."""
    figures, log = work / f"{name}.json", work / f"{name}.log"
    start = time.monotonic()
    with open(log, "w") as out:
        subprocess.run(
            [sys.executable, "-c", _MEASURE, str(figures), sys.executable, *command],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
    wall = time.monotonic() - start
    result = json.loads(figures.read_text())
    text = log.read_text()
    if result["code"] != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{text[-3000:]}")
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(result["cpu_s"], 1),
        "peak_gib": round(result["max_rss_kib"] / 2**20, 2),
        "output": text,
    }


def run_shape(rows: int, columns: int, work: Path) -> dict:
    data = work / f"data-{rows}x{columns}"
    data.mkdir()
    write_csv(data / "rows.csv", rows, columns)
    out = work / f"out-{rows}x{columns}"
    pipeline = measured(
        ["-m", "tfx_accum.pipeline", "--output-dir", str(out), "--data-root", str(data), *SEARCH],
        work,
        f"pipeline-{rows}x{columns}",
    )
    components = {}
    for line in pipeline.pop("output").splitlines():
        if (match := COMPONENT.match(line)) and match.group(2) == "done":
            components[match.group(1)] = {
                "seconds": float(match.group(3)),
                "peak_gib": float(match.group(4)) if match.group(4) else None,
            }
    plain = measured(
        ["-m", "bench.scale_plain", str(data / "rows.csv"), str(out / "trials.csv")],
        work,
        f"plain-{rows}x{columns}",
    )
    plain["phases"] = json.loads(plain.pop("output").strip().splitlines()[-1])
    return {
        "rows": rows,
        "columns": columns,
        "csv_mb": round((data / "rows.csv").stat().st_size / 2**20),
        "pipeline": {**pipeline, "rows_per_s": round(rows / pipeline["wall_s"])},
        "plain": {**plain, "rows_per_s": round(rows / plain["wall_s"])},
        "ratio_wall": round(pipeline["wall_s"] / plain["wall_s"], 2),
        "ratio_cpu": round(pipeline["cpu_s"] / max(plain["cpu_s"], 1e-9), 2),
        "components": components,
    }


def markdown(results: list[dict]) -> str:
    lines = [
        "# Scale benchmark (`python -m bench.scale`)",
        "",
        f"Machine: {os.cpu_count()} CPU cores. Pipeline: `tfx-accum run --max-trials 2` "
        "(default model and budget). Plain: the same trials and training in one process "
        "(`bench/scale_plain.py`). Peak: the largest resident memory of any process of the "
        "run.",
        "",
        "| data | pipeline wall / CPU / peak | plain wall / CPU / peak | pipeline / plain "
        "(wall, CPU) | pipeline rows/s |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in results:
        p, q = r["pipeline"], r["plain"]
        lines.append(
            f"| {r['rows']:,} x {r['columns']:,} ({r['csv_mb']} MB) | {p['wall_s']:.0f} s / "
            f"{p['cpu_s']:.0f} s / {p['peak_gib']:.1f} GiB | {q['wall_s']:.0f} s / "
            f"{q['cpu_s']:.0f} s / {q['peak_gib']:.1f} GiB | {r['ratio_wall']}x, "
            f"{r['ratio_cpu']}x | {p['rows_per_s']:,} |"
        )
    names = list(dict.fromkeys(n for r in results for n in r["components"]))
    head = " | ".join(f"{r['rows']:,} x {r['columns']:,}" for r in results)
    lines += ["", "Per component (wall time, peak memory of the run's process):", ""]
    lines += [f"| component | {head} |", "| --- |" + " --- |" * len(results)]
    for name in names:
        cells = []
        for r in results:
            c = r["components"].get(name)
            peak = f", {c['peak_gib']:.1f} GiB" if c and c.get("peak_gib") else ""
            cells.append(f"{c['seconds']:.0f} s{peak}" if c else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _shape(text: str) -> tuple[int, int]:
    rows, columns = text.lower().split("x")
    return int(rows), int(columns)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument(
        "--shapes", nargs="+", default=[_shape(s) for s in DEFAULT_SHAPES], type=_shape
    )
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    results = []
    args.output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for rows, columns in args.shapes:
            results.append(run_shape(rows, columns, Path(tmp)))
            # Written as each shape ends: a long run stopped later keeps what it measured.
            (args.output / "scale.json").write_text(json.dumps(results, indent=2) + "\n")
            (args.output / "scale.md").write_text(markdown(results))
            print(markdown(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
