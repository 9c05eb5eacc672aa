"""The ``tfx-accum`` command line: the parser and the dispatch to the commands.

``run`` (tfx_accum.pipeline.cli.run_command: the local pipeline), ``compile``
(tfx_accum.pipeline.cli.compile_command: Kubeflow or Vertex) and ``run-compiled``
(tfx_accum.pipeline.kubeflow.local_run). The options become settings in
tfx_accum.pipeline.cli.arguments.

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
import logging
import os
import sys
import warnings
from collections.abc import Sequence

# Before TensorFlow is imported: keep its C++ INFO/WARNING quiet.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\..*")

from tfx_accum import interrupts  # noqa: E402
from tfx_accum.components.config import settings  # noqa: E402
from tfx_accum.components.config.search_space import ALGORITHMS  # noqa: E402
from tfx_accum.components.config.tasks import TASK_CHOICES  # noqa: E402
from tfx_accum.pipeline import config  # noqa: E402
from tfx_accum.pipeline.checks.data import DATA_FORMATS, EMBEDDED  # noqa: E402
from tfx_accum.pipeline.cli.arguments import FIXED, SPACE, AutoTrainSteps, check_common  # noqa: E402
from tfx_accum.pipeline.cli.temp_dir import command_temp_dir  # noqa: E402
from tfx_accum.pipeline.config import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_UNBLESSED  # noqa: E402
from tfx_accum.pipeline.errors import InputError  # noqa: E402


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


def _token_list(text: str) -> tuple[str, ...]:
    tokens = tuple(token.strip() for token in text.split(",") if token.strip())
    if not tokens:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated values such as N/A,-; got {text!r}"
        )
    return tokens


def _csv(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values)


class _Given(argparse.Action):
    """Stores the value and notes that it was given (``<dest>_given``): a budget given
    outright replaces the default cap on a trial's examples."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


def _add_search_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("search space (Keras Tuner)")
    group.add_argument(
        "--max-trials",
        type=int,
        default=SPACE.max_trials,
        help="trials for bayesian/random search (default %(default)s)",
    )
    group.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default=SPACE.algorithm,
        help="search algorithm (default %(default)s)",
    )
    group.add_argument(
        "--accumulation-steps-choices",
        "--steps-choices",  # the 0.1 name, kept as an alias for one release
        dest="accumulation_steps_choices",
        type=_int_list,
        default=SPACE.accumulation_steps_choices,
        help=f"accumulation steps (k) to try (default {_csv(SPACE.accumulation_steps_choices)})",
    )
    group.add_argument(
        "--micro-batch-choices",
        type=_int_list,
        default=SPACE.micro_batch_choices,
        help=f"micro-batch sizes (m) to try (default {_csv(SPACE.micro_batch_choices)})",
    )
    group.add_argument(
        "--lr-min",
        type=float,
        default=SPACE.learning_rate_min,
        help="smallest learning rate, log scale (default %(default)g)",
    )
    group.add_argument(
        "--lr-max",
        type=float,
        default=SPACE.learning_rate_max,
        help="largest learning rate (default %(default)g)",
    )
    group.add_argument(
        "--max-effective-batch",
        type=int,
        default=SPACE.max_effective_batch,
        help="skip combinations with accumulation steps x micro-batch above this",
    )
    group.add_argument(
        "--max-micro-batch",
        type=int,
        default=SPACE.max_micro_batch,
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
        default=SPACE.tuning_epochs,
        action=_Given,
        help="epochs per trial; every trial sees the same number of examples (default "
        "%(default)s). Given, trials train whole epochs unless --trial-examples is given too",
    )
    group.add_argument(
        "--trial-examples",
        type=int,
        default=SPACE.max_trial_examples,
        action=_Given,
        help="a trial's training examples in all epochs at most: on a large training split "
        "every trial trains on the same seeded subsample, and the Trainer on as many "
        "(default %(default)s; 0: whole epochs)",
    )


def _add_beam_option(parser: argparse.ArgumentParser, default_help: str) -> None:
    parser.add_argument(
        "--beam-pipeline-args",
        default=None,
        metavar="ARGS",
        help="Beam options for the data components, replacing the automatic choice, e.g. "
        f"'--runner=DataflowRunner --project=P ...' (default: {default_help})",
    )


