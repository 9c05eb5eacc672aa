"""Search quality: the best score found against trials spent, the project's search vs plain
Keras Tuner, at the same example budget.

Why: the project's search tunes accumulation steps ``k``, micro-batch ``m`` and learning
rate, gives every trial the same number of training examples whatever its effective batch,
and never trains the same model twice (``SearchSpace.distinct_trials``). A user without it
would run Keras Tuner's own ``RandomSearch`` or ``BayesianOptimization`` over batch size and
learning rate. This benchmark asks whether the project's search finds a model at least as
good for the same number of trials.

Three searches per data set and seed, each ``--trials`` trials of ``--epochs`` epochs:

- ``tfx_accum``: the project's search as the Tuner runs it (``make_tuner`` with
  ``AccumulationHyperModel`` and the ``mlp`` model; the default space: Bayesian over
  ``k`` in 1,2,4,8, ``m`` in 8,16,32,64 and the learning rate on a grid of x10**0.25 in
  1e-4..1e-1, the first trial the middle of the space: effective batch 64 as 1 x 64,
  learning rate 10**-2.5).
- ``keras_tuner_random`` and ``keras_tuner_bayesian``: ``keras_tuner.RandomSearch`` and
  ``keras_tuner.BayesianOptimization`` (same seed, same ``max_trials``, Bayesian with the
  project's ``num_initial_points`` rule) over ``batch_size`` in the effective batches the
  project's space can produce (8..512) and the same learning-rate hyperparameter, each
  trial ``model.fit(x, y, batch_size=B, epochs=E, validation_data=...)`` of the same
  layers (the project's ``mlp``, built as a plain ``keras.Model``: no accumulation), with
  Keras Tuner's plain ``run_trial``.

Same on both sides: the split (the pipeline's rule, as ``bench.plain_search``: a third held
out for evaluation and unused here, then every fifth row of the rest for validation), the
standardisation (a ``Normalization`` layer with the training split's mean and variance,
as the project's models do), the initial weights (seeded), the epochs, the objective (the
project's per task, ``tasks.OBJECTIVES``: ``val_accuracy`` for the digits and wine,
``val_auc`` for the two-class breast-cancer table) and Keras Tuner's scoring rule (a
trial's score is its best epoch's). Examples per trial: the project trains
``ceil(n / B)`` whole batches per epoch from a repeated stream, plain Keras the ``n`` rows
(its last batch partial): the same number of updates, at most ``B - 1`` more examples an
epoch on the project's side.

Data: scikit-learn's embedded ``load_digits``, ``load_breast_cancer`` and ``load_wine``
(no network). For every method, data set and seed: the best score after ``t`` trials,
``t = 1..trials``; the report gives the median over seeds per ``t``, whether the project's
median curve is at or above each plain curve at every ``t`` (the acceptance check), the
distinct (effective batch, learning rate) configurations each search trained, and its wall
time.

Run with ``python -m bench.search_quality`` (18 minutes measured on 2 CPU cores with 5 seeds,
90% of it the plain searches: a model built and traced per trial, and
Keras Tuner's best-epoch checkpoint; ``--epochs 2`` or ``--seeds 0 1`` to shorten); it writes
``bench/results/search_quality.md`` and ``search_quality.json``. ``--smoke`` (one data
set, one seed, 2 trials of 1 epoch) checks the code paths in well under a minute; give it
``--output DIR``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DATASETS = ("digits", "breast_cancer", "wine")
SEEDS = (0, 1, 2, 3, 4)
TRIALS = 8
EPOCHS = 4  # the project's default tuning_epochs
PROJECT = "tfx_accum"
PLAIN_RANDOM, PLAIN_BAYESIAN = "keras_tuner_random", "keras_tuner_bayesian"
METHODS = (PROJECT, PLAIN_RANDOM, PLAIN_BAYESIAN)
HP_BATCH_SIZE = "batch_size"


@dataclasses.dataclass(frozen=True)
class Table:
    """One data set split as the pipeline splits it: columns ``x00``.. of float32, int64
    labels; the eval third is left out (nothing here evaluates a final model)."""

    name: str
    keys: list[str]
    train_x: np.ndarray
    train_y: np.ndarray
    validation_x: np.ndarray
    validation_y: np.ndarray
    num_classes: int

    def columns(self, x: np.ndarray) -> dict[str, np.ndarray]:
        return {key: x[:, i : i + 1] for i, key in enumerate(self.keys)}


@dataclasses.dataclass(frozen=True)
class TrialResult:
    """One finished (or failed) trial, in the order the search ran it."""

    trial_id: str
    status: str
    score: float | None
    effective_batch: int
    learning_rate: float
    split: tuple[int, int] | None = None  # the project's (k, m)

    def to_json(self) -> dict[str, Any]:
        result = dataclasses.asdict(self)
        result["split"] = list(self.split) if self.split else None
        return result


def load_table(name: str, seed: int) -> Table:
    """``name``'s rows shuffled by ``seed``: a third for evaluation (unused), and of the
    rest every fifth row for validation, the others for training (``bench.plain_search``)."""
    from sklearn import datasets

    loader: Callable = {
        "digits": datasets.load_digits,
        "breast_cancer": datasets.load_breast_cancer,
        "wine": datasets.load_wine,
    }[name]
    raw = loader()
    order = np.random.default_rng(seed).permutation(len(raw.target))
    x, y = raw.data[order].astype("float32"), raw.target[order].astype("int64")
    eval_rows = len(y) // 3
    x_rest, y_rest = x[eval_rows:], y[eval_rows:]
    held = np.arange(len(y_rest)) % 5 == 0
    return Table(
        name,
        [f"x{i:02d}" for i in range(x.shape[1])],
        x_rest[~held],
        y_rest[~held],
        x_rest[held],
        y_rest[held],
        int(y.max()) + 1,
    )


def describe(table: Table):
    """The project's description of the table: numeric columns with the training split's
    mean and variance (the models standardise with them), variance floored as the
    pipeline floors it."""
    from tfx_accum.components.data.features import DataDescription

    mean, variance = table.train_x.mean(0), table.train_x.var(0)
    # The pipeline's floor (features._floored_variance): a (nearly) constant column, such
    # as the digits' blank corner pixels, is divided by its magnitude, not by ~0.
    scale = np.maximum(np.abs(mean), 1.0)
    variance = np.where(variance > (1e-6 * scale) ** 2, variance, np.maximum(variance, scale**2))
    return DataDescription.numeric(table.keys, table.num_classes, mean, variance)


def project_space(seed: int, trials: int, epochs: int):
    from tfx_accum.components.config.search_space import SearchSpace

    return SearchSpace(seed=seed, tuning_epochs=epochs, max_trials=trials)


def effective_batches(space) -> list[int]:
    """The effective batches ``k * m`` the project's space can produce."""
    return sorted(
        {
            k * m
            for k in space.accumulation_steps_choices
            for m in space.micro_batch_choices
            if space.max_effective_batch is None or k * m <= space.max_effective_batch
        }
    )


