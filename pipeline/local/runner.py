"""Runs the pipeline locally: LocalDagRunner (default) or Beam's BeamDagRunner.

A thin runner: everything the pipeline is made of comes from :func:`create_pipeline`.
ML Metadata lives in SQLite under the output directory; the embedded digits are written
there too when no data root is given.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfx_accum import console
from tfx_accum.components.config.settings import ModelSettings
from tfx_accum.components.search.peak_memory import host_peak_mb, reset_host_peak
from tfx_accum.pipeline import config
from tfx_accum.pipeline.beam_args import available_cpus, local_beam_args
from tfx_accum.pipeline.checks.data import DataSummary, validate_data_root, write_embedded
from tfx_accum.pipeline.errors import InputError

ORCHESTRATORS = ("local", "beam")


@dataclasses.dataclass(frozen=True)
class LocalPaths:
    output_dir: Path

    @property
    def pipeline_root(self) -> Path:
        return self.output_dir / "pipeline"

    @property
    def metadata_path(self) -> Path:
        return self.output_dir / "metadata.sqlite"

    @property
    def serving_model_dir(self) -> Path:
        return self.output_dir / "serving_model"

    def embedded_data_dir(self, name: str = "digits") -> Path:
        return self.output_dir / "data" / name


_current: list[str] = []  # the component running now, for an interrupt's message


def current_component() -> str | None:
    return _current[-1] if _current else None


class _ProgressHandler(logging.Handler):
    """Turns TFX's orchestration log lines into short progress lines on stdout."""

    _RUNNING = re.compile(r"^(?:Component|node) (\S+) is running\.$")
    _FINISHED = re.compile(r"^(?:Component|node) (\S+) is finished\.$")

    def __init__(self):
        super().__init__(logging.INFO)
        self._started: dict[str, float] = {}
        self._current: str | None = None
        self._cached: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is not worth a crash
            return
        if match := self._RUNNING.match(message):
            self._current = match.group(1)
            _current[:] = [self._current]
            self._started[self._current] = time.monotonic()
            reset_host_peak()
            console.say(f"[pipeline] {self._current} running ...")
        elif message.startswith("A cached execution") and self._current:
            self._cached.add(self._current)
        elif match := self._FINISHED.match(message):
            name = match.group(1)
            _current.clear()
            elapsed = time.monotonic() - self._started.get(name, time.monotonic())
            how = "served from cache" if name in self._cached else "done"
            peak = host_peak_mb() if name not in self._cached else None
            # The process's peak while the component ran (Beam's worker processes, if any,
            # are not in it): what a data set's size costs each component.
            memory = f", peak memory {peak / 1024:.1f} GiB" if peak else ""
            console.say(f"[pipeline] {name} {how} ({elapsed:.1f} s{memory})")


def _install_progress() -> _ProgressHandler:
    """Routes absl's log records to the progress handler, and warnings to stderr.

    TFX logs component starts at INFO through absl. Libraries loaded mid-run (TensorBoard,
    Keras) lower absl's verbosity to WARNING; such requests now set what is *printed*
    (the stderr handler's level), while the progress handler keeps seeing INFO.
    """
    from absl import logging as absl_logging

    absl_logging.get_absl_handler().setLevel(logging.WARNING)
    absl_logger = logging.getLogger("absl")
    progress = _ProgressHandler()
    printed = logging.StreamHandler(sys.stderr)
    printed.setLevel(logging.WARNING)
    printed.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
    absl_logger.handlers = [progress, printed]
    absl_logger.propagate = False
    logging.Logger.setLevel(absl_logger, logging.INFO)
    absl_logger.setLevel = lambda level: printed.setLevel(max(level, logging.WARNING))
    return progress


def prepare_data(
    data_root: str | None,
    paths: LocalPaths,
    settings: ModelSettings,
    checked: DataSummary | None = None,
    *,
    embedded: str = "digits",
    data_format: str | None = None,
    missing_values: Sequence[str] = (),
) -> tuple[str, DataSummary]:
    """The data root to use (the embedded data set ``embedded`` when None), validated
    before anything runs; prints what it holds and the task.

    ``checked``: ``data_root``'s summary when the caller has validated it already.
    ``missing_values``: CSV cells read as missing (``--missing-values``).
    """
    if data_root is None:
        data_root = str(write_embedded(embedded, paths.embedded_data_dir(embedded)))
        console.say(f"[data] no --data-root given: using the embedded {embedded} ({data_root})")
    summary = checked or validate_data_root(
        data_root, settings, data_format, missing_values=missing_values
    )
    files = "TFRecord" if summary.format == "tfrecord" else "CSV"
    console.say(
        f"[data] {len(summary.files)} {files} file(s), {summary.rows} rows, features: "
        f"{summary.kind_counts(settings)}; {summary.label_line()}"
    )
    chosen = "" if settings.task else "; --task to choose"
    console.say(f"[data] task: {summary.task} ({summary.task_reason}{chosen})")
    return str(Path(data_root).resolve()), summary


