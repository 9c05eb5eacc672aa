"""The Evaluator against a plain process doing the same work, at two eval-split sizes (#31).

TFX's Evaluator (the pipeline's: TFX's executor with this project's EvalConfig, its
``custom_extractors`` module and TFXIO's batching by bytes, and TFMA) runs on an eval split
of ``ROWS`` examples with a model the pipeline trained; a plain process loads the same
SavedModel, predicts the same split in batches of 4,096 through the same ``serving_default``
and ``transform_labels`` signatures, and computes the same metrics with numpy (accuracy, the
majority class's share, the lift, the count). Each runs in a fresh process of its own; per
side: wall time, CPU seconds (the process and any Beam worker processes), peak resident
memory (the largest process), and rows per second.

The model comes from one pipeline run (``--run-dir`` to reuse a finished one) on a small
CSV of 4 numeric columns and a 10-class label; the eval splits are written here as
ExampleGen writes them (gzipped tf.Examples, one ``Split-eval`` folder), from the same
rule, so that their size is what is measured.

Run with ``python -m bench.evaluator [--rows 333000 667000]``; the figures go to
``bench/results/evaluator.md`` and ``evaluator.json``.
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FEATURES = 4
CLASSES = 10
TRAIN_ROWS = 30_000
BATCH = 4096
RUN = [
    "--no-tune", "--train-steps", "200", "--model", "mlp",
    "--accuracy-threshold", "0", "--allow-unblessed",
]  # fmt: skip


def _rows(rows: int, seed: int):
    """``rows`` x 4 features in [-1, 1] (4 decimals) and a 10-class label, in chunks."""
    rule = np.random.default_rng(0).normal(size=(FEATURES, CLASSES))
    rng = np.random.default_rng(seed)
    for start in range(0, rows, 100_000):
        x = rng.uniform(-1, 1, size=(min(100_000, rows - start), FEATURES)).round(4)
        yield x, (x @ rule).argmax(axis=1)


def write_csv(path: Path, rows: int) -> None:
    with open(path, "w") as handle:
        handle.write(",".join([f"f{i}" for i in range(FEATURES)] + ["label"]) + "\n")
        for x, y in _rows(rows, seed=1):
            block = np.concatenate([x, y[:, None]], axis=1)
            np.savetxt(handle, block, fmt=["%.4f"] * FEATURES + ["%d"], delimiter=",")


def write_eval_split(examples: Path, rows: int) -> None:
    """An Examples artifact folder with ``rows`` eval examples, as ExampleGen writes them."""
    import tensorflow as tf

    split = examples / "Split-eval"
    split.mkdir(parents=True)
    path = str(split / "data_tfrecord-00000-of-00001.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for x, y in _rows(rows, seed=2):
            for values, label in zip(x.tolist(), y.tolist()):
                feature = {
                    f"f{i}": tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
                    for i, v in enumerate(values)
                }
                feature["label"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())


def train(work: Path) -> Path:
    """A finished pipeline run on a small CSV: its output directory."""
    data = work / "data"
    data.mkdir()
    write_csv(data / "rows.csv", TRAIN_ROWS)
    out = work / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "tfx_accum.pipeline", "--data-root", str(data),
         "--output-dir", str(out), *RUN],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"the pipeline run failed:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    return out


def _latest(directory: Path) -> Path:
    return max(directory.iterdir(), key=lambda p: int(p.name))


def model_dir(run_dir: Path) -> Path:
    return _latest(run_dir / "pipeline" / "Trainer" / "model")


# --- The two sides, each in a process of its own -------------------------------------------


def run_evaluator(examples: Path, model: Path, work: Path, beam_mode: str) -> dict:
    """TFX's Evaluator executor (the pipeline's class and EvalConfig) on ``examples``."""
    from google.protobuf import json_format
    from tfx.dsl.components.base.base_beam_executor import BaseBeamExecutor
    from tfx.types import standard_artifacts

    from tfx_accum.pipeline import tfxio_batching
    from tfx_accum.pipeline.beam_args import BEAM_PLUGIN_ARG, without_tfx_sdist
    from tfx_accum.pipeline.evaluation import eval_config, read_evaluation
    from tfx_accum.pipeline.pipeline import EVALUATOR_MODULE
    from tfx_accum.pipeline.run_parameters import EvaluatorExecutor

    tfxio_batching.enable()  # as the local run's process does

    artifact = standard_artifacts.Examples()
    artifact.uri, artifact.split_names = str(examples), json.dumps(["eval"])
    trained = standard_artifacts.Model()
    trained.uri = str(model)
    evaluation, blessing = standard_artifacts.ModelEvaluation(), standard_artifacts.ModelBlessing()
    evaluation.uri, blessing.uri = str(work / "evaluation"), str(work / "blessing")
    workers = 1 if beam_mode == "in_memory" else 2
    args = [f"--direct_running_mode={beam_mode}", f"--direct_num_workers={workers}"]
    if beam_mode == "multi_processing":
        args.append(BEAM_PLUGIN_ARG)  # as the local runner's arguments
    context = BaseBeamExecutor.Context(
        tmp_dir=str(work / "tmp"), unique_id="evaluator", beam_pipeline_args=without_tfx_sdist(args)
    )
    config = eval_config("multiclass", "label", CLASSES)
    EvaluatorExecutor(context).Do(
        {"examples": [artifact], "model": [trained]},
        {"evaluation": [evaluation], "blessing": [blessing]},
        {
            "eval_config": json_format.MessageToJson(config),
            "example_splits": json.dumps(["eval"]),
            "fairness_indicator_thresholds": "null",
            "module_path": EVALUATOR_MODULE,  # the pipeline's custom_extractors
        },
    )
    return read_evaluation(evaluation.uri).metrics


def run_plain(examples: Path, model: Path) -> dict:
    """The same SavedModel's signatures on the same split, the metrics in numpy."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(model / "Format-Serving"))
    serve, labels_of = loaded.signatures["serving_default"], loaded.signatures["transform_labels"]
    files = sorted(str(p) for p in (examples / "Split-eval").iterdir())
    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP").batch(BATCH)
    predicted, labels = [], []
    for batch in dataset.prefetch(2):
        predicted.append(np.argmax(serve(examples=batch)["scores"].numpy(), axis=1))
        labels.append(labels_of(examples=batch)["label"].numpy().reshape(-1).astype(int))
    y, p = np.concatenate(labels), np.concatenate(predicted)
    accuracy = float(np.mean(p == y))
    share = float(np.bincount(y).max() / len(y))
    return {
        "sparse_categorical_accuracy": accuracy,
        "majority_class_share": share,
        "accuracy_lift": accuracy - share,
        "example_count": float(len(y)),
    }


