"""ExampleGen's output, fingerprinted when it is written and checked before it is trusted.

A cached ExampleGen execution is served from ML Metadata without looking at its files: with
an output file cut in half between two runs, every component came from the cache, the run
said "blessed: yes", and a later retrain failed with ``DataLossError: truncated record``
naming no file. So ExampleGen here records, beside its output, the size and SHA-256 of every
file it wrote (``FINGERPRINT_FILE`` in the artifact's directory, written atomically after
the files), and :func:`check` compares them again: the local runner calls it before a run
(``tfx_accum.pipeline.checks.cache_check``) and makes ExampleGen run again when they differ.

The components are TFX's ``CsvExampleGen`` and ``ImportExampleGen`` with an executor that
runs TFX's and then writes the fingerprint (TFX's public way to extend a component, as in
``tfx_accum.components.training.pusher``); their ids stay ``CsvExampleGen`` and
``ImportExampleGen``. The CSV one converts in bounded memory
(``tfx_accum.components.data.csv_examples``), writing what TFX's executor writes.

**Their input, by content.** TFX's driver fingerprints the input files by count, size and
modification time to the second (``tfx.utils.io_utils.generate_fingerprint``): a file
rewritten with other values at the same size and time (``touch -r``, or within the same
second) kept the same fingerprint, so every component came from the cache and the run
reported the old model as blessed. :class:`ContentFingerprintDriver` adds the SHA-256
of the matched files' contents to that fingerprint, one streamed read per run; the cache
key of ExampleGen, and so of everything after it, changes with the data. (Kubeflow's
compiled ExampleGen runs TFX's own driver step, which this does not replace.) The user's
schema file, likewise: :class:`ImportSchemaGen` carries its SHA-256 as an execution property,
so a schema edited in place is imported again.
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
import hashlib
import json
import os
from typing import Any

import tensorflow as tf
from tfx.components.example_gen import component as example_gen_component
from tfx.components.example_gen import driver as example_gen_driver
from tfx.components.example_gen import input_processor
from tfx.components.example_gen.csv_example_gen import component as csv_component
from tfx.components.example_gen.import_example_gen import component as import_component
from tfx.components.example_gen.import_example_gen import executor as import_executor
from tfx.components.schema_gen.import_schema_gen import component as import_schema_component
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import channel, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ExecutionParameter

from tfx_accum.atomic_files import gfile_digest, gfile_write_atomic
from tfx_accum.components.data import csv_examples

FINGERPRINT_FILE = "tfx_accum_fingerprint.json"


def _files(uri: str) -> list[str]:
    """The artifact's files, relative to ``uri``, sorted (the fingerprint itself left out)."""
    found = []
    for directory, _, names in tf.io.gfile.walk(uri):
        for name in names:
            relative = os.path.relpath(os.path.join(directory, name), uri)
            if relative != FINGERPRINT_FILE:
                found.append(relative)
    return sorted(found)


def fingerprint(uri: str) -> dict[str, dict[str, Any]]:
    """``{relative path: {"size": bytes, "sha256": hex}}`` of every file under ``uri``."""
    result = {}
    for relative in _files(uri):
        size, digest = gfile_digest(os.path.join(uri, relative))
        result[relative] = {"size": size, "sha256": digest}
    return result


def write_fingerprint(uri: str) -> None:
    """Records the fingerprint of the artifact at ``uri`` (after its files are complete)."""
    gfile_write_atomic(
        os.path.join(uri, FINGERPRINT_FILE), json.dumps({"files": fingerprint(uri)}, indent=1)
    )


def check(uri: str) -> str | None:
    """``None`` if the files under ``uri`` are what was written; else what differs.

    An artifact without a fingerprint (written by another ExampleGen) is not judged.
    """
    path = os.path.join(uri, FINGERPRINT_FILE)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path) as handle:
            recorded = json.loads(handle.read())["files"]
    except Exception as error:  # noqa: BLE001 - an unreadable fingerprint is a difference
        return f"{path} is unreadable ({type(error).__name__})"
    present = set(_files(uri))
    for relative, expected in sorted(recorded.items()):
        full = os.path.join(uri, relative)
        if relative not in present:
            return f"{full} is missing"
        size, digest = gfile_digest(full)
        if size != expected["size"]:
            return f"{full} has {size:,} bytes, {expected['size']:,} when written"
        if digest != expected["sha256"]:
            return f"{full} has other contents than when written (same size)"
    extra = sorted(present - set(recorded))
    if extra:
        return f"{os.path.join(uri, extra[0])} was not written by ExampleGen"
    return None


