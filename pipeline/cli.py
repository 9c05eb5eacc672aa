"""The ``tfx-accum`` command line: ``run`` (local pipeline) and ``compile`` (Kubeflow).

Examples:

    tfx-accum run                                   # embedded digits, local orchestration
    tfx-accum run --data-root my_csvs --max-trials 20 --orchestrator beam
    tfx-accum run --no-tune --accumulation-steps 8 --micro-batch-size 16 --train-steps 500
    tfx-accum compile --node-pool gpu --output tfx_accum.yaml \\
        --image REGISTRY/tfx-accum:0.1.0 --pipeline-root gs://BUCKET/root \\
        --data-root gs://BUCKET/data
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

# Before TensorFlow is imported: keep its C++ INFO/WARNING quiet.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\..*")

from tfx_accum import console, interrupts  # noqa: E402
from tfx_accum.components import settings, tasks  # noqa: E402
from tfx_accum.components.search_space import ALGORITHMS, SearchSpace  # noqa: E402
from tfx_accum.components.tasks import CLASSIFICATION, TASK_CHOICES  # noqa: E402
from tfx_accum.pipeline import config  # noqa: E402
from tfx_accum.pipeline.data import DATA_FORMATS, EMBEDDED  # noqa: E402
from tfx_accum.pipeline.errors import InputError  # noqa: E402

_SPACE = SearchSpace()  # the search defaults
# Exit codes: 0 done, 1 a component failed, 2 bad input, 3 the model was not blessed,
# 130 interrupted (Ctrl-C).
EXIT_UNBLESSED = 3
_FIXED = settings.Hyperparameters()  # the --no-tune defaults


class _AutoTrainSteps(int):
    """The --train-steps default, told apart from the same number given explicitly."""


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 1,2,4,8; got {text!r}"
        ) from None


def _name_list(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated column names; got {text!r}")
    return names


def model_settings_from_args(args: argparse.Namespace, model: str) -> settings.ModelSettings:
    """The ``ModelSettings`` the options ask for (the check then decides the task)."""
    try:
        return settings.ModelSettings(
            model=model,
            num_classes=args.num_classes,
            label_key=args.label_key,
            task=args.task,
            features=args.features,
            exclude_features=args.exclude_features,
            categorical_features=args.categorical,
        )
    except ValueError as error:
        raise InputError(str(error)) from None


def _csv(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values)


def _add_search_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("search space (Keras Tuner)")
    group.add_argument(
        "--max-trials",
        type=int,
        default=_SPACE.max_trials,
        help="trials for bayesian/random search (default %(default)s)",
    )
    group.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default=_SPACE.algorithm,
        help="search algorithm (default %(default)s)",
    )
    group.add_argument(
        "--accumulation-steps-choices",
        "--steps-choices",  # the 0.1 name, kept as an alias for one release
        dest="accumulation_steps_choices",
        type=_int_list,
        default=_SPACE.accumulation_steps_choices,
        help=f"accumulation steps (k) to try (default {_csv(_SPACE.accumulation_steps_choices)})",
    )
    group.add_argument(
        "--micro-batch-choices",
        type=_int_list,
        default=_SPACE.micro_batch_choices,
        help=f"micro-batch sizes (m) to try (default {_csv(_SPACE.micro_batch_choices)})",
    )
    group.add_argument(
        "--lr-min",
        type=float,
        default=_SPACE.learning_rate_min,
        help="smallest learning rate, log scale (default %(default)g)",
    )
    group.add_argument(
        "--lr-max",
        type=float,
        default=_SPACE.learning_rate_max,
        help="largest learning rate (default %(default)g)",
    )
    group.add_argument(
        "--max-effective-batch",
        type=int,
        default=_SPACE.max_effective_batch,
        help="skip combinations with accumulation steps x micro-batch above this",
    )
    group.add_argument(
        "--max-micro-batch",
        type=int,
        default=_SPACE.max_micro_batch,
        help="drop micro-batch choices above this before the search (on a GPU a memory "
        "probe also drops those that do not fit; on the CPU this is the only cap)",
    )
    group.add_argument(
        "--parallel-trials",
        type=int,
        default=None,
        help="trials run side by side, one worker process each (Keras Tuner's distributed "
        "mode; one GPU per worker where there are several). Default: 1 for run, the node "
        "pool's parallel_trials for compile",
    )
    group.add_argument(
        "--tuning-epochs",
        type=int,
        default=_SPACE.tuning_epochs,
        help="epochs per trial; every trial sees the same number of examples (default %(default)s)",
    )


def _add_beam_option(parser: argparse.ArgumentParser, default_help: str) -> None:
    parser.add_argument(
        "--beam-pipeline-args",
        default=None,
        metavar="ARGS",
        help="Beam options for the data components, replacing the automatic choice, e.g. "
        f"'--runner=DataflowRunner --project=P ...' (default: {default_help})",
    )


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=None,
        help=f"{', '.join(settings.MODEL_NAMES)}, or your own model function as "
        f"package.module:function (default {settings.DEFAULT_MODEL} for tabular data, cnn for "
        "an image feature and the embedded digits; on numeric columns cnn and densenet121 "
        "read a square pixel grid as an image; densenet121 is the StackOverflow setup)",
    )
    parser.add_argument(
        "--label-key",
        default=settings.LABEL_KEY,
        help="name of the label column (default %(default)s)",
    )
    parser.add_argument(
        "--data-format",
        choices=DATA_FORMATS,
        default=None,
        help="csv, or tfrecord (tf.Example records; read by ImportExampleGen); default: "
        "what --data-root holds (compile: csv)",
    )
    parser.add_argument(
        "--num-classes",
        type=int,
        default=None,
        help="number of classes (default: inferred from the labels; given, it is checked "
        "against them)",
    )
    parser.add_argument(
        "--task",
        choices=TASK_CHOICES,
        default=None,
        help="what the label is (default: inferred from it, one line says which and why: text "
        "or few distinct whole numbers are classes, fractional or many numbers a regression "
        "target; compile: classification unless given)",
    )
    columns = parser.add_argument_group("columns")
    columns.add_argument(
        "--features",
        type=_name_list,
        default=None,
        metavar="NAMES",
        help="only these comma-separated columns are the model's features (default: every "
        "column but the label)",
    )
    columns.add_argument(
        "--exclude-features",
        type=_name_list,
        default=(),
        metavar="NAMES",
        help="comma-separated columns the model never sees (an id, a column that leaks the label)",
    )
    columns.add_argument(
        "--categorical",
        type=_name_list,
        default=(),
        metavar="NAMES",
        help="comma-separated integer columns that are categories (a zip code, an hour), "
        "not quantities",
    )
    columns.add_argument(
        "--schema",
        default=None,
        metavar="FILE",
        help="your schema.pbtxt, imported by ImportSchemaGen instead of SchemaGen's inferred "
        "one: the columns it leaves out are not features, INT features it marks "
        "int_domain.is_categorical are categories",
    )
    parser.add_argument(
        "--train-steps",
        type=int,
        default=_AutoTrainSteps(settings.TRAIN_STEPS),
        help="Trainer optimizer updates, each a whole effective batch (default %(default)s, "
        "raised when tuning so that the Trainer sees at least the best trial's examples)",
    )
    parser.add_argument(
        "--bless-metric",
        default=None,
        help="the metric the Evaluator blesses on: accuracy, or for binary tasks auc, "
        "precision, recall; mse or mae for regression (default: accuracy, or mse). Every "
        "model must also beat the trivial baseline on the eval split (the majority class; "
        "the mean predictor)",
    )
    parser.add_argument(
        "--bless-threshold",
        type=float,
        default=None,
        help="a fixed bar on --bless-metric as well: at least this (at most, for mse and "
        "mae); needed for precision, recall and mae (default: none, beat the baseline; for "
        "auc, beat chance 0.5)",
    )
    parser.add_argument(
        "--accuracy-threshold",
        type=float,
        default=None,
        help="deprecated: --bless-metric accuracy --bless-threshold X",
    )
    fixed = parser.add_argument_group("fixed hyperparameters (with --no-tune)")
    fixed.add_argument(
        "--no-tune",
        action="store_true",
        help="skip the Tuner; train with the fixed hyperparameters below",
    )
    fixed.add_argument(
        "--accumulation-steps",
        type=int,
        default=None,
        help=f"accumulation steps k (default {_FIXED.accumulation_steps})",
    )
    fixed.add_argument(
        "--micro-batch-size",
        type=int,
        default=None,
        help=f"micro-batch size m (default {_FIXED.micro_batch_size})",
    )
    fixed.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help=f"learning rate (default {_FIXED.learning_rate:g})",
    )


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
        return dataclasses.replace(_FIXED, **given)
    except (TypeError, ValueError) as error:
        raise InputError(f"invalid fixed hyperparameters: {error}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfx-accum",
        description="Exact gradient accumulation for Keras, tuned and trained by TFX.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("Examples:", 1)[1],
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the pipeline locally (LocalDagRunner or Beam)")
    run.add_argument(
        "--data-root",
        default=None,
        help="directory of CSV files with a header and a label column, or of TFRecord files "
        "of tf.Examples (default: an embedded data set, --embedded)",
    )
    run.add_argument(
        "--embedded",
        choices=EMBEDDED,
        default="digits",
        help="without --data-root: the 8x8 digits as a CSV (default), or as 32x32 PNG "
        "images in TFRecords (digit-images)",
    )
    run.add_argument(
        "--output-dir",
        default=config.DEFAULT_OUTPUT_DIR,
        help="where artifacts, metadata, the pushed model and reports go (default ./%(default)s)",
    )
    run.add_argument(
        "--orchestrator",
        choices=("local", "beam"),
        default="local",
        help="LocalDagRunner (default) or Beam's BeamDagRunner",
    )
    run.add_argument("--no-cache", action="store_true", help="disable the TFX cache")
    run.add_argument(
        "--allow-unblessed",
        action="store_true",
        help=f"exit 0 also when the Evaluator does not bless the model (else {EXIT_UNBLESSED})",
    )
    run.add_argument(
        "--verbose",
        action="store_true",
        help="show the libraries' output on the console too (always in the run's log file)",
    )
    _add_beam_option(
        run,
        "DirectRunner in-memory below 64 MiB of input, else one worker per 128 MiB up to the CPUs",
    )
    _add_model_options(run)
    _add_search_options(run)

    compile_ = commands.add_parser(
        "compile", help="compile the pipeline for Kubeflow Pipelines (or Vertex AI)"
    )
    from tfx_accum.pipeline.kubeflow import add_compile_arguments

    add_compile_arguments(compile_)
    _add_beam_option(compile_, "DirectRunner with one worker per CPU of the data components' pods")
    _add_model_options(compile_)
    _add_search_options(compile_)

    from tfx_accum.pipeline.kubeflow_local import add_arguments

    add_arguments(
        commands.add_parser(
            "run-compiled",
            help="run a compiled Kubeflow spec here with KFP's local orchestrator (kfp.local)",
        )
    )
    return parser


def pipeline_settings(args: argparse.Namespace) -> dict:
    """``create_pipeline`` settings that ``run`` and ``compile`` share, validated."""
    from tfx_accum.pipeline.beam import parse_beam_args

    return dict(
        beam_pipeline_args=parse_beam_args(args.beam_pipeline_args),
        search_space=search_space_from_args(args),
        tune=not args.no_tune,
        hyperparameters=fixed_hyperparameters(args),
        train_steps=args.train_steps,
        train_steps_auto=isinstance(args.train_steps, _AutoTrainSteps),
        schema_file=str(Path(args.schema).resolve())
        if args.schema and "://" not in args.schema
        else args.schema,
        bless_metric=args.bless_metric,
        bless_threshold=args.bless_threshold,
        parallel_trials=args.parallel_trials,
    )


def _blessing(args: argparse.Namespace, task: str) -> settings.Blessing:
    """The Evaluator's blessing for the task (as the data check decided it, or a compile's
    --task), validated: exit 2 where it does not fit."""
    try:
        return settings.Blessing.for_task(task, args.bless_metric, args.bless_threshold)
    except ValueError as error:
        raise InputError(str(error)) from None


def _check_common(args: argparse.Namespace) -> None:
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


def _summary_lines(
    summary,
    blessing: settings.Blessing,
    trial_files,
    seconds: float,
    allow_unblessed: bool = False,
) -> list[str]:
    lines = ["", "=== tfx-accum summary ==="]
    if summary.best_hyperparameters:
        hp = summary.best_hyperparameters
        lines.append(
            f"best trial: accumulation_steps={hp.accumulation_steps} "
            f"micro_batch={hp.micro_batch_size} learning_rate={hp.learning_rate:.3g} "
            f"effective_batch={hp.effective_batch}"
        )
        if summary.resplit:
            lines.append(
                f"  (trial {summary.resplit['trial']} ran it as {summary.resplit['split']}; the "
                "Trainer used the faster split above, which trains the same model)"
            )
    else:
        lines.append("tuning: off (fixed hyperparameters)")
    budget = summary.trainer_budget
    if budget:
        lines.append("budget: " + _budget_text(budget, summary.best_trial_examples))
    from tfx_accum.pipeline.evaluation import blessing_reason, evaluation_line

    if summary.evaluation is not None:
        lines.append(evaluation_line(summary.evaluation, blessing.task))
    if summary.blessed is None:
        lines.append("blessed: unknown")
    elif summary.blessed:
        lines.append(f"blessed: yes ({blessing_reason(summary.evaluation, blessing, True)})")
    else:
        exit_code = (
            f"exit code 0 as --allow-unblessed asks (else {EXIT_UNBLESSED})"
            if allow_unblessed
            else f"exit code {EXIT_UNBLESSED} (--allow-unblessed to exit 0)"
        )
        lines.append(
            f"blessed: no ({blessing_reason(summary.evaluation, blessing, False)}): not "
            f"pushed; {exit_code}"
        )
    lines.append(f"pushed to: {summary.pushed_to or 'not pushed'}")
    lines.append(trial_files)
    lines.append(f"wall time: {seconds:.0f} s")
    return lines


def _budget_text(budget: dict, best_trial: int | None) -> str:
    """One budget in examples: the Trainer's, and the best trial's when they are one."""
    trained = (
        f"{budget['examples']:,} training examples ({budget['updates']:,} updates x "
        f"{budget['global_batch']})"
    )
    kept = ""
    if budget.get("best_epoch") and budget.get("validation_score") is not None:
        kept = (
            f"; the model is epoch {budget['best_epoch']}'s, validation score "
            f"{budget['validation_score']:.4f}"
        )
    if best_trial and best_trial == budget["examples"]:
        return f"{trained}, the best trial's and the Trainer's{kept}"
    if best_trial:
        return f"Trainer {trained}, the best trial {best_trial:,} (--train-steps){kept}"
    return f"Trainer {trained}{kept}"


def _trial_files(summary, output_dir: Path, task: str) -> str:
    """Writes this run's trials.csv/png; with tuning off, earlier ones are left alone."""
    from tfx_accum.pipeline.report import write_trials

    written = write_trials(summary.trials, output_dir, tasks.OBJECTIVES[task])
    if written:
        return f"trials: {written[0]} and {written[1]}"
    earlier = [p.name for p in (output_dir / "trials.csv", output_dir / "trials.png") if p.exists()]
    if earlier:
        return f"trials: none in this run ({' and '.join(earlier)} are from an earlier run)"
    return "trials: none in this run"


