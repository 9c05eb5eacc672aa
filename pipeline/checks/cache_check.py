"""Cached outputs checked against what they describe before TFX may serve them.

TFX serves a cached execution when its output artifacts are LIVE in ML Metadata and their
directories exist; it never reads the files, nor looks outside the pipeline root. Before a
local run:

- every LIVE ``Examples`` artifact that ExampleGen fingerprinted
  (``tfx_accum.components.data.example_fingerprint``) is compared with its files; one
  that differs (a file cut short, changed, missing or added) is taken out of the cache, and
  ExampleGen runs again, and every component after it with it;
- every LIVE ``PushedModel`` that records a push is compared with the serving directory: a
  push whose version is gone, or is no longer the newest version (what a model server loads:
  another model was pushed since, say a run on other data), is taken out of the cache, and
  the Pusher runs again, publishing this run's model as the newest version.

Taken out of the cache: marked ``MARKED_FOR_DELETION``, which TFX's cache skips
(``cache_utils`` serves LIVE outputs only).
"""

from __future__ import annotations

import json

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from tfx_accum.components.training.serving_versions import serves


def _store(metadata_path: str) -> metadata_store.MetadataStore:
    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = metadata_path
    return metadata_store.MetadataStore(connection)


def verify_cached_examples(metadata_path: str) -> list[str]:
    """Takes damaged ExampleGen outputs out of the cache; one line for each."""
    from tfx_accum.components.data.example_fingerprint import check

    store = _store(metadata_path)
    try:
        artifacts = store.get_artifacts_by_type("Examples")
    except Exception:  # noqa: BLE001 - no Examples type yet: nothing cached
        return []
    lines, damaged = [], []
    for artifact in artifacts:
        if artifact.state != metadata_store_pb2.Artifact.LIVE:
            continue
        try:
            problem = check(artifact.uri)
        except Exception as error:  # noqa: BLE001 - unreadable files are damage too
            problem = f"{artifact.uri} cannot be read ({type(error).__name__}: {error})"
        if problem is None:
            continue
        artifact.state = metadata_store_pb2.Artifact.MARKED_FOR_DELETION
        damaged.append(artifact)
        lines.append(
            f"[pipeline] {_producer(store, artifact.id)}'s cached output differs from what it "
            f"wrote: {problem}; it runs again"
        )
    if damaged:
        store.put_artifacts(damaged)
    return lines


def verify_cached_pushes(metadata_path: str, serving_dir: str) -> int:
    """Takes cached pushes that a server of ``serving_dir`` would not load out of the
    cache; returns how many. Silent: whether this run's Pusher would have been served one
    of them is known only once it runs (the run's summary says when it pushed a model
    again, and why: tfx_accum.pipeline.cli.report)."""
    store = _store(metadata_path)
    try:
        artifacts = store.get_artifacts_by_type("PushedModel")
    except Exception:  # noqa: BLE001 - no PushedModel type yet: nothing cached
        return 0
    stale = [
        artifact
        for artifact in artifacts
        if artifact.state == metadata_store_pb2.Artifact.LIVE
        and _pushed_to(artifact) is not None
        and serves(serving_dir, _pushed_to(artifact)) is not None
    ]
    for artifact in stale:
        artifact.state = metadata_store_pb2.Artifact.MARKED_FOR_DELETION
    if stale:
        store.put_artifacts(stale)
    return len(stale)


def changed_model_code(metadata_path: str, model: str, code: dict[str, str]) -> list[str]:
    """The files of model function ``model`` whose code differs from the last run here
    that trained it (its Tuner's or Trainer's ``custom_config["model_code"]``); empty when
    none does, or no earlier run trained it."""
    from tfx_accum.components.config.custom_config import ModuleConfig
    from tfx_accum.components.config.model_code import changed_files

    store = _store(metadata_path)
    latest = None
    for execution in store.get_executions():
        if "custom_config" not in execution.custom_properties:
            continue
        try:
            raw = json.loads(execution.custom_properties["custom_config"].string_value)
            settings = ModuleConfig.from_custom_config(raw).model_settings
        except (TypeError, ValueError):  # not a Tuner's or Trainer's custom_config
            continue
        if settings.model == model and settings.model_code:
            latest = dict(settings.model_code)  # executions come in id order: the last wins
    return [] if latest is None else changed_files(latest, code)


def _pushed_to(artifact: metadata_store_pb2.Artifact) -> str | None:
    """The version a ``PushedModel`` records a push to (None: nothing was pushed)."""
    properties = artifact.custom_properties
    if "pushed" not in properties or not properties["pushed"].int_value:
        return None
    return properties["pushed_destination"].string_value or None


def _producer(store: metadata_store.MetadataStore, artifact_id: int) -> str:
    """The component type that wrote the artifact (``CsvExampleGen``), else ExampleGen."""
    events = store.get_events_by_artifact_ids([artifact_id])
    outputs = [e.execution_id for e in events if e.type == metadata_store_pb2.Event.OUTPUT]
    if outputs:
        (execution,) = store.get_executions_by_id(outputs[:1])
        (kind,) = store.get_execution_types_by_id([execution.type_id])
        return kind.name.rsplit(".", 1)[-1]
    return "ExampleGen"
