"""Search odds: how often ``bench.search_quality``'s acceptance can hold between searches.

``bench.search_quality`` asks whether the project's median best-score curve over a few seeds
is at or above plain Keras Tuner's at *every* trial count. Both search the same 91 models
(7 effective batches x 13 learning rates) with 8 trials, so after a few trials both curves
sit near the top of the same table, and whether one median is a validation row above the
other turns on which seeds were drawn. This benchmark measures those odds instead of
arguing them:

1. Every model of the default space is trained once per data set and seed, as a trial
   trains it (the project's training, 4 epochs; a random search of 91 distinct trials,
   which trains each model once). A search's curve for any order of trials is then read
   off the table, without training again.
2. For ``--draws`` draws: ``--seeds`` independent searches per method (each on the table of
   a seed drawn at random, its trials in its own order), their median curves compared as
   ``bench.search_quality`` compares them (at or above at every ``t``).

Methods: ``random`` (Keras Tuner's ``RandomSearch``: models drawn uniformly, no repeats),
and ``centre_then_random`` (the project's start: the middle of the space first, then the
same draws). ``random`` against ``random`` is the noise floor: the same search, compared
with itself. The project's Bayesian phase is not simulated here (``bench.search_quality``
runs it).

Run with ``python -m bench.search_odds`` (273 trainings per table seed: 6 minutes for the
three on 2 CPU cores); it writes ``bench/results/search_odds.md`` and ``search_odds.json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from bench import search_quality  # noqa: E402

RESULTS = search_quality.RESULTS
TABLE_SEEDS = (0, 1, 2)
DRAWS = 2000
METHODS = ("random", "centre_then_random")
COMPARISONS = (("random", "random"), ("centre_then_random", "random"))

Model = tuple[int, float]  # (effective batch, learning rate)


def _key(batch: int, learning_rate: float) -> tuple[int, float]:
    return batch, round(learning_rate, 12)


def score_table(name: str, seed: int, epochs: int) -> dict[tuple[int, float], float]:
    """Every model of the default space trained once on ``name`` split by ``seed``: its
    score, keyed by (effective batch, learning rate)."""
    from tfx_accum.components.config.search_space import SearchSpace

    size = len(_models(SearchSpace()))
    space = SearchSpace(
        algorithm="random", max_trials=size, seed=seed, tuning_epochs=epochs, start_at_centre=False
    )
    table = search_quality.load_table(name, seed)
    with tempfile.TemporaryDirectory(prefix="search_odds_") as directory:
        trials = search_quality.run_project(table, seed, size, epochs, directory, space=space)
    scores = {_key(t.effective_batch, t.learning_rate): t.score for t in trials}
    if len(scores) != size or any(score is None for score in scores.values()):
        raise RuntimeError(f"{name} seed {seed}: {len(scores)} of {size} models scored")
    return scores


def _learning_rate(space):
    """Keras Tuner's learning-rate hyperparameter as ``space`` declares it."""
    import keras_tuner

    hp = keras_tuner.HyperParameters()
    space.declare(hp)
    (learning_rate,) = (h for h in hp.space if h.name == "learning_rate")
    return learning_rate


def _models(space) -> list[Model]:
    rates = sorted(set(_learning_rate(space).values))
    return [(batch, rate) for batch in search_quality.effective_batches(space) for rate in rates]


def _centre(space) -> Model:
    from tfx_accum.components.search.search_policy import centre_configuration

    values = centre_configuration(
        {},
        space.accumulation_steps_choices,
        space.micro_batch_choices,
        space.max_effective_batch,
        _learning_rate(space).prob_to_value(0.5),
    )
    return values["accumulation_steps"] * values["micro_batch_size"], values["learning_rate"]


def search_order(method: str, models: list[Model], centre: Model, trials: int, rng) -> list:
    """The models a search trains, in order."""
    if method == "random":
        return rng.sample(models, trials)
    rest = [m for m in models if _key(*m) != _key(*centre)]
    return [centre, *rng.sample(rest, trials - 1)]


def curve(order: list[Model], scores: dict) -> list[float]:
    best, result = float("-inf"), []
    for model in order:
        best = max(best, scores[_key(*model)])
        result.append(best)
    return result


def odds(tables: list[dict], models, centre, trials: int, seeds: int, draws: int, seed: int):
    """Per comparison (a, b): how often a's median curve over ``seeds`` searches is at or
    above b's at every t; and each method's mean best score after t trials."""
    rng = random.Random(seed)

    def median_of_searches(method: str) -> list[float]:
        curves = [
            curve(search_order(method, models, centre, trials, rng), rng.choice(tables))
            for _ in range(seeds)
        ]
        return search_quality.median_curve(curves)

    held = {pair: 0 for pair in COMPARISONS}
    for _ in range(draws):
        for a, b in COMPARISONS:
            held[(a, b)] += search_quality.not_below(median_of_searches(a), median_of_searches(b))
    means = {}
    for method in METHODS:
        curves = [
            curve(search_order(method, models, centre, trials, rng), rng.choice(tables))
            for _ in range(draws)
        ]
        means[method] = [statistics.fmean(c[t] for c in curves) for t in range(trials)]
    return {f"{a} >= {b}": held[(a, b)] / draws for a, b in COMPARISONS}, means