def _check_model_name(model: str | None) -> None:
    if model is not None and model not in settings.MODEL_NAMES:
        if not settings.is_model_function(model):
            raise InputError(
                f"--model {model!r}: use one of {', '.join(settings.MODEL_NAMES)}, or your own "
                "model function as package.module:function."
            )


def _model_for(args: argparse.Namespace, summary, requested) -> str:
    """--model, or the default that fits the data (``summary``: pipeline.data.DataSummary,
    ``requested``: the run's ``ModelSettings``, for the columns the model gets).

    Images get ``cnn``, as do the embedded digits (a square pixel grid); tabular data gets
    ``mlp``. An image model on numeric columns needs a square grid; a model function's
    model must take the data's features (it is built once here to check), and the
    features it leaves out are named.
    """
    from tfx_accum.components.columns import select_features
    from tfx_accum.components.feature_kinds import CATEGORICAL
    from tfx_accum.components.model_rules import (
        ModelChoiceError,
        check_model_suits,
        default_model,
    )

    model = args.model
    _check_model_name(model)
    all_kinds = dict(summary.kinds)
    chosen = select_features(
        list(all_kinds), requested.label_key, requested.features, requested.exclude_features
    )
    kinds = {
        name: CATEGORICAL if name in requested.categorical_features else all_kinds[name]
        for name in chosen
    }
    if model is None:
        model = default_model(kinds, embedded_grid=args.data_root is None)
    if settings.is_model_function(model):
        from tfx_accum.pipeline.model_path import add_current_directory

        if added := add_current_directory(model):
            console.say(added)
        # TensorFlow's start-up lines are not the run's: the console stays clean.
        with console.capture(os.devnull, verbose=args.verbose):
            import keras_tuner

            from tfx_accum.components.custom_model import (
                ModelFunctionError,
                call_model_function,
                declared_inputs,
            )

            description = summary.description(requested)
            try:
                built = call_model_function(model, description, keras_tuner.HyperParameters())
            except ModelFunctionError as error:
                problem, declared = str(error), []
            else:
                problem, declared = None, declared_inputs(built)
        if problem:
            raise InputError(problem)
        left_out = [f.name for f in description.features if f.input_name not in declared]
        if left_out:
            shown = ", ".join(map(repr, left_out[:8])) + (", ..." if len(left_out) > 8 else "")
            console.say(
                f"[data] the model function declares {len(declared)} of "
                f"{len(description.features)} features; not used (not read, not served): {shown}"
            )
        return model
    try:
        check_model_suits(model, kinds)
    except ModelChoiceError as error:
        raise InputError(str(error)) from None
    return model