def _say_model_code_change(metadata: str, settings: ModelSettings, pipeline_settings) -> None:
    """One line when the code of the model's functions (the model function's, and
    ``model_hyperparameters``') changed since the last run here: why the Tuner and Trainer
    run again (tfx_accum.components.config.model_code)."""
    from tfx_accum.components.config.model_code import changed_functions, settings_code
    from tfx_accum.pipeline.checks.cache_check import changed_model_code

    code = settings_code(settings)
    changed = changed_model_code(metadata, settings.model, code) if code else []
    if changed:
        again = "searched and trained" if pipeline_settings.get("tune", True) else "trained"
        named = " and ".join(
            f"{config.CLI_WORDS.name(key)} {reference}"
            for key, reference in changed_functions(settings, changed)
        )
        console.say(
            f"[pipeline] {named}: {', '.join(changed)} changed since the last run here: "
            f"the model is {again} again"
        )


def run_local(
    *,
    data_root: str | None,
    output_dir: str,
    orchestrator: str = "local",
    model_settings: ModelSettings | None = None,
    enable_cache: bool = True,
    checked: DataSummary | None = None,
    **pipeline_settings: Any,
) -> LocalPaths:
    """Validates the inputs, then builds and runs the pipeline; returns where it wrote.

    ``pipeline_settings`` are :func:`create_pipeline`'s (``search_space``, ``tune``,
    ``hyperparameters``, ``train_steps``, ``bless_metric``); ``model_settings``
    carry the task and classes the check decided. ``checked``: the summary of a
    ``data_root`` already checked with :func:`prepare_data`, so that it is not read twice.
    """
    if orchestrator not in ORCHESTRATORS:
        raise InputError(f"`orchestrator` must be one of {ORCHESTRATORS}, got {orchestrator!r}.")
    paths = LocalPaths(Path(output_dir).resolve())
    paths.output_dir.mkdir(parents=True, exist_ok=True)
    model_settings = model_settings or ModelSettings()
    if checked is None:
        data_root, checked = prepare_data(
            data_root,
            paths,
            model_settings,
            missing_values=pipeline_settings.get("missing_values", ()),
        )
        model_settings = dataclasses.replace(
            model_settings, task=checked.task, num_classes=checked.num_classes
        )
    summary = checked

    from tfx_accum.pipeline import tfxio_batching
    from tfx_accum.pipeline.pipeline import create_pipeline

    tfxio_batching.enable()  # the in-process Beam components' reads, batched by bytes

    if pipeline_settings.get("beam_pipeline_args") is None:
        input_bytes = sum(os.path.getsize(f) for f in summary.files)
        beam_args, why = local_beam_args(input_bytes, available_cpus(), rows=summary.rows)
        pipeline_settings["beam_pipeline_args"] = beam_args
        console.say(f"[pipeline] Beam: {' '.join(beam_args)} ({why})")
    else:
        console.say(f"[pipeline] Beam: {' '.join(pipeline_settings['beam_pipeline_args'])}")

    pipeline_settings["parallel_trials"] = pipeline_settings.get("parallel_trials") or 1
    pipeline = create_pipeline(
        pipeline_name=config.PIPELINE_NAME,
        pipeline_root=str(paths.pipeline_root),
        data_root=data_root,
        serving_model_dir=str(paths.serving_model_dir),
        model_settings=model_settings,
        metadata_path=str(paths.metadata_path),
        enable_cache=enable_cache,
        data_format=summary.format,
        **pipeline_settings,
    )
    if paths.metadata_path.exists():
        _say_model_code_change(str(paths.metadata_path), model_settings, pipeline_settings)
    if enable_cache and paths.metadata_path.exists():
        from tfx_accum.pipeline.checks.cache_check import (
            verify_cached_examples,
            verify_cached_pushes,
        )

        for line in verify_cached_examples(str(paths.metadata_path)):
            console.say(line)
        verify_cached_pushes(str(paths.metadata_path), str(paths.serving_model_dir))
    _install_progress()
    if orchestrator == "beam":
        from tfx.orchestration.beam.beam_dag_runner import BeamDagRunner

        runner = BeamDagRunner()
    else:
        from tfx.orchestration.local.local_dag_runner import LocalDagRunner  # not tfx.v1

        runner = LocalDagRunner()
    console.say(
        f"[pipeline] {len(pipeline.components)} components with {orchestrator} orchestration; "
        f"outputs under {paths.output_dir}"
    )
    runner.run(pipeline)
    return paths
