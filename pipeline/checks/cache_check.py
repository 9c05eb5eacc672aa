"""Cached ExampleGen output checked against its fingerprint before TFX may serve it.

TFX serves a cached execution when its output artifacts are LIVE in ML Metadata and their
directories exist; it never reads the files. Before a local run, every LIVE ``Examples``
artifact that ExampleGen fingerprinted (:mod:`tfx_accum.components.data.example_fingerprint`)
is compared with its files; one that differs (a file cut short, changed, missing or added)
is marked ``MARKED_FOR_DELETION``, so that TFX's cache skips it (``cache_utils`` serves
LIVE outputs only) and ExampleGen runs again, and every component after it with it.
"""

from __future__ import annotations

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2


def verify_cached_examples(metadata_path: str) -> list[str]:
    """Takes damaged ExampleGen outputs out of the cache; one line for each."""
    from tfx_accum.components.data.example_fingerprint import check

    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = metadata_path
    store = metadata_store.MetadataStore(connection)
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


def _producer(store: metadata_store.MetadataStore, artifact_id: int) -> str:
    """The component type that wrote the artifact (``CsvExampleGen``), else ExampleGen."""
    events = store.get_events_by_artifact_ids([artifact_id])
    outputs = [e.execution_id for e in events if e.type == metadata_store_pb2.Event.OUTPUT]
    if outputs:
        (execution,) = store.get_executions_by_id(outputs[:1])
        (kind,) = store.get_execution_types_by_id([execution.type_id])
        return kind.name.rsplit(".", 1)[-1]
    return "ExampleGen"