def _run(args: argparse.Namespace) -> int:
    import datetime

    from tfx_accum.pipeline import output_dir as output_dirs
    from tfx_accum.pipeline.data import decide_label, embedded_summary, validate_data_root
    from tfx_accum.pipeline.local_runner import LocalPaths, prepare_data

    start = time.monotonic()
    # Bad settings, output directory or data: exit 2 before anything is written.
    settings_ = pipeline_settings(args)
    _check_model_name(args.model)
    requested = model_settings_from_args(args, args.model or settings.DEFAULT_MODEL)
    output_dir = Path(args.output_dir).resolve()
    output_dirs.check(output_dir)  # read only: a missing one is created by claim()
    # Your data is checked before anything is written (the output directory included);
    # the embedded data are written, if need be, once the directory is ours.
    if args.data_root:
        checked = validate_data_root(args.data_root, requested, args.data_format, args.schema)
    else:
        checked = decide_label(embedded_summary(args.embedded), requested)
    # The model must suit the data, the blessing its task, and the batch must fit in it.
    model_name = _model_for(args, checked, requested)
    blessing = _blessing(args, checked.task)
    from tfx_accum.pipeline import bounds

    for line in bounds.check(checked, settings_["hyperparameters"], settings_["search_space"]):
        console.say(line)
    # The task and classes as the check decided them: the components start from them.
    decided = dataclasses.replace(
        requested, model=model_name, task=checked.task, num_classes=checked.num_classes
    )
    settings_["model_settings"] = decided
    with output_dirs.claim(output_dir):
        data_root, checked = prepare_data(
            args.data_root,
            LocalPaths(output_dir),
            decided,
            checked,
            embedded=args.embedded,
            data_format=args.data_format,
        )
        if args.model is None:
            data = (
                f"the embedded {args.embedded}"
                if args.data_root is None
                else ("image data" if model_name == "cnn" else "tabular data")
            )
            console.say(f"[data] model: {model_name} (the default for {data}; --model to choose)")
        if checked.label_warning():
            console.say(f"[data] warning: {checked.label_warning()}")
        log = output_dir / "logs" / time.strftime("run-%Y%m%d-%H%M%S.log")
        run_started = datetime.datetime.now().isoformat()
        with console.capture(log, verbose=args.verbose) as captured:
            console.say(f"[tfx-accum] log: {captured.path}")
            run = _LocalRun(
                data_root, checked, model_name, blessing, captured.path, run_started, start
            )
            return _run_pipeline(args, settings_, output_dir, run)


