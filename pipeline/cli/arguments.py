"""The command line's options turned into the pipeline's settings, validated once.

Every option of ``tfx-accum run`` and ``compile`` that becomes a setting passes through
here: the search space (:func:`search_space_from_args`), the fixed hyperparameters
(:func:`fixed_hyperparameters`), the model and data settings
(:func:`model_settings_from_args`), the blessing (:func:`blessing_from_args`), and what
``create_pipeline`` takes (:func:`pipeline_settings`). A setting that cannot be used is an
``InputError``: one line, exit code 2, before anything runs. The defaults the parser shows
come from the settings' own classes (:data:`SPACE`, :data:`FIXED`).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from tfx_accum.components import settings
from tfx_accum.components.search.search_space import SearchSpace
from tfx_accum.pipeline.errors import InputError

SPACE = SearchSpace()  # the search defaults
FIXED = settings.Hyperparameters()  # the --no-tune defaults


class AutoTrainSteps(int):
    """The --train-steps default, told apart from the same number given explicitly."""


def model_settings_from_args(
    args: argparse.Namespace, model: str, precision: str = settings.DEFAULT_PRECISION
) -> settings.ModelSettings:
    """The ``ModelSettings`` the options ask for (the check then decides the task).

    ``precision``: the default where ``--precision`` is not given (``compile``: the node
    pool's).
    """
    try:
        return settings.ModelSettings(
            model=model,
            num_classes=args.num_classes,
            label_key=args.label_key,
            task=args.task,
            features=args.features,
            exclude_features=args.exclude_features,
            categorical_features=args.categorical,
            precision=args.precision or precision,
        )
    except ValueError as error:
        raise InputError(str(error)) from None


def _trial_examples(args: argparse.Namespace) -> int | None:
    """The cap on a trial's examples: none for 0, or for --tuning-epochs given alone."""
    if getattr(args, "tuning_epochs_given", False) and not getattr(
        args, "trial_examples_given", False
    ):
        return None
    return args.trial_examples or None


def search_space_from_args(args: argparse.Namespace) -> SearchSpace:
    try:
        return SearchSpace(
            accumulation_steps_choices=args.accumulation_steps_choices,
            micro_batch_choices=args.micro_batch_choices,
            learning_rate_min=args.lr_min,
            learning_rate_max=args.lr_max,
            max_effective_batch=args.max_effective_batch,
            max_micro_batch=args.max_micro_batch,
            algorithm=args.algorithm,
            max_trials=args.max_trials,
            tuning_epochs=args.tuning_epochs,
            max_trial_examples=_trial_examples(args),
        )
    except ValueError as error:
        raise InputError(f"invalid search space: {error}") from None


def fixed_hyperparameters(args: argparse.Namespace) -> settings.Hyperparameters | None:
    """The --no-tune hyperparameters (defaults filled in), or None when tuning."""
    given = {
        name: getattr(args, name)
        for name in (
            settings.HP_ACCUMULATION_STEPS,
            settings.HP_MICRO_BATCH_SIZE,
            settings.HP_LEARNING_RATE,
        )
        if getattr(args, name) is not None
    }
    if not args.no_tune:
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise InputError(f"{flags} only apply with --no-tune (the Tuner chooses them).")
        return None
    try:
        return dataclasses.replace(FIXED, **given)
    except (TypeError, ValueError) as error:
        raise InputError(f"invalid fixed hyperparameters: {error}") from None


def pipeline_settings(args: argparse.Namespace) -> dict:
    """``create_pipeline`` settings that ``run`` and ``compile`` share, validated."""
    from tfx_accum.pipeline.local.beam import parse_beam_args

    beam_args = parse_beam_args(args.beam_pipeline_args)
    if getattr(args, "dask_scheduler", None) is not None:  # the Beam components on Dask
        from tfx_accum.pipeline.local.dask_cluster import dask_beam_args

        beam_args = dask_beam_args(args.dask_scheduler, beam_args)
    return dict(
        beam_pipeline_args=beam_args,
        search_space=search_space_from_args(args),
        tune=not args.no_tune,
        hyperparameters=fixed_hyperparameters(args),
        train_steps=args.train_steps,
        train_steps_auto=isinstance(args.train_steps, AutoTrainSteps),
        schema_file=str(Path(args.schema).resolve())
        if args.schema and "://" not in args.schema
        else args.schema,
        bless_metric=args.bless_metric,
        bless_threshold=args.bless_threshold,
        parallel_trials=args.parallel_trials,
        fail_on_anomalies=getattr(args, "fail_on_anomalies", False),  # `run`'s option
        missing_values=_missing_values(args),
    )


def _missing_values(args: argparse.Namespace) -> tuple[str, ...]:
    """``--missing-values``: CSV cells CsvExampleGen reads as missing (CSV only)."""
    tokens = tuple(dict.fromkeys(args.missing_values))
    if tokens and args.data_format == "tfrecord":
        raise InputError("--missing-values applies to CSV files, not --data-format tfrecord.")
    return tokens


def blessing_from_args(args: argparse.Namespace, task: str) -> settings.Blessing:
    """The Evaluator's blessing for the task (as the data check decided it, or a compile's
    --task), validated: exit 2 where it does not fit."""
    try:
        return settings.Blessing.for_task(task, args.bless_metric, args.bless_threshold)
    except ValueError as error:
        raise InputError(str(error)) from None


def check_common(args: argparse.Namespace) -> None:
    """The checks every command's options get before anything else (one line, exit 2)."""
    if args.train_steps < 1:
        raise InputError(f"--train-steps must be >= 1, got {args.train_steps}.")
    if args.parallel_trials is not None and args.parallel_trials < 1:
        raise InputError(f"--parallel-trials must be >= 1, got {args.parallel_trials}.")
    if args.accuracy_threshold is not None:  # the deprecated spelling
        if args.bless_threshold is not None or args.bless_metric not in (None, "accuracy"):
            raise InputError(
                "--accuracy-threshold X is --bless-metric accuracy --bless-threshold X; "
                "give one or the other."
            )
        args.bless_metric, args.bless_threshold = "accuracy", args.accuracy_threshold
    try:
        settings.check_bless_options(args.bless_metric, args.bless_threshold)
    except ValueError as error:
        raise InputError(str(error)) from None
