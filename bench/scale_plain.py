"""The floor for ``bench.scale``: a pipeline run's work done plainly, in one process.

What a user would write with pandas and Keras, without TFX or Beam, for the work one
``tfx-accum run`` did on a CSV (its ``trials.csv`` says what the search trained):

1. read the CSV (pandas with pyarrow's reader);
2. split it as the pipeline does (a third for evaluation; every fifth training row held
   out for ranking the trials);
3. train each trial's configuration (its effective batch as one plain batch, its learning
   rate, its examples) on the pipeline's model (``mlp``: normalisation, Dense 128, Dense
   64, softmax), scoring it on the held-out rows;
4. train the best configuration for the best trial's examples (the Trainer's default
   budget), and evaluate it on the eval split.

Run with ``python -m bench.scale_plain CSV TRIALS_CSV``: the last line of its output is
a JSON object with the seconds of each phase (from the process's start, imports included).
``bench.scale`` runs it in a process of its own and measures its wall, CPU time and peak
memory from outside, as it measures the pipeline's.
"""

from __future__ import annotations

import time

START = time.monotonic()

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
LABEL = "label"


def _trials(path: str) -> list[dict]:
    with open(path) as handle:
        return list(csv.DictReader(handle))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_plain", description=__doc__)
    parser.add_argument("csv")
    parser.add_argument("trials_csv")
    args = parser.parse_args(argv)

    import keras
    import numpy as np
    import pandas as pd

    phases: dict[str, float] = {"imports": time.monotonic() - START}
    frame = pd.read_csv(args.csv, engine="pyarrow")
    labels = frame.pop(LABEL).to_numpy("int64")
    x = frame.to_numpy("float32")
    del frame
    classes = int(labels.max()) + 1
    order = np.random.default_rng(0).permutation(len(labels))
    eval_rows = len(labels) // 3
    eval_idx, rest = order[:eval_rows], order[eval_rows:]
    held = np.arange(len(rest)) % 5 == 4
    train_idx, valid_idx = rest[~held], rest[held]
    mean, var = x[train_idx].mean(axis=0), x[train_idx].var(axis=0)
    phases["read_and_split"] = time.monotonic() - START

    def model(lr: float) -> keras.Model:
        keras.utils.set_random_seed(0)
        inputs = keras.Input((x.shape[1],))
        h = keras.layers.Normalization(mean=mean, variance=var)(inputs)
        h = keras.layers.Dense(128, activation="relu")(h)
        h = keras.layers.Dense(64, activation="relu")(h)
        out = keras.layers.Dense(classes, activation="softmax")(h)
        net = keras.Model(inputs, out)
        net.compile(
            keras.optimizers.Adam(lr), loss="sparse_categorical_crossentropy", metrics=["accuracy"]
        )
        return net

    def train(trial: dict) -> keras.Model:
        batch, examples = int(trial["effective_batch"]), int(float(trial["examples"]))
        updates = math.ceil(examples / batch)
        per_epoch = max(1, min(updates, math.ceil(len(train_idx) / batch)))
        net = model(float(trial["learning_rate"]))
        rows = np.resize(train_idx, updates * batch)  # the stream, repeated as epochs are
        net.fit(
            x[rows],
            labels[rows],
            batch_size=batch,
            epochs=math.ceil(updates / per_epoch),
            steps_per_epoch=per_epoch,
            shuffle=False,
            verbose=0,
        )
        return net

    trials = [t for t in _trials(args.trials_csv) if t.get("score")]
    scores = []
    for trial in trials:
        net = train(trial)
        scores.append(net.evaluate(x[valid_idx], labels[valid_idx], 1024, verbose=0)[1])
    phases["search"] = time.monotonic() - START
    best = trials[int(np.argmax(scores))]
    final = train(best)
    phases["train"] = time.monotonic() - START
    predictions = final.predict(x[eval_idx], batch_size=4096, verbose=0).argmax(axis=1)
    accuracy = float((predictions == labels[eval_idx]).mean())
    phases["evaluate"] = time.monotonic() - START
    print(json.dumps({"phases": phases, "accuracy": accuracy, "trials": len(trials)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