def _ordered(trials: dict) -> list:
    return [trials[key] for key in sorted(trials, key=int)]


def run_project(table: Table, seed: int, trials: int, epochs: int, directory: str, space=None):
    """The project's search (the default space, or ``space``): its trials in order."""
    import tensorflow as tf

    from tfx_accum.components.config.hyperparameters import (
        HP_ACCUMULATION_STEPS,
        HP_LEARNING_RATE,
        HP_MICRO_BATCH_SIZE,
    )
    from tfx_accum.components.data.datasets import Splits
    from tfx_accum.components.data.features import Preprocessor
    from tfx_accum.components.search.hypermodel import AccumulationHyperModel
    from tfx_accum.components.search.search_tuners import make_tuner

    data = describe(table)
    train = tf.data.Dataset.from_tensor_slices((table.columns(table.train_x), table.train_y))
    validation = tf.data.Dataset.from_tensor_slices(
        (table.columns(table.validation_x), table.validation_y)
    )
    splits = Splits(
        train, validation, data, len(table.train_y), Preprocessor(data), len(table.validation_y)
    )
    space = space or project_space(seed, trials, epochs)
    tuner = make_tuner(space, AccumulationHyperModel(space, splits, "mlp"), directory)
    tuner.search(epochs=space.tuning_epochs)
    results = []
    for trial in _ordered(tuner.oracle.trials):
        values = trial.hyperparameters.values
        k, m = values[HP_ACCUMULATION_STEPS], values[HP_MICRO_BATCH_SIZE]
        results.append(
            TrialResult(
                trial.trial_id,
                trial.status,
                None if trial.score is None else float(trial.score),
                k * m,
                float(values[HP_LEARNING_RATE]),
                (k, m),
            )
        )
    return results


