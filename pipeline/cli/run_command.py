"""``tfx-accum run``: the local run, from the checks to the summary.

Bad settings, output directory or data stop the run with one line (exit 2) before
anything is written; then the output directory is claimed, the pipeline runs
(tfx_accum.pipeline.local.runner), and the summary is printed (tfx_accum.pipeline.cli.summary). Exit
codes: tfx_accum.pipeline.config.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

from tfx_accum import console, interrupts
from tfx_accum.components.config import blessing, settings
from tfx_accum.pipeline.checks.model_choice import check_model_name, model_for
from tfx_accum.pipeline.checks.serving_signature import check_signature
from tfx_accum.pipeline.cli.arguments import (
    blessing_from_args,
    model_settings_from_args,
    pipeline_settings,
)
from tfx_accum.pipeline.cli.summary import summary_lines, trial_files
from tfx_accum.pipeline.config import EXIT_FAILED, EXIT_UNBLESSED
from tfx_accum.pipeline.errors import InputError


def run(args: argparse.Namespace) -> int:
    """Runs ``tfx-accum run``; returns the exit code."""
    import datetime

    from tfx_accum.pipeline.checks import output_dir as output_dirs
    from tfx_accum.pipeline.checks.data import decide_label, embedded_summary, validate_data_root
    from tfx_accum.pipeline.local.runner import LocalPaths, prepare_data

    start = time.monotonic()
    # Bad settings, output directory or data: exit 2 before anything is written.
    settings_ = pipeline_settings(args)
    check_model_name(args.model)
    requested = model_settings_from_args(args, args.model or settings.DEFAULT_MODEL)
    output_dir = Path(args.output_dir).resolve()
    # Read only: a missing one is created by claim().
    output_dirs.check(output_dir, args.data_root, getattr(args, "force", False))
    if args.dask_scheduler is not None:  # it answers, with workers of this environment
        from tfx_accum.pipeline.local import dask_cluster

        workers = dask_cluster.check_scheduler(args.dask_scheduler)
        console.say(f"[dask] {args.dask_scheduler}: {len(workers)} worker(s)")
    # Your data is checked before anything is written (the output directory included);
    # the embedded data are written, if need be, once the directory is ours.
    if args.data_root:
        checked = validate_data_root(
            args.data_root,
            requested,
            args.data_format,
            args.schema,
            missing_values=settings_["missing_values"],
        )
    else:
        checked = decide_label(embedded_summary(args.embedded), requested)
    # What the serving directory serves must not change signature unasked (reading a
    # version's SavedModel starts TensorFlow, whose start-up lines are not the run's).
    with console.capture(os.devnull, verbose=args.verbose):
        check_signature(
            LocalPaths(output_dir).serving_model_dir,
            checked.task,
            checked.num_classes,
            requested.label_key,
            args.allow_signature_change,
        )
    # The model must suit the data, the blessing its task, and the batch must fit in it.
    model_name = model_for(args, checked, requested)
    blessing = blessing_from_args(args, checked.task)
    from tfx_accum.pipeline.checks import bounds

    for line in bounds.check(checked, settings_["hyperparameters"], settings_["search_space"]):
        console.say(line)
    # The task and classes as the check decided them: the components start from them.
    decided = dataclasses.replace(
        requested, model=model_name, task=checked.task, num_classes=checked.num_classes
    )
    settings_ = {**settings_, "model_settings": decided}
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
        if args.dask_scheduler is not None:  # before any component runs
            dask_cluster.check_shared_storage(
                args.dask_scheduler, output_dir, data_root, checked.files
            )
            console.say("[dask] every worker sees --data-root and --output-dir")
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
    """What run() prepared for one local run (checked data, model, log, start times)."""

    data_root: str
    checked: object
    model_name: str
    blessing: blessing.Blessing
    log: Path
    run_started: str  # ISO time, names this run's ML Metadata context
    start: float  # monotonic


def _run_pipeline(args, settings_, output_dir: Path, run: _LocalRun) -> int:
    from tfx_accum.pipeline.cli import failures
    from tfx_accum.pipeline.cli.report import mark_unfinished_as_canceled, read_summary
    from tfx_accum.pipeline.local import runner as local_runner

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
        summary = read_summary(
            str(paths.metadata_path), run.run_started, str(paths.serving_model_dir)
        )
        written = trial_files(summary, paths.output_dir, run.blessing.task)
    except InputError:
        raise  # bad input: main prints it as one line, exit 2
    except KeyboardInterrupt:
        return failures.interrupted(metadata, run.run_started, local_runner.current_component())
    except Exception as error:  # noqa: BLE001 - reported with its cause, then exit 1
        if interrupts.requested():  # a library turned the interrupt into an error
            return failures.interrupted(metadata, run.run_started, local_runner.current_component())
        return failures.failed(error, run.log, output_dir)
    for line in summary_lines(
        summary,
        run.blessing,
        written,
        time.monotonic() - run.start,
        args.allow_unblessed,
    ):
        console.say(line)
    if summary.not_served:
        return EXIT_FAILED
    if summary.blessed is False and not args.allow_unblessed:
        return EXIT_UNBLESSED
    return 0