def _add_dask_option(parser: argparse.ArgumentParser, where: str) -> None:
    parser.add_argument(
        "--dask-scheduler",
        default=None,
        metavar="tcp://HOST:PORT",
        help="run the Beam components (StatisticsGen, the Evaluator, ExampleGen on TFRecords) "
        f"on this Dask scheduler's workers ({where}; docs/distributed.md)",
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
    parser.add_argument(
        "--precision",
        choices=settings.PRECISIONS,
        default=None,
        help="the Keras dtype policy the Tuner's and Trainer's models compute in: float32, "
        "mixed_float16 (GPUs; the loss is scaled) or mixed_bfloat16 (TPUs, recent GPUs); "
        "variables and the served outputs stay float32 (default: float32 for run, the node "
        "pool's precision for compile)",
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
        "not quantities; also a column of numbers with a few text values (a grade: K, 1..12)",
    )
    columns.add_argument(
        "--missing-values",
        type=_token_list,
        default=(),
        metavar="TOKENS",
        help="comma-separated cell values CsvExampleGen reads as missing, in every CSV column "
        "(e.g. N/A,-); without it a column of numbers holding such a value is refused",
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
        default=AutoTrainSteps(settings.TRAIN_STEPS),
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
        help=f"accumulation steps k (default {FIXED.accumulation_steps})",
    )
    fixed.add_argument(
        "--micro-batch-size",
        type=int,
        default=None,
        help=f"micro-batch size m (default {FIXED.micro_batch_size})",
    )
    fixed.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help=f"learning rate (default {FIXED.learning_rate:g})",
    )


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
        "--fail-on-anomalies",
        action="store_true",
        help="stop before the Tuner and Trainer when ExampleValidator finds the data at odds "
        "with the schema (exit 2); by default its anomalies are listed in the summary",
    )
    run.add_argument(
        "--force",
        action="store_true",
        help="use an --output-dir that holds files but is no tfx-accum output (its trials.csv, "
        "trials.png and metadata.sqlite are then written over or extended)",
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
        "--allow-signature-change",
        action="store_true",
        help="push into an --output-dir whose serving_model serves other outputs (another label "
        "or task): a server watching it switches to this run's signature",
    )
    run.add_argument(
        "--verbose",
        action="store_true",
        help="show the libraries' output on the console too (always in the run's log file)",
    )
    _add_beam_option(
        run,
        "DirectRunner in-memory on 2 CPUs or fewer or below 64 MiB and 200,000 rows of input, "
        "else one worker per 128 MiB or 500,000 rows up to the CPUs",
    )
    _add_dask_option(
        run,
        "checked first: the scheduler answers, its workers have this environment and see "
        "--data-root and --output-dir",
    )
    _add_model_options(run)
    _add_search_options(run)

    compile_ = commands.add_parser(
        "compile", help="compile the pipeline for Kubeflow Pipelines (or Vertex AI)"
    )
    from tfx_accum.pipeline.kubeflow.compiler import add_compile_arguments

    add_compile_arguments(compile_)
    _add_beam_option(compile_, "DirectRunner with one worker per CPU of the data components' pods")
    _add_dask_option(
        compile_,
        "an address the pods reach; its workers run the pipeline's image and reach "
        "--pipeline-root and --data-root",
    )
    _add_model_options(compile_)
    _add_search_options(compile_)

    from tfx_accum.pipeline.kubeflow.local_run import add_arguments

    add_arguments(
        commands.add_parser(
            "run-compiled",
            help="run a compiled Kubeflow spec here with KFP's local orchestrator (kfp.local)",
        )
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "run-compiled":
            from tfx_accum.pipeline.kubeflow.local_run import run_compiled

            return run_compiled(args)
        check_common(args)
        if args.command != "run":
            from tfx_accum.pipeline.cli.compile_command import compile_command

            return compile_command(args)
        from tfx_accum.pipeline.cli.run_command import run

        with interrupts.handled():  # SIGINT and SIGTERM: one line, exit 130, everywhere
            return run(args)
    except InputError as error:  # bad input: a clear message, no traceback
        print(f"tfx-accum {args.command}: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # before any component started: nothing to resume
        print(
            f"tfx-accum {args.command}: interrupted before the pipeline started.", file=sys.stderr
        )
        return EXIT_INTERRUPTED


def entry(argv: Sequence[str] | None = None) -> None:
    """The ``tfx-accum`` command: :func:`main`, then a prompt exit.

    After a tuned run, the interpreter's own teardown (destroying TensorFlow's traced
    graphs of every trial model, Keras Tuner's objects, TF's thread pools) is long, and
    comes after the summary is printed. By then every output is written and closed (ML Metadata
    commits each write, the log's descriptors are restored), so the process flushes its
    streams and ends at once. Its temporary files, whose ``atexit`` clean-up that exit skips,
    go to one directory removed before it (``tfx_accum.pipeline.cli.temp_dir``).
    """
    with command_temp_dir():
        code = main(argv)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