def plain_model(data, learning_rate: float):
    """The project's ``mlp`` layers as a plain ``keras.Model`` (no accumulation), compiled
    as the project compiles it."""
    import keras

    from tfx_accum.components.config.tasks import PREDICTION_KEYS
    from tfx_accum.components.models.models import model_inputs, tabular_vector
    from tfx_accum.components.models.task_compile import compile_arguments

    inputs = model_inputs(data)
    x = tabular_vector(data, inputs)
    x = keras.layers.Dense(128, activation="relu")(x)
    x = keras.layers.Dense(64, activation="relu")(x)
    outputs = keras.layers.Dense(
        data.outputs, activation="softmax", name=PREDICTION_KEYS[data.task], dtype="float32"
    )(x)
    model = keras.Model(inputs=inputs, outputs=outputs, name="plain_mlp")
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), **compile_arguments(data.task))
    return model


def run_plain(
    table: Table, seed: int, trials: int, epochs: int, algorithm: str, directory: str
) -> list[TrialResult]:
    """Keras Tuner's own ``RandomSearch`` or ``BayesianOptimization`` over batch size and
    learning rate: its trials in order."""
    import keras
    import keras_tuner

    from tfx_accum.components.config.hyperparameters import HP_LEARNING_RATE
    from tfx_accum.components.config.tasks import OBJECTIVES

    data = describe(table)
    space = project_space(seed, trials, epochs)
    batches = effective_batches(space)
    train_x, validation_x = table.columns(table.train_x), table.columns(table.validation_x)

    class PlainHyperModel(keras_tuner.HyperModel):
        def build(self, hp):
            hp.Choice(HP_BATCH_SIZE, batches, ordered=True)
            learning_rate = space.declare_learning_rate(hp)  # the same learning rates
            keras.utils.set_random_seed(seed)
            return plain_model(data, learning_rate)

        def fit(self, hp, model, *args, **kwargs):
            return model.fit(
                train_x,
                table.train_y,
                batch_size=hp.get(HP_BATCH_SIZE),
                epochs=kwargs.get("epochs", epochs),
                validation_data=(validation_x, table.validation_y),
                callbacks=kwargs.get("callbacks", []),
                verbose=0,
            )

    name, direction = OBJECTIVES[data.task]
    common: dict[str, Any] = dict(
        objective=keras_tuner.Objective(name, direction=direction),
        max_trials=trials,
        seed=seed,
        directory=directory,
        project_name="plain",
        overwrite=True,
    )
    if algorithm == "random":
        tuner = keras_tuner.RandomSearch(PlainHyperModel(), **common)
    else:  # the project's make_oracle rule for the initial random points
        tuner = keras_tuner.BayesianOptimization(
            PlainHyperModel(), num_initial_points=max(2, trials // 3), **common
        )
    tuner.search(epochs=epochs, verbose=0)
    return [
        TrialResult(
            trial.trial_id,
            trial.status,
            None if trial.score is None else float(trial.score),
            int(trial.hyperparameters.values[HP_BATCH_SIZE]),
            float(trial.hyperparameters.values[HP_LEARNING_RATE]),
        )
        for trial in _ordered(tuner.oracle.trials)
    ]


def best_curve(results: list[TrialResult], trials: int) -> list[float | None]:
    """The best score after ``t`` trials, ``t = 1..trials`` (None before any scored trial;
    a search that stopped early keeps its last best)."""
    curve: list[float | None] = []
    best: float | None = None
    for t in range(trials):
        if t < len(results) and results[t].score is not None:
            score = results[t].score
            best = score if best is None else max(best, score)
        curve.append(best)
    return curve


def distinct_configurations(results: list[TrialResult]) -> int:
    """Distinct (effective batch, learning rate) configurations the search trained."""
    return len(
        {
            (r.effective_batch, round(r.learning_rate, 12))
            for r in results
            if r.status == "COMPLETED"
        }
    )


def median_curve(curves: list[list[float | None]]) -> list[float]:
    """The median over seeds per ``t``; no scored trial yet counts as 0 (the worst score)."""
    return [
        float(statistics.median(0.0 if v is None else v for v in column)) for column in zip(*curves)
    ]


def not_below(ours: list[float], theirs: list[float], tolerance: float = 1e-9) -> bool:
    return all(a >= b - tolerance for a, b in zip(ours, theirs))


def run_search(method: str, table: Table, seed: int, trials: int, epochs: int) -> dict:
    """One search in a fresh Keras session and directory: its trials, curve and time."""
    import keras

    keras.backend.clear_session()
    with tempfile.TemporaryDirectory(prefix=f"search_quality_{method}_") as directory:
        start = time.monotonic()
        if method == PROJECT:
            results = run_project(table, seed, trials, epochs, directory)
        else:
            algorithm = "random" if method == PLAIN_RANDOM else "bayesian"
            results = run_plain(table, seed, trials, epochs, algorithm, directory)
        wall = time.monotonic() - start
    return {
        "seed": seed,
        "curve": best_curve(results, trials),
        "distinct_configurations": distinct_configurations(results),
        "failed_trials": sum(r.status != "COMPLETED" for r in results),
        "wall_s": round(wall, 2),
        "trials": [r.to_json() for r in results],
    }


def run(datasets: tuple[str, ...], seeds: tuple[int, ...], trials: int, epochs: int) -> dict:
    from tfx_accum.components.config.tasks import OBJECTIVES

    start = time.monotonic()
    space = project_space(seeds[0], trials, epochs)
    report: dict[str, Any] = {
        "benchmark": "search_quality",
        "command": "python -m bench.search_quality",
        "settings": {
            "datasets": list(datasets),
            "seeds": list(seeds),
            "trials": trials,
            "epochs": epochs,
            "methods": list(METHODS),
            "project_space": {
                "algorithm": space.algorithm,
                "accumulation_steps_choices": list(space.accumulation_steps_choices),
                "micro_batch_choices": list(space.micro_batch_choices),
                "learning_rate": [
                    space.learning_rate_min,
                    space.learning_rate_max,
                    space.learning_rate_step,
                ],
                "distinct_trials": space.distinct_trials,
            },
            "plain_batch_sizes": effective_batches(space),
        },
        "datasets": {},
    }
    for name in datasets:
        entry: dict[str, Any] = {"methods": {}}
        for seed in seeds:
            table = load_table(name, seed)
            entry.setdefault("train_rows", len(table.train_y))
            entry.setdefault("validation_rows", len(table.validation_y))
            entry.setdefault("objective", OBJECTIVES[describe(table).task][0])
            for method in METHODS:
                run_ = run_search(method, table, seed, trials, epochs)
                entry["methods"].setdefault(method, {"runs": []})["runs"].append(run_)
                print(
                    f"[search_quality] {name} seed {seed} {method}: curve "
                    + " ".join("-" if v is None else f"{v:.3f}" for v in run_["curve"])
                    + f" ({run_['distinct_configurations']} distinct, {run_['wall_s']:.1f} s)",
                    flush=True,
                )
        for method in METHODS:
            summary = entry["methods"][method]
            runs = summary["runs"]
            summary["median_curve"] = median_curve([r["curve"] for r in runs])
            summary["distinct_configurations_median"] = statistics.median(
                r["distinct_configurations"] for r in runs
            )
            summary["wall_s_total"] = round(sum(r["wall_s"] for r in runs), 2)
        ours = entry["methods"][PROJECT]["median_curve"]
        entry["project_not_below"] = {
            method: not_below(ours, entry["methods"][method]["median_curve"])
            for method in METHODS
            if method != PROJECT
        }
        report["datasets"][name] = entry
    report["acceptance"] = all(
        all(entry["project_not_below"].values()) for entry in report["datasets"].values()
    )
    report["total_wall_s"] = round(time.monotonic() - start, 1)
    return report


def markdown(report: dict) -> str:
    settings = report["settings"]
    lines = [
        "# Search quality: the project's search vs plain Keras Tuner",
        "",
        f"`{report['command']}`: {len(settings['seeds'])} seed(s) "
        f"({', '.join(map(str, settings['seeds']))}), {settings['trials']} trials of "
        f"{settings['epochs']} epoch(s) each. `tfx_accum`: the project's default search "
        "(Bayesian over k x m x learning rate from the middle of the space, distinct "
        "trials, every trial the training "
        "split's examples per epoch); `keras_tuner_random` / `keras_tuner_bayesian`: Keras "
        "Tuner's RandomSearch / BayesianOptimization over batch size "
        f"({', '.join(map(str, settings['plain_batch_sizes']))}) and the same learning "
        "rates, plain `model.fit` of the same MLP. Score: the project's objective, a "
        "trial's best epoch on the validation split. Each cell: the best score after t "
        "trials, median over seeds.",
        "",
    ]
    for name, entry in report["datasets"].items():
        methods = entry["methods"]
        lines += [
            f"## {name} ({entry['objective']}; {entry['train_rows']} training, "
            f"{entry['validation_rows']} validation rows)",
            "",
            "| trials | " + " | ".join(methods) + " |",
            "|---:|" + "---:|" * len(methods),
        ]
        for t in range(settings["trials"]):
            cells = [f"{methods[m]['median_curve'][t]:.4f}" for m in methods]
            lines.append(f"| {t + 1} | " + " | ".join(cells) + " |")
        lines += [
            "",
            "| method | distinct configurations (median) | failed trials | wall time, all seeds |",
            "|---|---:|---:|---:|",
        ]
        for method, summary in methods.items():
            failed = sum(r["failed_trials"] for r in summary["runs"])
            lines.append(
                f"| {method} | {summary['distinct_configurations_median']:g} | {failed} | "
                f"{summary['wall_s_total']:.1f} s |"
            )
        verdicts = [
            f"{'at or above' if ok else '**below**'} {method} at every t"
            if ok
            else f"**below** {method} at t = "
            + ", ".join(
                str(t + 1)
                for t, (a, b) in enumerate(
                    zip(methods[PROJECT]["median_curve"], methods[method]["median_curve"])
                )
                if a < b - 1e-9
            )
            for method, ok in entry["project_not_below"].items()
        ]
        lines += ["", f"**Verdict ({name})**: the project's median curve is " + "; ".join(verdicts)]
        lines.append("")
    lines += [
        f"**Acceptance** (the project's median curve not below either plain curve at any t, "
        f"on every data set): {'met' if report['acceptance'] else 'not met'}.",
        "",
        f"Total wall time: {report['total_wall_s']:.0f} s.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.search_quality", description=__doc__)
    parser.add_argument("--output", type=Path, default=RESULTS, help="folder for the results")
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--trials", type=int, default=TRIALS)
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="epochs per trial")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="wine only, seed 0, 2 trials of 1 epoch: a quick check of the code paths",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.datasets, args.seeds, args.trials, args.epochs = ["wine"], [0], 2, 1
    report = run(tuple(args.datasets), tuple(args.seeds), args.trials, args.epochs)
    if args.smoke:
        report["command"] += " --smoke"
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "search_quality.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.output / "search_quality.md").write_text(markdown(report))
    print(f"[search_quality] wrote {args.output / 'search_quality.md'} and .json", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