class _Fingerprinting:
    """Runs TFX's ExampleGen executor, then records the fingerprint of what it wrote."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        super().Do(input_dict, output_dict, exec_properties)
        for artifact in output_dict[standard_component_specs.EXAMPLES_KEY]:
            write_fingerprint(artifact.uri)


class CsvExecutor(_Fingerprinting, csv_examples.Executor):
    """TFX's CsvExampleGen executor, streaming (``csv_examples``), then the fingerprint."""


class ImportExecutor(_Fingerprinting, import_executor.Executor):
    """TFX's ImportExampleGen executor, then the fingerprint of what it wrote."""


def content_digest(base: str, patterns: list[str]) -> str:
    """SHA-256 over the files ``patterns`` match under ``base``: names and contents."""
    digest = hashlib.sha256()
    for pattern in patterns:
        for path in sorted(tf.io.gfile.glob(os.path.join(base, pattern))):
            size, file_digest = gfile_digest(path)
            digest.update(f"{os.path.relpath(path, base)}\0{size}\0{file_digest}\n".encode())
    return digest.hexdigest()


class ContentInputProcessor(input_processor.FileBasedInputProcessor):
    """TFX's file-based input processor, with the files' contents in the fingerprint."""

    def get_input_fingerprint(self, span: int, version: int | None) -> str | None:
        fingerprint = super().get_input_fingerprint(span, version)
        patterns = [
            self.get_pattern_for_span_version(split.pattern, span, version)
            for split in self._splits
        ]
        return f"{fingerprint},sha256:{content_digest(self._input_base_uri, patterns)}"


class ContentFingerprintDriver(example_gen_driver.FileBasedDriver):
    """TFX's file-based ExampleGen driver, fingerprinting the input files by content."""

    def get_input_processor(self, splits, range_config=None, input_base_uri=None):
        assert input_base_uri
        return ContentInputProcessor(input_base_uri, splits, range_config)


class CsvExampleGen(csv_component.CsvExampleGen):
    """``tfx.components.CsvExampleGen`` that fingerprints its input by content and its
    output as written, and takes ExampleGen's ``custom_config`` (the cells to read as
    missing: ``csv_examples.missing_values_config``), which TFX's CSV component does not
    pass on."""

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(CsvExecutor)
    DRIVER_CLASS = ContentFingerprintDriver

    def __init__(
        self,
        input_base: str | None = None,
        input_config: Any = None,
        output_config: Any = None,
        range_config: Any = None,
        custom_config: Any = None,
    ):
        example_gen_component.FileBasedExampleGen.__init__(
            self,
            input_base=input_base,
            input_config=input_config,
            output_config=output_config,
            custom_config=custom_config,
            range_config=range_config,
        )


class ImportExampleGen(import_component.ImportExampleGen):
    """``tfx.components.ImportExampleGen`` that fingerprints its input by content and its
    output as written."""

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(ImportExecutor)
    DRIVER_CLASS = ContentFingerprintDriver


SCHEMA_DIGEST = "schema_sha256"  # ImportSchemaGen's extra execution property


class ImportSchemaGenSpec(standard_component_specs.ImportSchemaGenSpec):
    PARAMETERS = {
        **standard_component_specs.ImportSchemaGenSpec.PARAMETERS,
        SCHEMA_DIGEST: ExecutionParameter(type=str, optional=True),
    }


class ImportSchemaGen(import_schema_component.ImportSchemaGen):
    """``tfx.components.ImportSchemaGen`` whose cache key holds the schema file's SHA-256
    (TFX's holds its path only: an edited schema was served from the cache)."""

    SPEC_CLASS = ImportSchemaGenSpec

    def __init__(self, schema_file: str):
        digest = None
        if tf.io.gfile.exists(schema_file):  # a compile host may not have it: TFX's key then
            digest = gfile_digest(schema_file)[1]
        spec = ImportSchemaGenSpec(
            schema_file=schema_file,
            schema_sha256=digest,
            schema=channel.Channel(type=standard_artifacts.Schema),
        )
        base_component.BaseComponent.__init__(self, spec=spec)
