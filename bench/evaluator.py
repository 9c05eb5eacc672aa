"""The Evaluator against a plain process doing the same work, at two eval-split sizes (#31).

TFX's Evaluator (the pipeline's: TFX's executor with this project's EvalConfig, its
``custom_extractors`` module and TFXIO's batching by bytes, and TFMA) runs on an eval split
of ``ROWS`` examples with a model the pipeline trained; a plain process loads the same
SavedModel, predicts the same split in batches of 4,096 through the same ``serving_default``
and ``transform_labels`` signatures, and computes the same metrics with numpy (accuracy, the
majority class's share, the lift, the count). Each runs in a fresh process of its own; per
side: wall time, CPU seconds (the process and any Beam worker processes), peak resident
memory (the largest process), rows per second, and the machine's 1-minute load average
before and after.

``--before REF`` also runs the Evaluator of another commit of this project (its tree, from
``git archive REF``, laid out as the package is installed and put first on the child's
``PYTHONPATH``) on the same split and model, alternating with this tree's in each round
(``--rounds``), so that both see about the same load: the ratio of the two and whether their
metrics are equal are reported.

The model comes from one pipeline run (``--run-dir`` to reuse a finished one) on a small
CSV of 4 numeric columns and a 10-class label; the eval splits are written here as
ExampleGen writes them (gzipped tf.Examples, one ``Split-eval`` folder), from the same
rule, so that their size is what is measured.

Run with ``python -m bench.evaluator [--rows 333000 667000] [--before main --rounds 2]``;
the figures go to ``bench/results/evaluator.md`` and ``evaluator.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
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

    from tfx_accum.pipeline.evaluation import eval_config, read_evaluation
    from tfx_accum.pipeline.local import tfxio_batching
    from tfx_accum.pipeline.local.beam import BEAM_PLUGIN_ARG, without_tfx_sdist
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
    import tfx_accum.pipeline.evaluation

    figures = {
        "wall_s": wall,
        "cpu_s": time.process_time() - cpu + kids.ru_utime + kids.ru_stime,
        "peak_gib": max(own.ru_maxrss, kids.ru_maxrss) / 2**20,
        "metrics": metrics,
        "code": tfx_accum.pipeline.evaluation.__file__,  # which tree's project code ran
    }
    print("RESULT " + json.dumps(figures))
    return 0


def measure(
    side: str, examples: Path, model: Path, work: Path, mode: str, rows: int, tree: Path | None
) -> dict:
    """One side in a fresh process: this tree's code, or (``tree``) a package tree's
    (:func:`package_tree`), first on the child's ``PYTHONPATH``."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    cwd = ROOT
    if tree is not None:  # not the repository as the working directory: it holds tfx_accum/
        env["PYTHONPATH"] = os.pathsep.join([str(tree), str(ROOT)])
        cwd = tree.parent
    load = os.getloadavg()[0]
    proc = subprocess.run(
        [sys.executable, "-m", "bench.evaluator", "--child", side, str(examples), str(model),
         str(work), mode],
        capture_output=True, text=True, cwd=cwd, env=env,
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{side} on {rows:,} rows failed:\n{proc.stderr[-3000:]}")
    figures = json.loads(lines[-1].removeprefix("RESULT "))
    expected = tree if tree is not None else ROOT
    if not Path(figures["code"]).is_relative_to(expected):
        raise RuntimeError(f"{side} ran {figures['code']}, not the code under {expected}")
    figures["rows_per_s"] = rows / figures["wall_s"]
    figures["load"] = [load, os.getloadavg()[0]]
    return figures


def package_tree(ref: str, work: Path) -> Path:
    """``ref``'s files (``git archive``) laid out as the installed package (pyproject's
    ``[tool.setuptools.package-dir]``): a folder holding ``tfx_accum``."""
    source, tree = work / "source", work / "site"
    source.mkdir(parents=True)
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    text = (source / "pyproject.toml").read_text()
    section = re.search(r"^\[tool\.setuptools\.package-dir\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    for name, folder in re.findall(r'^"([\w.]+)"\s*=\s*"([^"]+)"', section.group(1), re.M):
        # tfx_accum first; its sub-packages are then links inside the linked folder.
        tree.joinpath(*name.split(".")).symlink_to(source / folder)
    return tree


def _cell(figures: dict) -> str:
    load = " / ".join(f"{x:.1f}" for x in figures["load"])
    return (
        f"{figures['wall_s']:.1f} s | {figures['cpu_s']:.1f} s | {figures['peak_gib']:.2f} GiB | "
        f"{figures['rows_per_s']:,.0f} | {load}"
    )


def _median_ratio(runs: list[dict], side: str, other: str, key: str) -> tuple[float, list]:
    ratios = [r[side][key] / r[other][key] for r in runs]
    return statistics.median(ratios), ratios


def markdown(results: list[dict], mode: str, before: str | None) -> str:
    lines = [
        "# Evaluator benchmark (`python -m bench.evaluator`)",
        "",
        f"Machine: {os.cpu_count()} CPU cores (shared; load: the 1-minute load average before "
        "/ after each process). TFX's Evaluator executor (TFMA, the pipeline's "
        "custom_extractors and TFXIO batching by bytes, "
        f"Beam DirectRunner `{mode}`) against a plain process (the same SavedModel's "
        "signatures in batches of 4,096, metrics in numpy), each in a fresh process, on the "
        "same eval split (4 numeric columns, 10 classes). CPU: the process and its Beam "
        "workers; peak: the largest process's resident memory.",
    ]
    if before:
        lines += [
            "",
            f"`evaluator ({before})`: the Evaluator of the project at `{before}` on the same "
            "split and model, alternating with this tree's in each round (the order swapped "
            "from one round to the next).",
        ]
    lines += [
        "",
        "| eval rows | round | side | wall | CPU | peak RSS | rows/s | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        for number, run in enumerate(r["rounds"], 1):
            for side in run["order"]:
                label = f"evaluator ({before})" if side == "before" else side
                lines.append(f"| {r['rows']:,} | {number} | {label} | {_cell(run[side])} |")
        lines.append(f"| {r['rows']:,} | | plain | {_cell(r['plain'])} |")
    lines += ["", "Ratios (medians over rounds of each round's ratio):", ""]
    for r in results:
        plain = [{**run, "plain": r["plain"]} for run in r["rounds"]]
        wall, _ = _median_ratio(plain, "evaluator", "plain", "wall_s")
        cpu, _ = _median_ratio(plain, "evaluator", "plain", "cpu_s")
        line = f"- {r['rows']:,} rows: Evaluator / plain **{wall:.1f}x** wall, **{cpu:.1f}x** CPU"
        if before:
            wall, walls = _median_ratio(r["rounds"], "evaluator", "before", "wall_s")
            cpu, cpus = _median_ratio(r["rounds"], "evaluator", "before", "cpu_s")
            each = ", ".join(f"{w:.2f}x / {c:.2f}x" for w, c in zip(walls, cpus))
            line += (
                f"; this tree / `{before}` **{wall:.2f}x** wall, **{cpu:.2f}x** CPU "
                f"(per round, wall / CPU: {each})"
            )
        lines.append(line)
    lines += ["", "Metrics (Evaluator / plain):", ""]
    for r in results:
        e, p = r["rounds"][0]["evaluator"]["metrics"], r["plain"]["metrics"]
        cells = ", ".join(f"{k} {e.get(k, float('nan')):.6g} / {v:.6g}" for k, v in p.items())
        lines.append(f"- {r['rows']:,} rows: {cells}")
        if before:
            same = all(
                run[side]["metrics"] == e for run in r["rounds"] for side in ("evaluator", "before")
            )
            lines.append(
                f"  - every round's metrics of this tree and of `{before}` equal (bit for bit): "
                f"{'yes' if same else 'NO'}"
            )
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
    parser.add_argument("--before", metavar="REF", help="a commit whose Evaluator to compare")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    results = []
    before = None
    if args.before:  # the ref as given and the commit it named when measured
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", args.before],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        before = args.before if commit.startswith(args.before) else f"{args.before} ({commit})"
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        work = Path(tmp)
        tree = package_tree(args.before, work / "before") if args.before else None
        model = model_dir(args.run_dir or train(work))
        for rows in args.rows:
            examples = work / f"examples-{rows}"
            write_eval_split(examples, rows)
            rounds = []
            for number in range(args.rounds):
                order = ["evaluator", "before"] if args.before else ["evaluator"]
                order = order[::-1] if number % 2 else order
                run = {"order": order}
                for side in order:
                    out = work / f"{side}-{rows}-{number}"
                    run[side] = measure(
                        "evaluator", examples, model, out, args.beam_mode, rows,
                        tree if side == "before" else None,
                    )  # fmt: skip
                    print(json.dumps({"rows": rows, "round": number, side: run[side]}), flush=True)
                rounds.append(run)
            plain = measure("plain", examples, model, work, args.beam_mode, rows, None)
            results.append({"rows": rows, "rounds": rounds, "plain": plain})
            print(json.dumps(results[-1]), flush=True)
    args.output.mkdir(parents=True, exist_ok=True)
    output = {"before": before, "beam_mode": args.beam_mode, "results": results}
    (args.output / "evaluator.json").write_text(json.dumps(output, indent=2) + "\n")
    text = markdown(results, args.beam_mode, before)
    (args.output / "evaluator.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
