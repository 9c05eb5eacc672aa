"""The DirectRunner's two modes for each Beam component and row count: the local sizing rule.

The local run chooses Beam's DirectRunner mode from the input (pipeline/local/beam.py):
``in_memory`` (one worker, this process) or ``multi_processing`` (worker processes). Here
each Beam component of the pipeline runs in a fresh process of its own, in each mode as the
local runner would pass it (``direct_args(1)``, ``direct_args(2)``), on the same examples:
TFX's StatisticsGen executor on every split, and the pipeline's Evaluator (TFX's executor
with the project's EvalConfig and extractors; bench/evaluator.py) on the eval split, with a
model the pipeline trained. The examples are what the project's ExampleGen writes for a
generated CSV (bench/evaluator.py's 4 columns, which its model reads; wider tables from
bench/csv_tables.py, StatisticsGen only), so a large split is in several files, as in a run.
Per measurement: wall time, CPU seconds (the process and its Beam worker processes) and the
machine's load (1-minute average) before and after.

Run with ``python -m bench.beam_sizing [--rows 100000 500000] [--columns 4 20]``; the
figures go to ``bench/results/beam_sizing.md`` and ``beam_sizing.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import evaluator as evaluator_bench
from bench.csv_tables import write_csv
from bench.example_gen import work as example_gen

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
MODES = {"in_memory": 1, "multi_processing": 2}  # the DirectRunner's workers in each mode
NAMES = {"statistics": "StatisticsGen", "evaluator": "Evaluator"}


def run_statistics(examples: Path, work: Path, workers: int) -> int:
    """TFX's StatisticsGen executor on every split of ``examples``; the features counted."""
    from tensorflow_metadata.proto.v0 import statistics_pb2
    from tfx.components.statistics_gen.executor import Executor
    from tfx.dsl.components.base.base_beam_executor import BaseBeamExecutor
    from tfx.types import standard_artifacts
    from tfx.types import standard_component_specs as specs

    from tfx_accum.pipeline.local import tfxio_batching
    from tfx_accum.pipeline.local.beam import direct_args, without_tfx_sdist

    tfxio_batching.enable()  # as the local run's process does
    artifact = standard_artifacts.Examples()
    artifact.uri = str(examples)
    artifact.split_names = json.dumps(sorted(p.name[6:] for p in examples.glob("Split-*")))
    statistics = standard_artifacts.ExampleStatistics()
    statistics.uri = str(work / "statistics")
    context = BaseBeamExecutor.Context(
        tmp_dir=str(work / "tmp"),
        unique_id="statistics",
        beam_pipeline_args=without_tfx_sdist(direct_args(workers)),
    )
    Executor(context).Do(
        {specs.EXAMPLES_KEY: [artifact]},
        {specs.STATISTICS_KEY: [statistics]},
        {specs.EXCLUDE_SPLITS_KEY: "[]"},
    )
    found = statistics_pb2.DatasetFeatureStatisticsList()
    found.ParseFromString((work / "statistics" / "Split-eval" / "FeatureStats.pb").read_bytes())
    return len(found.datasets[0].features)


def child(argv: list[str]) -> int:
    """``--child statistics|evaluator EXAMPLES MODEL WORK MODE``: one run, its figures."""
    component, examples, model, work, mode = argv
    start = time.monotonic()
    if component == "statistics":
        result = run_statistics(Path(examples), Path(work), MODES[mode])
    else:
        result = evaluator_bench.run_evaluator(Path(examples), Path(model), Path(work), mode)
    wall = time.monotonic() - start
    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    print("RESULT " + json.dumps({"wall_s": wall, "cpu_s": cpu, "result": result}))
    return 0


def measure(component: str, examples: Path, model: Path, work: Path, mode: str) -> dict:
    load_before = os.getloadavg()[0]
    work.mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, "-m", "bench.beam_sizing", "--child", component, str(examples),
         str(model), str(work), mode],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{component} {mode} failed:\n{proc.stderr[-3000:]}")
    figures = json.loads(lines[-1].removeprefix("RESULT "))
    figures.update(load_before=load_before, load_after=os.getloadavg()[0])
    return figures


def shape(work: Path, rows: int, columns: int) -> Path:
    """ExampleGen's output for a generated CSV of ``rows`` x ``columns``."""
    data = work / f"csv-{rows}-{columns}"
    data.mkdir()
    if columns == evaluator_bench.FEATURES:
        evaluator_bench.write_csv(data / "rows.csv", rows)  # the columns its model reads
    else:
        write_csv(data / "rows.csv", rows, columns)
    examples = work / f"examples-{rows}-{columns}"
    example_gen("streaming", str(data), str(examples), [])
    return examples


def markdown(results: list[dict]) -> str:
    lines = [
        "# The DirectRunner's modes per Beam component (`python -m bench.beam_sizing`)",
        "",
        f"Machine: {os.cpu_count()} CPU cores, shared with other work (load: the 1-minute "
        "average before / after each measurement). Each component in a fresh process, in "
        "each mode as the local run passes it: `in_memory` (one worker, the process itself) "
        "and `multi_processing` with 2 worker processes; the same examples (the project's "
        "ExampleGen output of a generated table: every split for StatisticsGen, the eval "
        "split for the Evaluator). CPU: the process and its Beam workers.",
        "",
        "| component | rows x columns | mode | load | wall | CPU | multi / in_memory (wall) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        one, two = r["in_memory"], r["multi_processing"]
        for mode, f in (("in_memory", one), ("multi_processing", two)):
            ratio = f"**{two['wall_s'] / one['wall_s']:.2f}x**" if mode != "in_memory" else ""
            lines.append(
                f"| {r['component']} | {r['rows']:,} x {r['columns']} | {mode} | "
                f"{f['load_before']:.1f} / {f['load_after']:.1f} | {f['wall_s']:.1f} s | "
                f"{f['cpu_s']:.1f} s | {ratio} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m bench.beam_sizing", description=__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 500_000])
    parser.add_argument("--columns", type=int, nargs="+", default=[4, 20])
    parser.add_argument("--run-dir", type=Path, help="a finished bench.evaluator training run")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        work = Path(tmp)
        model = evaluator_bench.model_dir(args.run_dir or evaluator_bench.train(work))
        for rows in args.rows:
            for columns in args.columns:
                examples = shape(work, rows, columns)
                components = ["statistics"]
                if columns == evaluator_bench.FEATURES:
                    components.append("evaluator")
                csv_bytes = (work / f"csv-{rows}-{columns}" / "rows.csv").stat().st_size
                for component in components:
                    entry = {"component": component, "rows": rows, "columns": columns}
                    entry.update(csv_bytes=csv_bytes, cpus=os.cpu_count())
                    for mode in MODES:  # in turn, so that both see the same load
                        where = work / f"{component}-{rows}-{columns}-{mode}"
                        entry[mode] = measure(component, examples, model, where, mode)
                    entry["component"] = (
                        "StatisticsGen" if component == "statistics" else "Evaluator"
                    )
                    results.append(entry)
                    print(json.dumps(entry), flush=True)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "beam_sizing.json").write_text(json.dumps(results, indent=2) + "\n")
    text = markdown(results)
    (args.output / "beam_sizing.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
