"""Wall time of the local pipeline as a user meets it, component by component.

Runs, each as its own ``tfx-accum run`` process on the embedded digits:

1. the default pipeline (tuning on, default budget) in a fresh output directory;
2. the same command again (served from the cache);
3. ``--no-tune`` in a fresh output directory;
4. the floor: the same work done plainly in one Python process (``bench/plain_search.py``:
   the digits, an 8-trial Keras Tuner search over the same space and budget with the same GA
   model, then fit, evaluate, export), so that pipeline / plain is measured in the same run;
5. the cached re-run's floor: a process that only imports TFX's own local runner
   (``tfx.orchestration.local.local_dag_runner``), which any run must import before TFX's
   cache can be asked, and one that only imports TensorFlow, each timed three times
   alternately with three more cached re-runs, so that cached re-run / import is a ratio
   of the same minutes;

and reports each one's wall time (process start to exit), the time from the summary's
last line to the process's exit, and the per-component times the run printed; with
``--setup``, also the first set-up of a fresh clone (``scripts/setup_env.sh`` into a new
virtual environment). Run with ``python -m bench.pipeline [--setup]``; the figures go to
``bench/results/pipeline.md`` and ``pipeline.json``, the default run's ``trials.csv`` beside
them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMPONENT = re.compile(
    r"^\[pipeline\] (\w+) (done|served from cache) \(([\d.]+) s(?:, peak memory ([\d.]+) GiB)?\)"
)
TRIAL = re.compile(r"^\[tuner\] trial \d+: .* -> val_accuracy=([\d.]+)")
ACCURACY = re.compile(r"^evaluation accuracy: ([\d.]+)")


def children_cpu_s() -> float:
    """CPU seconds (user + system) of every child process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def plain_run(trials: int = 8) -> dict:
    """Runs ``bench/plain_search.py`` in a process of its own; its wall and CPU time."""
    cpu, start = children_cpu_s(), time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.plain_search", "--trials", str(trials)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError("bench.plain_search failed:\n" + proc.stderr[-3000:])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "wall_s": wall,
        "cpu_s": children_cpu_s() - cpu,
        "phases_s": result["phases_s"],
        "eval_accuracy": result["eval_accuracy"],
        "trials": result["trials"],
    }


IMPORT_FLOORS = {
    "TFX's local runner": "tfx.orchestration.local.local_dag_runner",
    "TensorFlow": "tensorflow",
}


def import_wall_s(module: str) -> float:
    """Wall time of a fresh interpreter that imports MODULE and exits.

    It exits with ``os._exit``, as ``tfx-accum run`` does, so that the interpreter's
    teardown (1-3 s after TensorFlow) is not counted as import.
    """
    start = time.monotonic()
    code = f"import {module}, os; os._exit(0)"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.monotonic() - start


def cached_floor(cached_args: list[str], rounds: int = 3) -> dict:
    """Medians of ROUNDS alternating cached re-runs and bare imports (``IMPORT_FLOORS``).

    Alternating puts each ratio's two sides in the same minutes of a noisy machine.
    """
    walls: dict[str, list[float]] = {"cached re-run": []}
    walls.update({name: [] for name in IMPORT_FLOORS})
    for _ in range(rounds):
        walls["cached re-run"].append(timed_run(cached_args)["wall_s"])
        for name, module in IMPORT_FLOORS.items():
            walls[name].append(import_wall_s(module))
    return {name: {"median_s": statistics.median(w), "runs_s": w} for name, w in walls.items()}


def timed_run(args: list[str], env: dict | None = None) -> dict:
    """Runs ``tfx-accum run ARGS``; times from start to exit and from summary to exit."""
    cpu, start = children_cpu_s(), time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfx_accum.pipeline", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    components: dict[str, float] = {}
    trials: list[float] = []
    accuracy = summary_at = None
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if match := COMPONENT.match(line):
            components[match.group(1)] = float(match.group(3))
        elif match := TRIAL.match(line):
            trials.append(float(match.group(1)))
        elif match := ACCURACY.match(line):
            accuracy = float(match.group(1))
        elif line.startswith("wall time: "):
            summary_at = time.monotonic()
    stderr = proc.stderr.read()
    proc.wait()
    end = time.monotonic()
    if proc.returncode != 0:
        raise RuntimeError(f"run {args} failed:\n" + "\n".join(lines[-20:]) + stderr[-2000:])
    return {
        "args": args,
        "wall_s": end - start,
        "cpu_s": children_cpu_s() - cpu,
        "exit_after_summary_s": end - summary_at if summary_at else None,
        "components_s": components,
        "trials": len(trials),
        "best_trial_accuracy": max(trials) if trials else None,
        "eval_accuracy": accuracy,
        "console_lines": len(lines),
    }


