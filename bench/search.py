"""The search at scale: parallel trials, and the trials that exact accumulation saves.

Runs TFX's Tuner executor (``bench/tuner_component.py``) on the embedded digits, on the
examples of one ``tfx-accum run --no-tune``:

1. **Serial vs parallel**: the same random search (8 trials; duplicate reuse off, so both
   train exactly the same trials) with ``parallel_trials`` 1 and 2. Reports the Tuner's
   wall time of each and their ratio, and checks that both found the same best.
2. **Distinct models**: the default search (Bayesian, default space) and a longer one,
   each with ``distinct_trials`` on (the default: a proposal that repeats a tried effective
   batch and learning rate is replaced) and off (Keras Tuner's proposals as they come, a
   repeat reusing its source's score). Reports the distinct models each trained, the
   repeats, the Tuner's wall time and the best score of each.

Run with ``python -m bench.search``; the figures go to ``bench/results/search.md`` and
``search.json``. On the CPU the parallel workers share the cores (each gets
``cores / workers`` TensorFlow threads); on a multi-GPU node each gets a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.tuner_component import run_tuner_component
from tfx_accum.components.config.search_space import SearchSpace
from tfx_accum.components.search.search_policy import duplicate_key

ROOT = Path(__file__).resolve().parents[1]


def _examples(directory: Path) -> Path:
    """A run directory with the digits' examples and schema (tuning off: no search here)."""
    out = directory / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfx_accum.pipeline",
            "--output-dir",
            str(out),
            "--no-tune",
            "--train-steps",
            "10",
            "--accuracy-threshold",
            "0",
            "--allow-unblessed",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the data run failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return out


def _best(result) -> dict:
    values = result.best
    return {
        "effective_batch": values["accumulation_steps"] * values["micro_batch_size"],
        "learning_rate": values["learning_rate"],
        "score": max(row["score"] for row in result.rows),
    }


def serial_vs_parallel(run_dir: Path, work: Path, workers: int, max_trials: int) -> dict:
    space = SearchSpace(algorithm="random", max_trials=max_trials, reuse_exact_duplicates=False)
    serial = run_tuner_component(run_dir, work / "serial", space, parallel_trials=1)
    parallel = run_tuner_component(run_dir, work / "parallel", space, parallel_trials=workers)
    return {
        "trials": space.max_trials,
        "workers": workers,
        "serial_s": round(serial.seconds, 1),
        "parallel_s": round(parallel.seconds, 1),
        "speedup": round(serial.seconds / parallel.seconds, 2),
        "same_trials": sorted(r["trial_id"] for r in serial.rows)
        == sorted(r["trial_id"] for r in parallel.rows),
        "serial_best": _best(serial),
        "parallel_best": _best(parallel),
    }


def distinct_models(run_dir: Path, work: Path, max_trials: int) -> dict:
    results = {}
    for distinct in (True, False):
        space = SearchSpace(max_trials=max_trials, distinct_trials=distinct)
        result = run_tuner_component(run_dir, work / f"{max_trials}-{distinct}", space)
        done = [t for t in result.trials if t["status"] == "COMPLETED"]
        models = {duplicate_key(t["hyperparameters"]["values"]) for t in done}
        results["distinct" if distinct else "as_proposed"] = {
            "seconds": round(result.seconds, 1),
            "trials": len(done),
            "distinct_models": len(models),
            "repeats": len(done) - len(models),
            "best": _best(result),
        }
    return {"max_trials": max_trials, "algorithm": "bayesian", **results}


def _markdown(report: dict) -> str:
    lines = [
        "# Search benchmark (`python -m bench.search`)",
        "",
        f"Machine: {os.cpu_count()} CPU cores, no GPU. Data: the embedded digits.",
        "",
        "## Serial vs parallel trials",
        "",
        "Random search, the same trials in both modes (reuse off). Wall time of the TFX Tuner "
        "executor, worker start-up included.",
        "",
        "| trials | serial | parallel (workers) | parallel / serial speed | same best |",
        "| --- | --- | --- | --- | --- |",
    ]
    for p in report["parallel"]:
        same = p["same_trials"] and p["serial_best"] == p["parallel_best"]
        lines.append(
            f"| {p['trials']} | {p['serial_s']} s | {p['parallel_s']} s ({p['workers']}) | "
            f"{p['speedup']}x | {'yes' if same else 'no'} |"
        )
    lines += [
        "",
        "## Distinct models per search",
        "",
        "Bayesian search, default space. Distinct: no trial repeats a tried effective batch "
        "and learning rate (the default); as proposed: Keras Tuner's proposals as they come "
        "(a repeat reuses its source's score).",
        "",
        "| search | distinct models (distinct / as proposed) | Tuner wall time (distinct / "
        "as proposed) | best val_accuracy (distinct / as proposed) |",
        "| --- | --- | --- | --- |",
    ]
    for run in report["distinct"]:
        on, off = run["distinct"], run["as_proposed"]
        lines.append(
            f"| {run['algorithm']}, {run['max_trials']} trials | "
            f"{on['distinct_models']} / {off['distinct_models']} | {on['seconds']} s / "
            f"{off['seconds']} s | {on['best']['score']:.4f} / {off['best']['score']:.4f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.search", description=__doc__)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        run_dir = _examples(work)
        report = {
            "parallel": [
                serial_vs_parallel(run_dir, work / f"parallel-{n}", args.workers, n)
                for n in (8, 24)
            ],
            "distinct": [distinct_models(run_dir, work / "distinct", n) for n in (8, 24)],
        }
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "search.json").write_text(json.dumps(report, indent=2) + "\n")
    text = _markdown(report)
    (args.output / "search.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
