"""CsvExampleGen at scale: TFX's executor vs the streaming one (#31).

For each size (rows x numeric features, plus a 10-class label; the CSV written as
``bench/streaming.py`` writes it), runs TFX's ``csv_executor.Executor`` and the project's
(``components/data/csv_examples.py``) on the same file, each in a fresh process with the Beam
arguments the local runner picks for that input (``pipeline/beam_args.py``), and reports the
wall time, the CPU seconds (the process and the Beam workers it waited for), the peak RSS
of the process doing the work (the largest one: Beam's workers are separate processes in
``multi_processing`` mode), the peak RSS of the whole process tree, sampled every 0.2 s,
and rows per second. It then checks that both wrote the same number of examples per split.

Run with ``python -m bench.example_gen [--sizes 1000000x64 2000000x4] [--skip-stock]``; the
figures go to ``bench/results/example_gen.md`` and ``example_gen.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.csv_tables import write_csv

ROOT = Path(__file__).resolve().parents[1]
EXECUTORS = {
    "stock": "tfx.components.example_gen.csv_example_gen.executor.Executor",
    "streaming": "tfx_accum.components.data.csv_examples.Executor",
}


def work(executor: str, data: str, out: str, beam_args: list[str]) -> dict:
    """In the measured process: one ExampleGen execution; the examples per split."""
    import importlib

    import tensorflow as tf
    from tfx.components.example_gen import utils
    from tfx.dsl.components.base import base_beam_executor
    from tfx.proto import example_gen_pb2
    from tfx.types import artifact_utils, standard_artifacts
    from tfx.types import standard_component_specs as specs
    from tfx.utils import proto_utils

    module, _, name = EXECUTORS[executor].rpartition(".")
    executor_class = getattr(importlib.import_module(module), name)
    input_config = example_gen_pb2.Input(
        splits=[example_gen_pb2.Input.Split(name="single_split", pattern="*.csv")]
    )
    examples = standard_artifacts.Examples()
    examples.uri = out
    properties = {
        specs.INPUT_BASE_KEY: data,
        specs.INPUT_CONFIG_KEY: proto_utils.proto_to_json(input_config),
        specs.OUTPUT_CONFIG_KEY: proto_utils.proto_to_json(
            utils.make_default_output_config(input_config)
        ),
        specs.OUTPUT_DATA_FORMAT_KEY: example_gen_pb2.FORMAT_TF_EXAMPLE,
        specs.OUTPUT_FILE_FORMAT_KEY: example_gen_pb2.FORMAT_TFRECORDS_GZIP,
    }
    context = base_beam_executor.BaseBeamExecutor.Context(
        beam_pipeline_args=beam_args, tmp_dir=os.path.join(out, ".tmp")
    )
    start = time.monotonic()
    executor_class(context).Do({}, {specs.EXAMPLES_KEY: [examples]}, properties)
    seconds = time.monotonic() - start
    counts = {}
    for split in artifact_utils.decode_split_names(examples.split_names):
        files = tf.io.gfile.glob(os.path.join(artifact_utils.get_split_uri([examples], split), "*"))
        records = tf.data.TFRecordDataset(files, compression_type="GZIP")
        counts[split] = int(records.reduce(0, lambda n, _: n + 1))
    return {"do_seconds": round(seconds, 1), "examples": counts}


def _tree_rss(pid: int) -> int:
    import psutil

    try:
        root = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
    except psutil.Error:
        return 0


def measure(executor: str, data: Path, out: Path, beam_args: list[str]) -> dict:
    """Runs :func:`work` in a fresh process: wall, CPU, peak RSS (largest process, tree)."""
    command = [sys.executable, "-m", "bench.example_gen", "--work", executor, str(data), str(out)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "BENCH_BEAM_ARGS": json.dumps(beam_args)}
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    peak_tree, done = [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            peak_tree[0] = max(peak_tree[0], _tree_rss(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    done.set()
    sampler.join()
    stdout = proc.stdout.read() if proc.stdout else ""
    if status != 0:
        raise RuntimeError(f"{executor} on {data} failed (status {status}): {stdout[-2000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    rows = sum(result["examples"].values())
    return {
        **result,
        "wall_s": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_gib": round(usage.ru_maxrss / 2**20, 2),
        "peak_tree_rss_gib": round(peak_tree[0] / 2**30, 2),
        "rows_per_s": round(rows / result["do_seconds"]),
    }


def run(rows: int, features: int, work_dir: Path, skip_stock: bool) -> dict:
    from tfx_accum.pipeline.beam_args import available_cpus, local_beam_args

    data = work_dir / f"data-{rows}x{features}"
    data.mkdir()
    write_csv(data / "rows.csv", rows, features)
    size = (data / "rows.csv").stat().st_size
    beam_args, why = local_beam_args(size, available_cpus(), rows=rows)
    result = {"rows": rows, "columns": features + 1, "csv_mb": round(size / 2**20)}
    result["beam_args"], result["beam_why"] = beam_args, why
    for executor in ("streaming",) if skip_stock else ("streaming", "stock"):
        out = work_dir / f"out-{executor}-{rows}x{features}"
        result[executor] = measure(executor, data, out, beam_args)
        print(f"{rows:,} x {features + 1}: {executor} {result[executor]}", flush=True)
    (data / "rows.csv").unlink()
    if "stock" in result:
        stock, new = result["stock"], result["streaming"]
        result["same_counts"] = stock["examples"] == new["examples"]
        result["speed_up"] = round(stock["do_seconds"] / new["do_seconds"], 1)
        result["memory_ratio"] = round(stock["peak_tree_rss_gib"] / new["peak_tree_rss_gib"], 1)
    return result


def markdown(results: list[dict]) -> str:
    lines = [
        "# CsvExampleGen benchmark (`python -m bench.example_gen`)",
        "",
        f"Machine: {os.cpu_count()} CPU cores. Each executor in a fresh process, with the Beam "
        "arguments the local runner picks for the input. Time: the executor's `Do`; CPU: the "
        "process and its Beam workers; peak RSS: the largest process / the process tree.",
        "",
        "| input | executor | time | CPU | peak RSS (largest / tree) | rows/s | examples |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        for name in ("stock", "streaming"):
            if name in r:
                m = r[name]
                counts = ", ".join(f"{k} {v:,}" for k, v in m["examples"].items())
                lines.append(
                    f"| {r['rows']:,} x {r['columns']} ({r['csv_mb']} MB) | {name} "
                    f"| {m['do_seconds']:.1f} s | {m['cpu_s']:.1f} s "
                    f"| {m['peak_rss_gib']:.2f} / {m['peak_tree_rss_gib']:.2f} GiB "
                    f"| {m['rows_per_s']:,} | {counts} |"
                )
        if "speed_up" in r:
            lines.append(
                f"| | **stock / streaming** | **{r['speed_up']}x** | | "
                f"**{r['memory_ratio']}x** (tree) | | same counts: {r['same_counts']} |"
            )
    beam = "; ".join(f"{r['rows']:,} x {r['columns']}: {' '.join(r['beam_args'])}" for r in results)
    return "\n".join([*lines, "", f"Beam arguments (stock): {beam}."]) + "\n"


def _size(text: str) -> tuple[int, int]:
    rows, _, features = text.partition("x")
    return int(rows), int(features)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.example_gen", description=__doc__)
    parser.add_argument(
        "--sizes", type=_size, nargs="+", default=[(1_000_000, 64), (2_000_000, 4)],
        help="ROWSxFEATURES (a label column is added)",
    )  # fmt: skip
    parser.add_argument("--rows", type=int, help="the default sizes' feature counts at N rows")
    parser.add_argument("--skip-stock", action="store_true", help="only the streaming executor")
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument(
        "--work", nargs=3, metavar=("EXECUTOR", "DATA", "OUT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.work:
        beam_args = json.loads(os.environ.get("BENCH_BEAM_ARGS", "[]"))
        print(json.dumps(work(*args.work, beam_args)))
        return 0
    sizes = [(args.rows, f) for _, f in args.sizes] if args.rows else args.sizes
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        results = [run(rows, features, Path(tmp), args.skip_stock) for rows, features in sizes]
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "example_gen.json").write_text(json.dumps(results, indent=2) + "\n")
    text = markdown(results)
    (args.output / "example_gen.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