def setup_time() -> float:
    """A fresh clone's first ``scripts/setup_env.sh`` (package caches as they are)."""
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        start = time.monotonic()
        subprocess.run(["bash", "scripts/setup_env.sh"], cwd=clone, check=True)
        return time.monotonic() - start


def to_markdown(result: dict) -> str:
    runs = result["runs"]
    names = list(runs)
    components = sorted({c for r in runs.values() for c in r["components_s"]}, key=_order)
    lines = [
        "| component | " + " | ".join(names) + " |",
        "| --- | " + " | ".join("---" for _ in names) + " |",
    ]
    for component in components:
        cells = [
            f"{runs[n]['components_s'][component]:.1f}"
            if component in runs[n]["components_s"]
            else "-"
            for n in names
        ]
        lines.append(f"| {component} | " + " | ".join(cells) + " |")
    lines.append(
        "| **wall time (process start to exit)** | "
        + " | ".join(f"**{runs[n]['wall_s']:.0f} s**" for n in names)
        + " |"
    )
    lines.append(
        "| exit after the summary | "
        + " | ".join(f"{runs[n]['exit_after_summary_s']:.1f} s" for n in names)
        + " |"
    )
    lines.append(
        "| eval accuracy | "
        + " | ".join(
            f"{runs[n]['eval_accuracy']:.4f}" if runs[n]["eval_accuracy"] else "-" for n in names
        )
        + " |"
    )
    lines.append(
        "| CPU time (user + system) | "
        + " | ".join(f"{runs[n]['cpu_s']:.0f} s" for n in names)
        + " |"
    )
    plain = result.get("plain")
    if plain:
        default = runs["default"]
        lines += [
            "",
            f"The same work plainly in one process (`python -m bench.plain_search`, "
            f"{plain['trials']} trials): **{plain['wall_s']:.0f} s** wall, "
            f"{plain['cpu_s']:.0f} CPU-s, eval accuracy {plain['eval_accuracy']:.4f}. "
            f"Pipeline / plain: **{default['wall_s'] / plain['wall_s']:.2f}x** wall, "
            f"**{default['cpu_s'] / plain['cpu_s']:.2f}x** CPU.",
        ]
    floor = result.get("cached_floor")
    if floor:
        cached = floor["cached re-run"]["median_s"]
        runner = floor["TFX's local runner"]["median_s"]
        rounds = len(floor["cached re-run"]["runs_s"])
        lines += [
            "",
            f"The cached re-run's floor (medians of {rounds}, alternating): the cached re-run "
            f"**{cached:.1f} s**; a process that only imports TFX's local runner "
            f"(`import tfx.orchestration.local.local_dag_runner`) **{runner:.1f} s**; one "
            f"that only imports TensorFlow {floor['TensorFlow']['median_s']:.1f} s. "
            f"Cached re-run / runner import: **{cached / runner:.2f}x**.",
        ]
    if result.get("setup_s") is not None:
        lines.append("")
        lines.append(
            f"First set-up of a fresh clone (`scripts/setup_env.sh`): **{result['setup_s']:.0f} s**"
        )
    return "\n".join(lines)


ORDER = (
    "CsvExampleGen",
    "StatisticsGen",
    "SchemaGen",
    "ExampleValidator",
    "Tuner",
    "Trainer",
    "Evaluator",
    "Pusher",
)


def _order(name: str) -> int:
    return ORDER.index(name) if name in ORDER else len(ORDER)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__)
    parser.add_argument("--setup", action="store_true", help="also time a fresh clone's set-up")
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="tfx-accum-bench-"))
    try:
        runs = {}
        print("[bench] default pipeline (fresh) ...", flush=True)
        runs["default"] = timed_run(["--output-dir", str(work / "default")])
        # The search's trials (score against effective batch: README, "The costs of
        # accumulation").
        args.output.mkdir(parents=True, exist_ok=True)
        shutil.copy(work / "default" / "trials.csv", args.output / "trials.csv")
        print("[bench] default pipeline again (cached) ...", flush=True)
        runs["cached re-run"] = timed_run(["--output-dir", str(work / "default")])
        print("[bench] --no-tune (fresh) ...", flush=True)
        runs["--no-tune"] = timed_run(["--output-dir", str(work / "no-tune"), "--no-tune"])
        print("[bench] the same work plainly in one process ...", flush=True)
        plain = plain_run()
        print("[bench] cached re-runs against bare imports ...", flush=True)
        floor = cached_floor(["--output-dir", str(work / "default")])
        result = {
            "runs": runs,
            "plain": plain,
            "cached_floor": floor,
            "setup_s": setup_time() if args.setup else None,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.output.mkdir(parents=True, exist_ok=True)
    md = to_markdown(result)
    (args.output / "pipeline.md").write_text(md + "\n")
    (args.output / "pipeline.json").write_text(json.dumps(result, indent=2) + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