def child(argv: list[str]) -> int:
    """``--child evaluator|plain EXAMPLES MODEL WORK MODE``: one side, its figures as JSON."""
    side, examples, model, work, mode = argv
    start, cpu = time.monotonic(), time.process_time()
    if side == "evaluator":
        metrics = run_evaluator(Path(examples), Path(model), Path(work), mode)
    else:
        metrics = run_plain(Path(examples), Path(model))
    wall = time.monotonic() - start
    own, kids = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    figures = {
        "wall_s": wall,
        "cpu_s": time.process_time() - cpu + kids.ru_utime + kids.ru_stime,
        "peak_gib": max(own.ru_maxrss, kids.ru_maxrss) / 2**20,
        "metrics": metrics,
    }
    print("RESULT " + json.dumps(figures))
    return 0


def measure(side: str, examples: Path, model: Path, work: Path, mode: str, rows: int) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.evaluator", "--child", side, str(examples), str(model),
         str(work), mode],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{side} on {rows:,} rows failed:\n{proc.stderr[-3000:]}")
    figures = json.loads(lines[-1].removeprefix("RESULT "))
    figures["rows_per_s"] = rows / figures["wall_s"]
    return figures


def markdown(results: list[dict], mode: str) -> str:
    lines = [
        "# Evaluator benchmark (`python -m bench.evaluator`)",
        "",
        f"Machine: {os.cpu_count()} CPU cores (shared). TFX's Evaluator executor (TFMA, "
        "the pipeline's custom_extractors and TFXIO batching by bytes, "
        f"Beam DirectRunner `{mode}`) against a plain process (the same SavedModel's "
        "signatures in batches of 4,096, metrics in numpy), each in a fresh process, on the "
        "same eval split (4 numeric columns, 10 classes). CPU: the process and its Beam "
        "workers; peak: the largest process's resident memory.",
        "",
        "| eval rows | side | wall | CPU | peak RSS | rows/s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        for side in ("evaluator", "plain"):
            f = r[side]
            lines.append(
                f"| {r['rows']:,} | {side} | {f['wall_s']:.1f} s | {f['cpu_s']:.1f} s | "
                f"{f['peak_gib']:.2f} GiB | {f['rows_per_s']:,.0f} |"
            )
        e, p = r["evaluator"], r["plain"]
        lines.append(
            f"| {r['rows']:,} | **ratio** | **{e['wall_s'] / p['wall_s']:.1f}x** | "
            f"**{e['cpu_s'] / p['cpu_s']:.1f}x** | **{e['peak_gib'] / p['peak_gib']:.1f}x** | |"
        )
    lines += ["", "Metrics (Evaluator / plain):", ""]
    for r in results:
        e, p = r["evaluator"]["metrics"], r["plain"]["metrics"]
        cells = ", ".join(f"{k} {e.get(k, float('nan')):.6g} / {v:.6g}" for k, v in p.items())
        lines.append(f"- {r['rows']:,} rows: {cells}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m bench.evaluator", description=__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[333_000, 667_000])
    parser.add_argument("--run-dir", type=Path, help="a finished run's --output-dir (its model)")
    parser.add_argument(
        "--beam-mode", choices=["in_memory", "multi_processing"], default="in_memory"
    )
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        work = Path(tmp)
        model = model_dir(args.run_dir or train(work))
        for rows in args.rows:
            examples = work / f"examples-{rows}"
            write_eval_split(examples, rows)
            results.append(
                {
                    "rows": rows,
                    "evaluator": measure(
                        "evaluator", examples, model, work / f"eval-{rows}", args.beam_mode, rows
                    ),
                    "plain": measure("plain", examples, model, work, args.beam_mode, rows),
                }
            )
            print(json.dumps(results[-1]), flush=True)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "evaluator.json").write_text(json.dumps(results, indent=2) + "\n")
    text = markdown(results, args.beam_mode)
    (args.output / "evaluator.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