@dataclasses.dataclass(frozen=True)
class _LocalRun:
    """What _run prepared for one local run (checked data, model, log, start times)."""

    data_root: str
    checked: object
    model_name: str
    blessing: settings.Blessing
    log: Path
    run_started: str  # ISO time, names this run's ML Metadata context
    start: float  # monotonic


def _run_pipeline(args, settings_, output_dir: Path, run: _LocalRun) -> int:
    from tfx_accum.pipeline import failures, local_runner
    from tfx_accum.pipeline.report import mark_unfinished_as_canceled, read_summary

    metadata = str(output_dir / "metadata.sqlite")
    try:
        if Path(metadata).exists():
            # We hold the directory's lock: anything still RUNNING was left by a killed run.
            left = mark_unfinished_as_canceled(metadata, None)
            if left:
                console.say(
                    f"[tfx-accum] an earlier run was stopped during {', '.join(left)}; "
                    "marked canceled, running it again"
                )
        paths = local_runner.run_local(
            data_root=run.data_root,
            checked=run.checked,
            output_dir=str(output_dir),
            orchestrator=args.orchestrator,
            enable_cache=not args.no_cache,
            **settings_,
        )
        summary = read_summary(str(paths.metadata_path), run.run_started)
        trial_files = _trial_files(summary, paths.output_dir, run.blessing.task)
    except InputError:
        raise  # bad input: main prints it as one line, exit 2
    except KeyboardInterrupt:
        return failures.interrupted(metadata, run.run_started, local_runner.current_component())
    except Exception as error:  # noqa: BLE001 - reported with its cause, then exit 1
        if interrupts.requested():  # a library turned the interrupt into an error
            return failures.interrupted(metadata, run.run_started, local_runner.current_component())
        return failures.failed(error, run.log, output_dir)
    for line in _summary_lines(
        summary,
        run.blessing,
        trial_files,
        time.monotonic() - run.start,
        args.allow_unblessed,
    ):
        console.say(line)
    if summary.blessed is False and not args.allow_unblessed:
        return EXIT_UNBLESSED
    return 0


