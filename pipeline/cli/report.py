"""Reads a finished run's own results from ML Metadata: summary, trial table and plot."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from tfx_accum.atomic_files import atomic_write
from tfx_accum.components.config.hyperparameters import (
    HP_ACCUMULATION_STEPS,
    HP_LEARNING_RATE,
    HP_MICRO_BATCH_SIZE,
    Hyperparameters,
)
from tfx_accum.components.config.trial_records import (
    TRIAL_EXAMPLES,
    TRIAL_PEAK_MEMORY,
    TRIAL_REUSED_FROM,
    TRIAL_SPEED,
    TunerDecision,
)
from tfx_accum.components.data.anomalies import read_anomalies
from tfx_accum.components.training.serving_versions import serves

INPUT, OUTPUT = metadata_store_pb2.Event.INPUT, metadata_store_pb2.Event.OUTPUT

if TYPE_CHECKING:  # imports TensorFlow Model Analysis: only once there is an evaluation
    from tfx_accum.pipeline.evaluation import Evaluation


@dataclasses.dataclass
class RunSummary:
    run_id: str | None
    best_hyperparameters: Hyperparameters | None
    evaluation: Evaluation | None  # the Evaluator's metrics and validation
    blessed: bool | None
    pushed_to: str | None
    trials: list[dict[str, Any]]
    trainer_budget: dict[str, int] | None = None  # updates, global_batch, examples
    resplit: dict[str, Any] | None = None  # the best trial and split, when re-split
    best_trial_examples: int | None = None  # the Tuner's decision: the best trial's budget
    # ExampleValidator's anomalies: (split, feature, what), one per anomaly; None: no report
    anomalies: list[tuple[str, str, str]] | None = None
    # Why this run pushed a model that an earlier run had pushed (None: it did not)
    pushed_again: str | None = None
    # Why ``pushed_to`` is not what a server of the serving directory loads (None: it is)
    not_served: str | None = None


def _run_outputs(
    store: metadata_store.MetadataStore, run_started: str
) -> tuple[str | None, dict[str, Any], list[Any]]:
    """This run's output artifacts by type name, from its pipeline-run context.

    The local runners name each run's context with the ISO time it started; the one
    started at or after ``run_started`` is this run (the output directory's lock keeps
    other runs out). Cached executions belong to the run too, with the earlier artifacts
    as their outputs.
    """
    try:
        contexts = store.get_contexts_by_type("pipeline_run")
    except Exception:  # noqa: BLE001 - no run recorded yet
        contexts = []
    mine = [c for c in contexts if c.name >= run_started]
    if not mine:
        return None, {}, []
    context = min(mine, key=lambda c: c.name)
    executions = store.get_executions_by_context(context.id)
    events = store.get_events_by_execution_ids([e.id for e in executions])
    ids = sorted({e.artifact_id for e in events if e.type == metadata_store_pb2.Event.OUTPUT})
    artifacts = store.get_artifacts_by_id(ids) if ids else []
    types = {t.id: t.name for t in store.get_artifact_types_by_id({a.type_id for a in artifacts})}
    by_type: dict[str, Any] = {}
    for artifact in sorted(artifacts, key=lambda a: a.id):
        by_type[types[artifact.type_id]] = artifact
    return context.name, by_type, list(executions)


def read_summary(
    metadata_path: str, run_started: str, serving_dir: str | None = None
) -> RunSummary:
    """This run's best hyperparameters, trials, evaluation, blessing and push.

    ``run_started``: the ISO time taken just before the run started (see ``_run_outputs``);
    nothing of an earlier run is reported as this one's. ``serving_dir``: the Pusher's base
    directory, against which the push is checked (the version must be the one a server
    loads) and explained (a model pushed again: why).
    """
    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = metadata_path
    connection.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    store = metadata_store.MetadataStore(connection)
    run_id, outputs, executions = _run_outputs(store, run_started)
    best, resplit, best_examples = None, None, None
    if "HyperParameters" in outputs:
        path = Path(outputs["HyperParameters"].uri) / "best_hyperparameters.txt"
        if path.exists():
            decision = TunerDecision.from_config(json.loads(path.read_text()))
            best = decision.hyperparameters
            best_examples = decision.examples
            if decision.resplit_from_trial is not None:
                resplit = {
                    "trial": decision.resplit_from_trial,
                    "split": decision.resplit_from_split,
                }
    budget = None
    if "ModelRun" in outputs:
        path = Path(outputs["ModelRun"].uri) / "budget.json"
        if path.exists():
            budget = json.loads(path.read_text())
    trials: list[dict[str, Any]] = []
    if "TunerResults" in outputs:
        path = Path(outputs["TunerResults"].uri) / "tuner_results.json"
        if path.exists():
            trials = json.loads(path.read_text())
    evaluation = None
    if "ModelEvaluation" in outputs:
        from tfx_accum.pipeline.evaluation import read_evaluation

        evaluation = read_evaluation(outputs["ModelEvaluation"].uri)
    blessed = None
    if "ModelBlessing" in outputs:
        blessed = bool(outputs["ModelBlessing"].custom_properties["blessed"].int_value)
    pushed_to, pushed_again, not_served = None, None, None
    pushed = outputs.get("PushedModel")
    if pushed is not None and pushed.custom_properties["pushed"].int_value:
        pushed_to = pushed.custom_properties["pushed_destination"].string_value
        if serving_dir is not None:
            not_served = serves(serving_dir, pushed_to)
            pushed_again = _pushed_before(store, executions, pushed.id, pushed_to)
    anomalies = None
    if "ExampleAnomalies" in outputs:
        anomalies = read_anomalies(outputs["ExampleAnomalies"].uri)
    return RunSummary(
        run_id,
        best,
        evaluation,
        blessed,
        pushed_to,
        trials,
        budget,
        resplit,
        best_examples,
        anomalies,
        pushed_again,
        not_served,
    )


def _pushed_before(
    store: metadata_store.MetadataStore, executions: list, pushed_id: int, pushed_to: str
) -> str | None:
    """Why this run's Pusher pushed a model that an earlier push had published under
    another version (an earlier push is taken out of the cache when it is no longer what a
    server loads: tfx_accum.pipeline.checks.cache_check); None when it did not run, or the model
    is new."""
    ran = {e.id for e in executions if e.last_known_state == metadata_store_pb2.Execution.COMPLETE}
    events = store.get_events_by_artifact_ids([pushed_id])
    pusher = [e.execution_id for e in events if e.type == OUTPUT and e.execution_id in ran]
    if not pusher:
        return None  # served from the cache: nothing was pushed in this run
    inputs = [e.artifact_id for e in store.get_events_by_execution_ids(pusher) if e.type == INPUT]
    others = {
        e.execution_id
        for e in store.get_events_by_artifact_ids(inputs)
        if e.type == INPUT and e.execution_id not in pusher
    }
    outputs = [
        e.artifact_id for e in store.get_events_by_execution_ids(sorted(others)) if e.type == OUTPUT
    ]
    earlier = [
        a.custom_properties["pushed_destination"].string_value
        for a in store.get_artifacts_by_id(sorted(set(outputs)))
        if a.id < pushed_id
        and "pushed" in a.custom_properties
        and a.custom_properties["pushed"].int_value
    ]
    earlier = [d for d in earlier if d and d != pushed_to]
    if not earlier:
        return None
    state = "is gone" if not Path(earlier[-1]).exists() else "was no longer the newest version"
    return f"pushed again: this model's earlier push, {earlier[-1]}, {state}"


def mark_unfinished_as_canceled(
    metadata_path: str, run_started: str | None, include_failed: bool = False
) -> list[str]:
    """Executions still RUNNING become CANCELED: this run's after an interrupt, or (with
    ``run_started=None``, called while holding the output directory's lock) those left by
    a run that was killed.

    TFX leaves an interrupted execution RUNNING; CANCELED says what happened, and like
    RUNNING it is never served from the cache. ``include_failed``: this run's FAILED
    executions too (after an interrupt that a library turned into an error, the execution
    it stopped is recorded as failed). Returns the components it marked.
    """
    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = metadata_path
    store = metadata_store.MetadataStore(connection)
    if run_started is None:
        executions = store.get_executions()
    else:
        _, _, executions = _run_outputs(store, run_started)
    states = {metadata_store_pb2.Execution.RUNNING}
    if include_failed and run_started is not None:
        states.add(metadata_store_pb2.Execution.FAILED)
    running = [e for e in executions if e.last_known_state in states]
    for execution in running:
        execution.last_known_state = metadata_store_pb2.Execution.CANCELED
    if running:
        store.put_executions(running)
    types = {t.id: t.name for t in store.get_execution_types_by_id({e.type_id for e in running})}
    return [types[e.type_id].rsplit(".", 1)[-1] for e in running]


def write_trials(
    trials: list[dict[str, Any]],
    output_dir: Path,
    objective: tuple[str, str] = ("val_accuracy", "max"),
) -> tuple[Path, Path] | None:
    """Writes ``trials.csv`` (best first) and ``trials.png``.

    ``objective``: the score's name and direction (tfx_accum.components.config.tasks: OBJECTIVES).

    The plot shows each trial's score (left) and training throughput (right) against its
    effective batch, coloured by learning rate; a reused trial (an exact duplicate, not
    retrained) is drawn hollow.
    """
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
        TRIAL_SPEED,
        TRIAL_PEAK_MEMORY,
        TRIAL_EXAMPLES,
        TRIAL_REUSED_FROM,
    ]
    for row in rows:
        if row.get(TRIAL_REUSED_FROM) is not None:
            row[TRIAL_REUSED_FROM] = str(int(row[TRIAL_REUSED_FROM])).zfill(len(row["trial_id"]))
    csv_path, png_path = output_dir / "trials.csv", output_dir / "trials.png"

    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    sign = -1.0 if objective[1] == "max" else 1.0
    writer.writerows(
        sorted(rows, key=lambda r: sign * r["score"] if r.get("score") is not None else 1e300)
    )
    data = table.getvalue().encode()
    # A cached re-run has the same trials: the files stay as they are (no plotting). The PNG is
    # written first and the CSV last, so an identical CSV means the PNG beside it was drawn from the
    # same trials.
    if png_path.exists() and csv_path.exists() and csv_path.read_bytes() == data:
        return csv_path, png_path

    def write_png(tmp):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.cm
        import matplotlib.colors
        import matplotlib.pyplot as plt

        fig, (ax, speed_ax) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
        lrs = [r[HP_LEARNING_RATE] for r in rows]
        norm = matplotlib.colors.LogNorm(min(lrs), max(lrs) * 1.0001)
        for axis, field, label in (
            (ax, "score", objective[0]),
            (speed_ax, TRIAL_SPEED, "training examples/s"),
        ):
            for reused in (False, True):
                chosen = [
                    r
                    for r in rows
                    if r.get(field) is not None and (r.get(TRIAL_REUSED_FROM) is not None) == reused
                ]
                if not chosen:
                    continue
                colours = matplotlib.cm.viridis(norm([r[HP_LEARNING_RATE] for r in chosen]))
                axis.scatter(
                    [r["effective_batch"] for r in chosen],
                    [r[field] for r in chosen],
                    facecolors="none" if reused else colours,
                    edgecolors=colours if reused else "k",
                    s=60,
                    label="reused (exact duplicate)" if reused else "trained",
                )
            axis.set_xscale("log", base=2)
            axis.set_xlabel("effective batch (accumulation steps x micro-batch)")
            axis.set_ylabel(label)
        for r in rows:
            if r.get(TRIAL_SPEED) is not None:
                speed_ax.annotate(
                    f"{r[HP_ACCUMULATION_STEPS]}x{r[HP_MICRO_BATCH_SIZE]}",
                    (r["effective_batch"], r[TRIAL_SPEED]),
                    fontsize=7,
                    xytext=(3, 3),
                    textcoords="offset points",
                )
        mappable = matplotlib.cm.ScalarMappable(norm=norm, cmap="viridis")
        fig.colorbar(mappable, ax=[ax, speed_ax], label="learning rate")
        ax.legend(fontsize=8)
        ax.set_title("Keras Tuner trials: score")
        speed_ax.set_title("speed of each split")
        fig.savefig(tmp, dpi=100, format="png")
        plt.close(fig)

    atomic_write(png_path, write_png)
    atomic_write(csv_path, lambda tmp: Path(tmp).write_bytes(data))
    return csv_path, png_path
