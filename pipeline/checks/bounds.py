"""Settings checked against the data before the run: batches that the data cannot fill, and
widths that make a component slow.

- **The effective batch** ``k x m`` (accumulation steps times micro-batch) of the fixed
  hyperparameters, or the smallest one the search may propose, must fit in the training
  split. A larger batch would hold every training example several times in each update
  (the Trainer repeats its input stream) and can take all memory before anything says why:
  ``--no-tune --micro-batch-size 1000000000`` was OOM-killed without a message. It is an
  error (exit code 2) naming the numbers. A search whose largest combinations exceed the
  split gets a line saying so.
- **The width**: StatisticsGen, SchemaGen and the components' first pass over the data take
  time in proportion to the number of columns, whatever the number of rows. From
  ``WIDE_COLUMNS`` columns on, a line says so and what to do.

The training split's size is known only after ExampleGen; before it, it is estimated from
the rows: ExampleGen's default output configuration hashes every example into 3 buckets,
2 of them for training (``TRAIN_FRACTION``).
"""

from __future__ import annotations

import math

from tfx_accum.components.config.hyperparameters import Hyperparameters
from tfx_accum.components.config.search_space import SearchSpace
from tfx_accum.pipeline.checks.data import DataSummary
from tfx_accum.pipeline.errors import InputError

TRAIN_FRACTION = 2 / 3  # TFX's default split: hash buckets train 2, eval 1
# StatisticsGen's time grows with the columns whatever the rows (CsvExampleGen's does not):
# past this width it dominates a run.
WIDE_COLUMNS = 1_000


def training_rows(summary: DataSummary) -> int:
    """About how many of the data's rows ExampleGen puts in the training split."""
    return max(1, math.floor(summary.rows * TRAIN_FRACTION))


def _combinations(space: SearchSpace) -> list[tuple[int, int]]:
    micro = [
        m
        for m in space.micro_batch_choices
        if space.max_micro_batch is None or m <= space.max_micro_batch
    ]
    return [
        (k, m)
        for k in space.accumulation_steps_choices
        for m in micro
        if space.max_effective_batch is None or k * m <= space.max_effective_batch
    ]


def check(
    summary: DataSummary, hyperparameters: Hyperparameters | None, space: SearchSpace
) -> list[str]:
    """Raises :class:`InputError` for a batch the data cannot fill; returns lines to print.

    ``hyperparameters``: the fixed ones (``--no-tune``), else ``None`` (the search's
    ``space`` is checked).
    """
    train = training_rows(summary)
    split = (
        f"the training split holds about {train:,} examples (two thirds of the "
        f"{summary.rows:,} rows)"
    )
    lines = []
    if hyperparameters is not None:
        k, m = hyperparameters.accumulation_steps, hyperparameters.micro_batch_size
        if k * m > train:
            raise InputError(
                f"--accumulation-steps {k} x --micro-batch-size {m} = an effective batch of "
                f"{k * m:,} examples, but {split}: every update would repeat examples. "
                f"Choose k x m of at most {train:,}."
            )
    else:
        combinations = _combinations(space) or [(1, 1)]
        smallest = min(k * m for k, m in combinations)
        largest = max(k * m for k, m in combinations)
        if smallest > train:
            raise InputError(
                f"The smallest effective batch the search can try is {smallest:,} examples, "
                f"but {split}. Pass smaller --accumulation-steps-choices or "
                "--micro-batch-choices."
            )
        if largest > train:
            lines.append(
                f"[data] note: {split}; trials with an effective batch above that repeat "
                f"examples in each update (up to {largest:,}); --max-effective-batch {train} "
                "skips them"
            )
    width = len(summary.kinds)
    if width >= WIDE_COLUMNS:
        lines.append(
            f"[data] warning: {width:,} feature columns: StatisticsGen, SchemaGen and the "
            "components' first pass over the data take time in proportion to the width, "
            "whatever the rows (StatisticsGen: 41 s at 2,000 columns on 2 cores, minutes "
            "beyond); pass the columns the model needs with --features"
        )
    return lines
