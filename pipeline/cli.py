"""The ``tfx-accum`` command line: ``run`` (local pipeline) and ``compile`` (Kubeflow).

Examples:

    tfx-accum run                                   # embedded digits, local orchestration
    tfx-accum run --data-root my_csvs --max-trials 20 --orchestrator beam
    tfx-accum run --no-tune --train-steps 500
    tfx-accum compile --node-pool gpu --output tfx_accum.yaml \\
        --image REGISTRY/tfx-accum:0.1.0 --pipeline-root gs://BUCKET/root \\
        --data-root gs://BUCKET/data
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Sequence

# Before TensorFlow is imported (components imports it): keep its C++ INFO/WARNING quiet.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\..*")

from components.search_space import ALGORITHMS, SearchSpace  # noqa: E402
from pipeline import config  # noqa: E402
from pipeline.errors import InputError  # noqa: E402


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 1,2,4,8; got {text!r}"
        ) from None


def _add_search_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("search space (Keras Tuner)")
    group.add_argument(
        "--max-trials",
        type=int,
        default=config.MAX_TRIALS,
        help="trials for bayesian/random search (default %(default)s)",
    )
    group.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default=config.ALGORITHM,
        help="search algorithm (default %(default)s)",
    )
    group.add_argument(
        "--steps-choices",
        type=_int_list,
        default=config.STEPS_CHOICES,
        help="gradient_accumulation_steps choices (default 1,2,4,8)",
    )
    group.add_argument(
        "--micro-batch-choices",
        type=_int_list,
        default=config.MICRO_BATCH_CHOICES,
        help="micro-batch size choices (default 8,16,32,64)",
    )
    group.add_argument(
        "--lr-min",
        type=float,
        default=config.LEARNING_RATE_MIN,
        help="smallest learning rate, log scale (default %(default)g)",
    )
    group.add_argument(
        "--lr-max",
        type=float,
        default=config.LEARNING_RATE_MAX,
        help="largest learning rate (default %(default)g)",
    )
    group.add_argument(
        "--max-effective-batch",
        type=int,
        default=None,
        help="skip combinations with steps x micro-batch above this",
    )
    group.add_argument(
        "--tuning-epochs",
        type=int,
        default=config.TUNING_EPOCHS,
        help="epochs per trial; every trial sees the same number of examples (default %(default)s)",
    )


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    from components.models import MODEL_NAMES

    parser.add_argument(
        "--model",
        choices=MODEL_NAMES,
        default=config.DEFAULT_MODEL,
        help="architecture (default %(default)s; densenet121 is the StackOverflow setup)",
    )
    parser.add_argument(
        "--label-key",
        default=config.LABEL_KEY,
        help="name of the label column (default %(default)s)",
    )
    parser.add_argument(
        "--train-steps",
        type=int,
        default=config.TRAIN_STEPS,
        help="Trainer optimizer updates, each a whole effective batch (default %(default)s)",
    )
    parser.add_argument(
        "--accuracy-threshold",
        type=float,
        default=config.ACCURACY_THRESHOLD,
        help="eval accuracy needed to bless and push (default %(default)s)",
    )
    parser.add_argument(
        "--no-tune",
        action="store_true",
        help="skip the Tuner; train with fixed hyperparameters (steps 4, micro-batch 16, lr 3e-3)",
    )


def search_space_from_args(args: argparse.Namespace) -> SearchSpace:
    try:
        return _search_space(args)
    except ValueError as error:
        raise InputError(f"invalid search space: {error}") from None


def _search_space(args: argparse.Namespace) -> SearchSpace:
    return SearchSpace(
        steps_choices=args.steps_choices,
        micro_batch_choices=args.micro_batch_choices,
        learning_rate_min=args.lr_min,
        learning_rate_max=args.lr_max,
        max_effective_batch=args.max_effective_batch,
        algorithm=args.algorithm,
        max_trials=args.max_trials,
        tuning_epochs=args.tuning_epochs,
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
        help="directory of CSV files with a header and a label column "
        "(default: the embedded 8x8 digits)",
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
    _add_model_options(run)
    _add_search_options(run)

    compile_ = commands.add_parser(
        "compile", help="compile the pipeline for Kubeflow Pipelines (or Vertex AI)"
    )
    from pipeline.kubeflow import add_compile_arguments

    add_compile_arguments(compile_)
    _add_model_options(compile_)
    _add_search_options(compile_)
    return parser


def model_settings(args: argparse.Namespace) -> dict:
    """The pipeline settings that ``run`` and ``compile`` share."""
    return dict(
        tune=not args.no_tune,
        model=args.model,
        label_key=args.label_key,
        train_steps=args.train_steps,
        accuracy_threshold=args.accuracy_threshold,
    )


def _check_common(args: argparse.Namespace) -> None:
    if args.train_steps < 1:
        raise InputError(f"--train-steps must be >= 1, got {args.train_steps}.")
    if not 0.0 <= args.accuracy_threshold <= 1.0:
        raise InputError(f"--accuracy-threshold must be in [0, 1], got {args.accuracy_threshold}.")


def _run(args: argparse.Namespace, space: SearchSpace) -> int:
    from pipeline.local_runner import run_local
    from pipeline.report import read_summary, write_trials

    start = time.monotonic()
    paths = run_local(
        data_root=args.data_root,
        output_dir=args.output_dir,
        search_space=space,
        orchestrator=args.orchestrator,
        enable_cache=not args.no_cache,
        **model_settings(args),
    )
    summary = read_summary(str(paths.metadata_path))
    written = write_trials(summary.trials, paths.output_dir)
    print("\n=== tfx-accum summary ===")
    if summary.best_hyperparameters:
        hp = summary.best_hyperparameters
        steps, micro = hp["gradient_accumulation_steps"], hp["micro_batch_size"]
        print(
            f"best trial: steps={steps} micro_batch={micro} "
            f"learning_rate={hp['learning_rate']:.3g} effective_batch={steps * micro}"
        )
    else:
        print("tuning: off (fixed hyperparameters)")
    if summary.accuracy is not None:
        print(f"evaluation accuracy: {summary.accuracy:.4f} (threshold {args.accuracy_threshold})")
    print(f"blessed: {'yes' if summary.blessed else 'no'}")
    print(f"pushed to: {summary.pushed_to or 'not pushed'}")
    if written:
        print(f"trials: {written[0]} and {written[1]}")
    print(f"wall time: {time.monotonic() - start:.0f} s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _check_common(args)
        space = search_space_from_args(args)
        if args.command == "run":
            return _run(args, space)
        from pipeline.kubeflow import compile_from_args

        return compile_from_args(args, space, model_settings(args))
    except InputError as error:  # bad input: a clear message, no traceback
        print(f"tfx-accum {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