def _compile(args: argparse.Namespace) -> int:
    from tfx_accum.pipeline.kubeflow import compile_from_args

    _check_model_name(args.model)
    model_settings = model_settings_from_args(args, args.model or settings.DEFAULT_MODEL)
    if model_settings.task is None:
        # The Evaluator's metrics follow the task, fixed when the pipeline is compiled; the
        # Tuner and Trainer stop with one line if the data's label cannot be classes.
        model_settings = dataclasses.replace(model_settings, task=CLASSIFICATION)
    if args.schema and "://" not in args.schema:
        from tfx_accum.pipeline.schema_file import read_schema_file

        read_schema_file(args.schema)  # a local file is checked before the compile
    _blessing(args, tasks.evaluated_task(model_settings.task, model_settings.num_classes))
    return compile_from_args(
        args,
        {
            **pipeline_settings(args),
            "model_settings": model_settings,
            "data_format": args.data_format or "csv",
        },
    )


def options_markdown(command: str) -> str:
    """The option table of ``tfx-accum COMMAND`` in Markdown, made from the parser itself.

    The README's tables are this function's output (a test checks it), so every default is
    written once, here in the code. Regenerate with
    ``python -c "from tfx_accum.pipeline.cli import options_markdown as o; print(o('run'))"``.
    """
    subparsers = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    rows = ["| option | default | meaning |", "| --- | --- | --- |"]
    for action in subparsers.choices[command]._actions:
        if not action.option_strings or action.dest == "help":
            continue
        flags = " / ".join(f"`{flag}`" for flag in action.option_strings)
        if action.choices:
            flags += " " + "\\|".join(str(c) for c in action.choices)
        if action.required:
            default = "required"
        elif isinstance(action, argparse._StoreTrueAction):
            default = "off"
        elif action.dest in dataclasses.asdict(_FIXED):
            default = f"{getattr(_FIXED, action.dest):g}"
        elif action.default is None:
            default = "none"
        elif isinstance(action.default, tuple):
            default = _csv(action.default)
        else:
            default = (
                f"{action.default:g}" if isinstance(action.default, float) else str(action.default)
            )
        meaning = (action.help or "").replace("%(default)s", default)
        meaning = meaning.replace("%(default)g", default).replace("|", "\\|")
        rows.append(f"| {flags} | {default} | {meaning} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "run-compiled":
            from tfx_accum.pipeline.kubeflow_local import run_compiled

            return run_compiled(args)
        _check_common(args)
        if args.command != "run":
            return _compile(args)
        with interrupts.handled():  # SIGINT and SIGTERM: one line, exit 130, everywhere
            return _run(args)
    except InputError as error:  # bad input: a clear message, no traceback
        print(f"tfx-accum {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before any component started: nothing to resume
        print(
            f"tfx-accum {args.command}: interrupted before the pipeline started.", file=sys.stderr
        )
        return 130


def entry(argv: Sequence[str] | None = None) -> None:
    """The ``tfx-accum`` command: :func:`main`, then a prompt exit.

    After a tuned run, the interpreter's own teardown (destroying TensorFlow's traced
    graphs of every trial model, Keras Tuner's objects, TF's thread pools) took 15-20 s
    after the summary was printed. By then every output is written and closed (ML Metadata
    commits each write, the log's descriptors are restored), so the process flushes its
    streams and ends at once.
    """
    code = main(argv)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