def run(datasets, table_seeds, trials: int, epochs: int, seeds: int, draws: int) -> dict:
    from tfx_accum.components.config.search_space import SearchSpace

    start = time.monotonic()
    space = SearchSpace(tuning_epochs=epochs)
    models, centre = _models(space), _centre(space)
    report: dict[str, Any] = {
        "benchmark": "search_odds",
        "command": "python -m bench.search_odds",
        "settings": {
            "datasets": list(datasets),
            "table_seeds": list(table_seeds),
            "trials": trials,
            "epochs": epochs,
            "seeds_per_comparison": seeds,
            "draws": draws,
            "models": len(models),
            "centre": list(centre),
        },
        "datasets": {},
    }
    for name in datasets:
        tables = []
        for seed in table_seeds:
            tables.append(score_table(name, seed, epochs))
            print(f"[search_odds] {name} seed {seed}: {len(models)} models trained", flush=True)
        held, means = odds(tables, models, centre, trials, seeds, draws, seed=0)
        report["datasets"][name] = {
            "held": held,
            "mean_curve": means,
            "table_max": statistics.fmean(max(t.values()) for t in tables),
            "table_median": statistics.fmean(statistics.median(t.values()) for t in tables),
        }
    names = [f"{a} >= {b}" for a, b in COMPARISONS]
    report["held_on_every_dataset"] = {pair: _all_held(report, pair) for pair in names}
    report["total_wall_s"] = round(time.monotonic() - start, 1)
    return report


def _all_held(report: dict, pair: str) -> float:
    """The odds on every data set at once (the data sets' draws are independent)."""
    result = 1.0
    for entry in report["datasets"].values():
        result *= entry["held"][pair]
    return result


def markdown(report: dict) -> str:
    settings = report["settings"]
    lines = [
        "# Search odds: how often the search-quality check can hold",
        "",
        f"`{report['command']}`: every one of the {settings['models']} models of the default "
        f"space trained once per data set and seed ({', '.join(map(str, settings['table_seeds']))}"
        f"), {settings['epochs']} epochs each as a trial; then {settings['draws']:,} draws of "
        f"{settings['seeds_per_comparison']} searches of {settings['trials']} trials per method, "
        "their median best-score curves compared as `bench.search_quality` compares them (at "
        "or above at every trial count). `random`: models drawn uniformly without repeats "
        "(Keras Tuner's RandomSearch); `centre_then_random`: the project's start (effective "
        f"batch {settings['centre'][0]}, learning rate {settings['centre'][1]:.2e}), then the "
        "same draws.",
        "",
        "| data set | random >= random (the same search) | centre_then_random >= random | "
        "best model's score | median model's score |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, entry in report["datasets"].items():
        held = entry["held"]
        lines.append(
            f"| {name} | {held['random >= random']:.0%} | "
            f"{held['centre_then_random >= random']:.0%} | {entry['table_max']:.4f} | "
            f"{entry['table_median']:.4f} |"
        )
    every = report["held_on_every_dataset"]
    lines += [
        f"| every data set at once | {every['random >= random']:.1%} | "
        f"{every['centre_then_random >= random']:.1%} | | |",
        "",
        "Mean best score after t trials (over the draws):",
        "",
        "| data set | method | "
        + " | ".join(f"t={t + 1}" for t in range(settings["trials"]))
        + " |",
        "| --- | --- | " + " | ".join("---:" for _ in range(settings["trials"])) + " |",
    ]
    for name, entry in report["datasets"].items():
        for method, values in entry["mean_curve"].items():
            lines.append(f"| {name} | {method} | " + " | ".join(f"{v:.4f}" for v in values) + " |")
    lines += ["", f"Total wall time: {report['total_wall_s']:.0f} s.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.search_odds", description=__doc__)
    parser.add_argument("--output", type=Path, default=RESULTS, help="folder for the results")
    parser.add_argument(
        "--datasets", nargs="+", choices=search_quality.DATASETS, default=search_quality.DATASETS
    )
    parser.add_argument("--table-seeds", nargs="+", type=int, default=list(TABLE_SEEDS))
    parser.add_argument("--seeds", type=int, default=len(search_quality.SEEDS))
    parser.add_argument("--trials", type=int, default=search_quality.TRIALS)
    parser.add_argument("--epochs", type=int, default=search_quality.EPOCHS)
    parser.add_argument("--draws", type=int, default=DRAWS)
    args = parser.parse_args(argv)
    report = run(
        tuple(args.datasets),
        tuple(args.table_seeds),
        args.trials,
        args.epochs,
        args.seeds,
        args.draws,
    )
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "search_odds.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.output / "search_odds.md").write_text(markdown(report))
    print(f"[search_odds] wrote {args.output / 'search_odds.md'} and .json", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
