"""A push is what a server loads (tfx_accum.components.training.serving_versions,
tfx_accum.components.training.pusher, tfx_accum.pipeline.checks.cache_check): it lands in a new
version newer than every other, and a cached push that is no longer the newest version, or is gone,
is not served from the cache. tests/pipeline/test_served_truth.py runs the command through the
cases."""

from __future__ import annotations

import time

import pytest
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2
from pushes import push

from tfx_accum.components.training.serving_versions import newest, next_version, serves
from tfx_accum.pipeline.checks.cache_check import verify_cached_pushes


def test_versions_are_the_numbers_and_the_newest_is_the_largest():
    names = ["9", "10", ".incoming-host-1-abc", "latest", "100/"]
    assert newest(names) == "100"
    assert newest([".incoming-x"]) is None
    assert next_version(names, "1700000000") == "1700000000"
    assert next_version(["1700000000"], "1700000000") == "1700000001"  # same second
    assert next_version(["9999999999"], "1700000000") == "10000000000"  # a clock ahead


def _version(base, name: str, content: bytes = b"model"):
    path = base / name
    path.mkdir(parents=True)
    (path / "saved_model.pb").write_bytes(content)
    return path


def test_a_push_is_served_only_while_it_exists_and_is_the_newest(tmp_path):
    base = tmp_path / "serving_model"
    old, new = _version(base, "100"), _version(base, "200")
    assert serves(str(base), str(new)) is None
    assert "200 is a newer version" in serves(str(base), str(old))
    assert "does not exist" in serves(str(base), str(base / "300"))
    assert "is not a version of" in serves(str(base), str(tmp_path / "elsewhere" / "200"))


def _push(tmp_path, base, model_bytes: bytes):
    return push(tmp_path / f"push-{len(list(tmp_path.iterdir()))}", base, model_bytes)


def test_two_pushes_in_one_second_land_in_two_versions(tmp_path, monkeypatch):
    """TFX names a version by the second; the second push of that second was skipped
    and still recorded as pushed to the first one's version, holding the other model."""
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.0)
    base = tmp_path / "serving_model"
    first = _push(tmp_path, base, b"model A")
    second = _push(tmp_path, base, b"model B")
    assert first.get_string_custom_property("pushed_version") == "1700000000"
    destination = second.get_string_custom_property("pushed_destination")
    assert second.get_string_custom_property("pushed_version") == "1700000001"
    assert (base / "1700000001" / "saved_model.pb").read_bytes() == b"model B"
    assert serves(str(base), destination) is None


def test_a_push_after_a_version_from_a_clock_ahead_is_the_newest(tmp_path):
    base = tmp_path / "serving_model"
    _version(base, "9999999999", b"from a clock ahead")
    pushed = _push(tmp_path, base, b"this run's model")
    destination = pushed.get_string_custom_property("pushed_destination")
    assert destination == str(base / "10000000000")
    assert serves(str(base), destination) is None


def _store(path):
    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = str(path)
    return metadata_store.MetadataStore(connection)


def test_cached_pushes_that_a_server_would_not_load_leave_the_cache(tmp_path):
    base = tmp_path / "serving_model"
    _version(base, "100")
    newest_version = _version(base, "200")
    store = _store(tmp_path / "metadata.sqlite")
    kind = metadata_store_pb2.ArtifactType(name="PushedModel")
    type_id = store.put_artifact_type(kind)
    cases = {  # destination -> pushed
        str(newest_version): 1,  # the newest: served, stays cached
        str(base / "100"): 1,  # an older version: out of the cache
        str(base / "50"): 1,  # gone: out of the cache
        "": 0,  # nothing pushed (not blessed): nothing to check
    }
    artifacts = []
    for destination, pushed in cases.items():
        artifact = metadata_store_pb2.Artifact(type_id=type_id, uri=str(tmp_path / "a"))
        artifact.state = metadata_store_pb2.Artifact.LIVE
        artifact.custom_properties["pushed"].int_value = pushed
        artifact.custom_properties["pushed_destination"].string_value = destination
        artifacts.append(artifact)
    ids = store.put_artifacts(artifacts)
    assert verify_cached_pushes(str(tmp_path / "metadata.sqlite"), str(base)) == 2
    states = [a.state for a in store.get_artifacts_by_id(ids)]
    live, marked = metadata_store_pb2.Artifact.LIVE, metadata_store_pb2.Artifact.MARKED_FOR_DELETION
    assert states == [live, marked, marked, live]


@pytest.mark.parametrize("missing", [True, False])
def test_no_metadata_of_pushes_yet_changes_nothing(tmp_path, missing):
    store = _store(tmp_path / "metadata.sqlite")
    if not missing:
        store.put_artifact_type(metadata_store_pb2.ArtifactType(name="PushedModel"))
    assert verify_cached_pushes(str(tmp_path / "metadata.sqlite"), str(tmp_path / "s")) == 0
