"""ExampleGen's and ImportSchemaGen's cache keys see the contents of the user's files:
TFX's driver fingerprints input files by count, size and modification time to the second, so
a file rewritten at the same size and time was served from the cache."""

from __future__ import annotations

import json
import os

from tfx.components.example_gen import driver as tfx_driver
from tfx.proto import example_gen_pb2
from tfx.types import standard_component_specs
from tfx.utils import proto_utils

from tfx_accum.components.data.example_fingerprint import (
    SCHEMA_DIGEST,
    ContentFingerprintDriver,
    ImportSchemaGen,
)


def _fingerprint(driver_class, base) -> str:
    config = example_gen_pb2.Input(splits=[example_gen_pb2.Input.Split(name="s", pattern="*.csv")])
    properties = {
        standard_component_specs.INPUT_CONFIG_KEY: proto_utils.proto_to_json(config),
        standard_component_specs.INPUT_BASE_KEY: str(base),
    }
    driver = driver_class.__new__(driver_class)  # no metadata handle needed for this
    resolved = driver.resolve_exec_properties(properties, None, None)
    return resolved["input_fingerprint"]


def _rewrite_keeping_size_and_time(path, text: str) -> None:
    stat = path.stat()
    assert len(text.encode()) == stat.st_size
    path.write_text(text)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as `touch -r`


def test_a_csv_rewritten_at_the_same_size_and_time_changes_the_fingerprint(tmp_path):
    data = tmp_path / "data.csv"
    data.write_text("a,label\n0.1,0\n0.2,1\n")
    tfx_before = _fingerprint(tfx_driver.FileBasedDriver, tmp_path)
    ours_before = _fingerprint(ContentFingerprintDriver, tmp_path)
    assert ours_before.startswith(tfx_before + ",sha256:")  # TFX's key, and the contents
    _rewrite_keeping_size_and_time(data, "a,label\n0.1,1\n0.2,0\n")  # every label inverted
    assert _fingerprint(tfx_driver.FileBasedDriver, tmp_path) == tfx_before  # TFX cannot see it
    assert _fingerprint(ContentFingerprintDriver, tmp_path) != ours_before
    # Unchanged contents keep the key: the cache still serves an unchanged run.
    _rewrite_keeping_size_and_time(data, "a,label\n0.1,0\n0.2,1\n")
    assert _fingerprint(ContentFingerprintDriver, tmp_path) == ours_before


def test_an_edited_schema_changes_import_schema_gens_cache_key(tmp_path):
    schema = tmp_path / "schema.pbtxt"
    schema.write_text('feature { name: "a" type: FLOAT }\\n')
    before = ImportSchemaGen(schema_file=str(schema)).exec_properties[SCHEMA_DIGEST]
    schema.write_text('feature { name: "b" type: FLOAT }\\n')
    after = ImportSchemaGen(schema_file=str(schema)).exec_properties[SCHEMA_DIGEST]
    assert before and after and before != after
    assert json.loads(json.dumps(after)) == after  # a plain string property
    # A schema that is not on this host (a compile elsewhere): TFX's own key, the path.
    missing = ImportSchemaGen(schema_file=str(tmp_path / "elsewhere.pbtxt"))
    assert missing.exec_properties[SCHEMA_DIGEST] is None
