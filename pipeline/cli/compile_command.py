"""``tfx-accum compile``: the pipeline for Kubeflow Pipelines or Vertex AI.

The data is not read at compile time (it is on the cluster's storage): the task is
``--task`` (default classification), which the Evaluator's metrics follow; the Tuner and
Trainer stop with one line if the statistics say the label cannot be that task.
"""

from __future__ import annotations

import argparse
import dataclasses

from tfx_accum.components.config import settings, tasks
from tfx_accum.components.config.tasks import CLASSIFICATION
from tfx_accum.pipeline.checks.model_choice import check_model_name
from tfx_accum.pipeline.cli.arguments import (
    blessing_from_args,
    model_settings_from_args,
    pipeline_settings,
)


def compile_command(args: argparse.Namespace) -> int:
    """Runs ``tfx-accum compile``; returns the exit code."""
    from tfx_accum.pipeline.kubeflow.compiler import compile_from_args
    from tfx_accum.pipeline.kubeflow.profiles import get_profile

    check_model_name(args.model)
    pool = get_profile(args.node_pool, args.profiles)  # its precision, unless --precision
    model_settings = model_settings_from_args(
        args, args.model or settings.DEFAULT_MODEL, pool.precision
    )
    if model_settings.task is None:
        # The Evaluator's metrics follow the task, fixed when the pipeline is compiled; the
        # Tuner and Trainer stop with one line if the data's label cannot be classes.
        model_settings = dataclasses.replace(model_settings, task=CLASSIFICATION)
    if args.schema and "://" not in args.schema:
        from tfx_accum.pipeline.checks.schema_file import read_schema_file

        read_schema_file(args.schema)  # a local file is checked before the compile
    blessing_from_args(args, tasks.evaluated_task(model_settings.task, model_settings.num_classes))
    return compile_from_args(
        args,
        {
            **pipeline_settings(args),
            "model_settings": model_settings,
            "data_format": args.data_format or "csv",
        },
    )
