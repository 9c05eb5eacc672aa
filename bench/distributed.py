"""One table's pipeline on the DirectRunner and on a Dask cluster of 1 and 2 workers.

The same command (``tfx-accum run --no-tune --train-steps 100`` on a generated table of
``--rows`` x ``--columns``, bench/csv_tables.py; the table and arguments of
tests/pipeline/test_dask_table.py) runs once per setup: the DirectRunner as the local run
sizes it, then ``--dask-scheduler`` on a fresh cluster of N single-threaded workers (a
scheduler and N ``dask worker`` processes on 127.0.0.1, bench/dask_cluster.py) for each N of
``--workers``. Per component: wall time (between its ``[pipeline]`` lines), CPU seconds (the
command's process and its children, the DirectRunner's worker processes; with Dask, also
every worker's and the scheduler's, read from the processes themselves at each line), and
rows per second (the rows the component reads: every split for ExampleGen and
StatisticsGen, the eval split for the Evaluator). The machine's load (1-minute average) is
recorded before and after each run; ``--repeats`` runs the setups again, in turn.

Only StatisticsGen and the Evaluator are Beam pipelines on the cluster; the CSV ExampleGen,
SchemaGen, ExampleValidator, the Trainer and the Pusher run in the command's process in
every setup (docs/distributed.md), and are shown for the whole run's sake.

Run with ``python -m bench.distributed [--rows 200000] [--columns 10] [--workers 1 2]``;
the figures go to ``bench/results/distributed.md`` and ``distributed.json``.
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

import psutil

from bench.csv_tables import write_csv
from bench.dask_cluster import dask_cluster

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
ARGS = ("--no-tune", "--train-steps", "100")
COMPONENTS = (
    "CsvExampleGen",
    "StatisticsGen",
    "SchemaGen",
    "ExampleValidator",
    "Trainer",
    "Evaluator",
    "Pusher",
)
ON_THE_CLUSTER = ("StatisticsGen", "Evaluator")
NOISE = 0.1  # a ratio within 10% of 1 is not told apart from no change on this machine
_RUNNING = re.compile(r"^\[pipeline\] (\S+) running \.\.\.$")
_DONE = re.compile(r"^\[pipeline\] (\S+) done \(")
_EVAL_ROWS = re.compile(r"; ([\d,]+) eval examples")
_ACCURACY = re.compile(r"^evaluation accuracy: ([0-9.]+)")


def _process_cpu(process: psutil.Process) -> float:
    """CPU seconds of ``process``, its reaped children and its live descendants."""
    try:
        times = process.cpu_times()
        total = times.user + times.system + times.children_user + times.children_system
        for child in process.children(recursive=True):
            try:
                own = child.cpu_times()
                total += own.user + own.system
            except psutil.NoSuchProcess:
                pass
        return total
    except psutil.NoSuchProcess:
        return 0.0


def _cluster_cpu(client) -> float:
    """CPU seconds of every Dask worker process and of the scheduler."""
    if client is None:
        return 0.0
    workers = client.run(_own_cpu)
    return sum(workers.values()) + client.run_on_scheduler(_own_cpu)


def _own_cpu(**_) -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(data: Path, out: Path, rows: int, address: str | None) -> dict:
    """One ``tfx-accum run``, its components timed from its own lines as they come."""
    client = None
    if address:
        import distributed

        client = distributed.Client(address, timeout=30)
    extra = ["--dask-scheduler", address] if address else []
    load_before = os.getloadavg()[0]
    command = [sys.executable, "-m", "tfx_accum.pipeline", "--data-root", str(data)]
    start = time.monotonic()
    process = subprocess.Popen(
        [*command, "--output-dir", str(out), *ARGS, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    watched = psutil.Process(process.pid)
    started: dict[str, tuple[float, float]] = {}
    components: dict[str, dict] = {}
    lines = []
    base = _cluster_cpu(client)
    for line in process.stdout:
        lines.append(line)
        line = line.rstrip("\n")
        if match := (_RUNNING.match(line) or _DONE.match(line)):
            now = time.monotonic()
            cpu = _process_cpu(watched) + _cluster_cpu(client) - base
            name = match.group(1)
            if _RUNNING.match(line):
                started[name] = (now, cpu)
            elif name in started:
                wall, cpu0 = now - started[name][0], cpu - started[name][1]
                components[name] = {"wall_s": wall, "cpu_s": cpu0}
    code = process.wait()
    wall = time.monotonic() - start
    text = "".join(lines)
    if client is not None:
        client.close()
    if code != 0:
        raise RuntimeError(f"the run failed ({code}):\n{text[-4000:]}")
    eval_rows = int(_EVAL_ROWS.search(text).group(1).replace(",", ""))
    for name, figures in components.items():
        read = {"CsvExampleGen": rows, "StatisticsGen": rows, "Evaluator": eval_rows}.get(name)
        figures["rows_per_s"] = read / figures["wall_s"] if read else None
    return {
        "components": components,
        "wall_s": wall,
        "accuracy": float(next(m.group(1) for m in map(_ACCURACY.match, lines) if m)),
        "eval_rows": eval_rows,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


def setups(workers: list[int]) -> list[tuple[str, int]]:
    return [("DirectRunner", 0)] + [(f"Dask, {n} worker{'s' * (n > 1)}", n) for n in workers]


def measure(data: Path, work: Path, rows: int, name: str, workers: int) -> dict:
    out = work / f"out-{workers}-{time.monotonic_ns()}"
    if not workers:
        return run(data, out, rows, None)
    with dask_cluster(work / f"logs-{out.name}", workers=workers) as cluster:
        return run(data, out, rows, cluster.address)


def _sum(run_: dict, key: str, names=ON_THE_CLUSTER) -> float:
    return sum(run_["components"][n][key] for n in names)


def markdown(results: dict) -> str:
    rows, columns = results["rows"], results["columns"]
    lines = [
        "# Distributed benchmark (`python -m bench.distributed`)",
        "",
        f"Machine: {os.cpu_count()} CPU cores, shared with other work (the load column: the "
        "1-minute load average before and after each run). The same command "
        f"(`tfx-accum run {' '.join(ARGS)}`) on one generated table of {rows:,} rows x "
        f"{columns} numeric columns and a 10-class label: on the DirectRunner as the local run "
        "sizes it, and with `--dask-scheduler` on a fresh cluster of single-threaded workers "
        "on this machine. StatisticsGen and the Evaluator are the Beam pipelines the cluster "
        "runs; the other components run in the command's process in every setup. CPU: the "
        "command's process and its children, and with Dask every worker and the scheduler.",
        "",
        "| run | setup | load | component | wall | CPU | rows/s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i, r in enumerate(results["runs"]):
        load = f"{r['load_before']:.1f} / {r['load_after']:.1f}"
        for name in COMPONENTS:
            c = r["components"].get(name)
            if c is None:
                continue
            rate = f"{c['rows_per_s']:,.0f}" if c["rows_per_s"] else ""
            lines.append(
                f"| {i + 1} | {r['setup']} | {load} | {name} | {c['wall_s']:.1f} s | "
                f"{c['cpu_s']:.1f} s | {rate} |"
            )
        lines.append(
            f"| {i + 1} | {r['setup']} | {load} | **StatisticsGen + Evaluator** | "
            f"**{_sum(r, 'wall_s'):.1f} s** | **{_sum(r, 'cpu_s'):.1f} s** | |"
        )
        lines.append(f"| {i + 1} | {r['setup']} | {load} | whole run | {r['wall_s']:.1f} s | | |")
    lines += ["", "Per setup, the Beam components' wall time against the DirectRunner's in the "
              "same round of runs (medians over rounds where repeated):", ""]  # fmt: skip
    for name, ratio in results["ratios"].items():
        lines.append(f"- {name}: **{ratio:.2f}x** the DirectRunner's")
    lines += [
        "",
        f"Evaluation accuracy in every run: {sorted({r['accuracy'] for r in results['runs']})} "
        f"on {results['runs'][0]['eval_rows']:,} eval rows.",
        "",
        results["expectation"],
    ]
    return "\n".join(lines) + "\n"


def _median(values: list[float]) -> float:
    values = sorted(values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def summarise(results: dict, workers: list[int]) -> None:
    """Ratios to the DirectRunner per setup (per round, then the median), and what a user
    may expect per added worker, from those figures."""
    by_round: dict[int, dict[str, dict]] = {}
    for r in results["runs"]:
        by_round.setdefault(r["round"], {})[r["setup"]] = r
    names = [name for name, _ in setups(workers)]
    ratios = {
        name: _median(
            [
                _sum(runs[name], "wall_s") / _sum(runs["DirectRunner"], "wall_s")
                for runs in by_round.values()
            ]  # noqa: E501
        )
        for name in names[1:]
    }
    results["ratios"] = ratios
    if len(names) < 3:
        results["expectation"] = ""
        return
    one, two = ratios[names[1]], ratios[names[2]]
    gain = one / two
    verdict = "faster" if gain > 1 + NOISE else "slower" if gain < 1 - NOISE else "no different"
    results["expectation"] = (
        f"What to expect per added worker, from these figures: the second worker made "
        f"StatisticsGen and the Evaluator {gain:.2f}x as fast as one worker ({verdict}, "
        f"taking a change within {NOISE:.0%} as noise), here where both workers, the scheduler "
        f"and the command share {os.cpu_count()} cores; on one machine the DirectRunner "
        f"is {'faster' if min(ratios.values()) > 1 else 'slower'} than the cluster "
        f"({min(ratios.values()):.2f}x at best). A worker on a machine of its own adds that "
        "machine's cores, which these figures cannot show; what they bound is the cluster's "
        "overhead on the same cores (Dask's tasks and the pickling between them, each "
        "worker's imports and model loading, TFX's work in one command process)."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.distributed", description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--columns", type=int, default=10)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    results = {"rows": args.rows, "columns": args.columns, "runs": []}
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        work = Path(tmp)
        data = work / "data"
        data.mkdir()
        write_csv(data / "table.csv", args.rows, args.columns)
        for round_ in range(args.repeats):
            for name, workers in setups(args.workers):
                figures = measure(data, work, args.rows, name, workers)
                figures.update(setup=name, workers=workers, round=round_)
                results["runs"].append(figures)
                print(json.dumps(figures), flush=True)
    summarise(results, args.workers)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "distributed.json").write_text(json.dumps(results, indent=2) + "\n")
    text = markdown(results)
    (args.output / "distributed.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
