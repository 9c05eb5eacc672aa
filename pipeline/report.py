"""Reads a finished run's results from ML Metadata: summary, trial table and plot."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Any

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from tfx_accum.components.settings import (
    HP_ACCUMULATION_STEPS,
    HP_LEARNING_RATE,
    HP_MICRO_BATCH_SIZE,
    Hyperparameters,
)
from tfx_accum.pipeline.files import atomic_write


@dataclasses.dataclass
class RunSummary:
    best_hyperparameters: Hyperparameters | None
    accuracy: float | None
    blessed: bool | None
    pushed_to: str | None
    trials: list[dict[str, Any]]


def _latest_uri(store: metadata_store.MetadataStore, type_name: str) -> tuple[str, Any] | None:
    try:
        artifacts = store.get_artifacts_by_type(type_name)
    except Exception:  # noqa: BLE001 - type not registered yet: no such artifact
        return None
    live = [a for a in artifacts if a.state == metadata_store_pb2.Artifact.LIVE] or artifacts
    if not live:
        return None
    latest = max(live, key=lambda a: (a.last_update_time_since_epoch, a.id))
    return latest.uri, latest


def _accuracy(eval_uri: str) -> float | None:
    import tensorflow_model_analysis as tfma

    try:
        result = tfma.load_eval_result(eval_uri)
    except Exception:  # noqa: BLE001 - no evaluation written
        return None
    for _, metrics in result.slicing_metrics:
        for output in metrics.values():
            for sub in output.values():
                value = sub.get("sparse_categorical_accuracy")
                if value is not None:
                    return float(value.get("doubleValue", value.get("value", 0.0)))
    return None


def read_summary(metadata_path: str) -> RunSummary:
    """The latest best hyperparameters, evaluation, blessing and push in ``metadata_path``."""
    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = metadata_path
    connection.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    store = metadata_store.MetadataStore(connection)
    best = None
    found = _latest_uri(store, "HyperParameters")
    if found:
        path = Path(found[0]) / "best_hyperparameters.txt"
        if path.exists():
            best = Hyperparameters.from_values(json.loads(path.read_text()).get("values"))
    trials: list[dict[str, Any]] = []
    found = _latest_uri(store, "TunerResults")
    if found:
        path = Path(found[0]) / "tuner_results.json"
        if path.exists():
            trials = json.loads(path.read_text())
    accuracy = None
    found = _latest_uri(store, "ModelEvaluation")
    if found:
        accuracy = _accuracy(found[0])
    blessed = None
    found = _latest_uri(store, "ModelBlessing")
    if found:
        blessed = bool(found[1].custom_properties["blessed"].int_value)
    pushed_to = None
    found = _latest_uri(store, "PushedModel")
    if found and found[1].custom_properties["pushed"].int_value:
        pushed_to = found[1].custom_properties["pushed_destination"].string_value
    return RunSummary(best, accuracy, blessed, pushed_to, trials)


def write_trials(trials: list[dict[str, Any]], output_dir: Path) -> tuple[Path, Path] | None:
    """Writes ``trials.csv`` and ``trials.png`` (score against effective batch, by LR)."""
    if not trials:
        return None
    rows = []
    for t in trials:
        row = dict(t)
        row["effective_batch"] = t.get(HP_ACCUMULATION_STEPS, 0) * t.get(HP_MICRO_BATCH_SIZE, 0)
        rows.append(row)
    fields = [
        "trial_id",
        "score",
        HP_ACCUMULATION_STEPS,
        HP_MICRO_BATCH_SIZE,
        "effective_batch",
        HP_LEARNING_RATE,
    ]
    csv_path, png_path = output_dir / "trials.csv", output_dir / "trials.png"

    def write_csv(tmp):
        with open(tmp, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(sorted(rows, key=lambda r: -(r.get("score") or 0)))

    def write_png(tmp):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.colors
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        lrs = [r[HP_LEARNING_RATE] for r in rows]
        points = ax.scatter(
            [r["effective_batch"] for r in rows],
            [r["score"] for r in rows],
            c=lrs,
            cmap="viridis",
            s=60,
            edgecolors="k",
            norm=matplotlib.colors.LogNorm(min(lrs), max(lrs) * 1.0001),
        )
        fig.colorbar(points, ax=ax, label="learning rate")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("effective batch (accumulation steps x micro-batch)")
        ax.set_ylabel("val_accuracy")
        ax.set_title("Keras Tuner trials")
        fig.tight_layout()
        fig.savefig(tmp, dpi=100, format="png")
        plt.close(fig)

    atomic_write(csv_path, write_csv)
    atomic_write(png_path, write_png)
    return csv_path, png_path
