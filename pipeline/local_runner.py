"""Runs the pipeline locally: LocalDagRunner (default) or Beam's BeamDagRunner.

A thin runner: everything the pipeline is made of comes from :func:`create_pipeline`.
ML Metadata lives in SQLite under the output directory; the embedded digits are written
there too when no data root is given.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import sys
import time
from pathlib import Path

from components.search_space import SearchSpace
from pipeline import config
from pipeline.data import CsvSummary, validate_csv_dir, write_embedded_digits
from pipeline.errors import InputError

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

    @property
    def embedded_data_dir(self) -> Path:
        return self.output_dir / "data" / "digits"


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
            self._started[self._current] = time.monotonic()
            print(f"[pipeline] {self._current} running ...", flush=True)
        elif message.startswith("A cached execution") and self._current:
            self._cached.add(self._current)
        elif match := self._FINISHED.match(message):
            name = match.group(1)
            elapsed = time.monotonic() - self._started.get(name, time.monotonic())
            how = "served from cache" if name in self._cached else "done"
            print(f"[pipeline] {name} {how} ({elapsed:.1f} s)", flush=True)


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
    data_root: str | None, paths: LocalPaths, label_key: str
) -> tuple[str, CsvSummary]:
    """The data root to use (embedded digits when None), validated before anything runs."""
    if data_root is None:
        data_root = str(write_embedded_digits(paths.embedded_data_dir))
        print(f"[data] no --data-root given: using the embedded digits ({data_root})", flush=True)
    summary = validate_csv_dir(data_root, label_key)
    print(
        f"[data] {len(summary.files)} CSV file(s), {summary.rows} rows, "
        f"{len(summary.columns) - 1} features, {summary.num_classes} classes",
        flush=True,
    )
    return str(Path(data_root).resolve()), summary


def run_local(
    *,
    data_root: str | None,
    output_dir: str,
    search_space: SearchSpace,
    tune: bool = True,
    orchestrator: str = "local",
    model: str = config.DEFAULT_MODEL,
    label_key: str = config.LABEL_KEY,
    train_steps: int = config.TRAIN_STEPS,
    accuracy_threshold: float = config.ACCURACY_THRESHOLD,
    enable_cache: bool = True,
) -> LocalPaths:
    """Validates the inputs, then builds and runs the pipeline; returns where it wrote."""
    if orchestrator not in ORCHESTRATORS:
        raise InputError(f"`orchestrator` must be one of {ORCHESTRATORS}, got {orchestrator!r}.")
    paths = LocalPaths(Path(output_dir).resolve())
    paths.output_dir.mkdir(parents=True, exist_ok=True)
    data_root, summary = prepare_data(data_root, paths, label_key)

    from pipeline.pipeline import create_pipeline

    pipeline = create_pipeline(
        pipeline_name=config.PIPELINE_NAME,
        pipeline_root=str(paths.pipeline_root),
        data_root=data_root,
        serving_model_dir=str(paths.serving_model_dir),
        search_space=search_space,
        tune=tune,
        model=model,
        num_classes=summary.num_classes,
        label_key=label_key,
        train_steps=train_steps,
        accuracy_threshold=accuracy_threshold,
        metadata_path=str(paths.metadata_path),
        enable_cache=enable_cache,
    )
    _install_progress()
    if orchestrator == "beam":
        from tfx.orchestration.beam.beam_dag_runner import BeamDagRunner

        runner = BeamDagRunner()
    else:
        from tfx import v1 as tfx

        runner = tfx.orchestration.LocalDagRunner()
    print(
        f"[pipeline] {len(pipeline.components)} components with {orchestrator} orchestration; "
        f"outputs under {paths.output_dir}",
        flush=True,
    )
    runner.run(pipeline)
    return paths
