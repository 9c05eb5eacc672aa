"""The floor for ``bench.pipeline``: the pipeline's work done plainly, in one process.

What the default ``tfx-accum run`` computes, written as a user would without TFX or Beam:
load the embedded digits (split as the pipeline splits them: a third for evaluation, and
a fifth of the rest held out for ranking the trials), run an 8-trial Keras Tuner
``BayesianOptimization`` over the same space (``SearchSpace().declare``: k x m x learning
rate) with the same per-trial budget (4 epochs of the training examples, any effective
batch) on the same ``cnn`` GA model (``build_model``), then fit the best trial's
configuration for the best trial's budget, evaluate it on the eval split, and export a
serving SavedModel. Every trial builds its own model (Keras Tuner's plain use); nothing is
cached.

Run with ``python -m bench.plain_search [--trials N]``: the last line of its output is a
JSON object with the seconds of each phase (from the process's start, imports
included). ``bench.pipeline`` runs it in a process of its own and measures its wall and
CPU time from outside, as it measures the pipeline's.
"""

from __future__ import annotations

import time

START = time.monotonic()

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def split_digits(seed: int = 42):
    """The digits as the pipeline's model sees them: ``(features, labels)`` of the trial
    training, validation and eval parts (1,797 rows: 2/3 train, of which every fifth is
    held out for validation; 1/3 eval)."""
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.target))
    x, y = digits.data[order].astype("float32"), digits.target[order].astype("int64")
    eval_rows = len(y) // 3
    x_eval, y_eval, x_rest, y_rest = x[:eval_rows], y[:eval_rows], x[eval_rows:], y[eval_rows:]
    held = np.arange(len(y_rest)) % 5 == 0
    keys = [f"pixel_{i:02d}" for i in range(x.shape[1])]

    def columns(values):
        return {key: values[:, i : i + 1] for i, key in enumerate(keys)}

    parts = {
        "train": (columns(x_rest[~held]), y_rest[~held]),
        "validation": (columns(x_rest[held]), y_rest[held]),
        "eval": (columns(x_eval), y_eval),
    }
    return keys, x_rest[~held], parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plain_search", description=__doc__)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=4, help="tuning epochs per trial")
    args = parser.parse_args(argv)
    phases: dict[str, float] = {}
    mark = START

    def phase(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        phases[name] = now - mark
        mark = now

    import keras
    import keras_tuner

    from tfx_accum.components.config.hyperparameters import (
        HP_ACCUMULATION_STEPS,
        HP_MICRO_BATCH_SIZE,
    )
    from tfx_accum.components.config.search_space import SearchSpace
    from tfx_accum.components.data.features import DataDescription
    from tfx_accum.components.models.models import build_model

    phase("imports")
    space = SearchSpace(max_trials=args.trials, tuning_epochs=args.epochs)
    keys, train_x, parts = split_digits(space.seed)
    data = DataDescription.numeric(keys, 10, train_x.mean(0), train_x.var(0))
    train, validation, evaluation = parts["train"], parts["validation"], parts["eval"]
    phase("load")

    class PlainHyperModel(keras_tuner.HyperModel):
        def build(self, hp):
            k, m, lr = space.declare(hp)
            keras.utils.set_random_seed(space.seed)
            return build_model("cnn", data, k, lr)

        def fit(self, hp, model, *fit_args, **kwargs):
            batch = hp.get(HP_ACCUMULATION_STEPS) * hp.get(HP_MICRO_BATCH_SIZE)
            return model.fit(
                *train,
                batch_size=batch,
                epochs=kwargs.get("epochs", space.tuning_epochs),
                validation_data=validation,
                callbacks=kwargs.get("callbacks", []),
                verbose=0,
            )

    with tempfile.TemporaryDirectory() as work:
        tuner = keras_tuner.BayesianOptimization(
            PlainHyperModel(),
            objective="val_accuracy",
            max_trials=space.max_trials,
            seed=space.seed,
            directory=work,
            project_name="plain",
        )
        tuner.search(epochs=space.tuning_epochs, verbose=0)
        phase("search")
        best = tuner.get_best_hyperparameters(1)[0]
        k, m = best.get(HP_ACCUMULATION_STEPS), best.get(HP_MICRO_BATCH_SIZE)
        keras.utils.set_random_seed(space.seed)
        model = build_model("cnn", data, k, best.get("learning_rate"))
        model.fit(*train, batch_size=k * m, epochs=space.tuning_epochs, verbose=0)
        phase("fit")
        _, accuracy = model.evaluate(*evaluation, batch_size=256, verbose=0)
        phase("evaluate")
        model.export(os.path.join(work, "serving"), verbose=False)
        phase("export")
    result = {
        "phases_s": phases,
        "trials": len(tuner.oracle.trials),
        "best": {**best.values, "examples": space.tuning_epochs * len(train[1])},
        "updates": space.tuning_epochs * math.ceil(len(train[1]) / (k * m)),
        "eval_accuracy": float(accuracy),
    }
    print(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # as tfx-accum does: no interpreter teardown of the traced models


if __name__ == "__main__":
    sys.exit(main())
