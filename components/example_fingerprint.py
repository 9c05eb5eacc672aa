"""ExampleGen's output, fingerprinted when it is written and checked before it is trusted.

A cached ExampleGen execution is served from ML Metadata without looking at its files: with
an output file cut in half between two runs, every component came from the cache, the run
said "blessed: yes", and a later retrain failed with ``DataLossError: truncated record``
naming no file. So ExampleGen here records, beside its output, the size and SHA-256 of every
file it wrote (``FINGERPRINT_FILE`` in the artifact's directory, written atomically after
the files), and :func:`check` compares them again: the local runner calls it before a run
(``pipeline/cache_check.py``) and makes ExampleGen run again when they differ.

The components are TFX's ``CsvExampleGen`` and ``ImportExampleGen`` with an executor that
runs TFX's and then writes the fingerprint (TFX's public way to extend a component, as in
``components/pusher.py``); their ids stay ``CsvExampleGen`` and ``ImportExampleGen``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import tensorflow as tf
from tfx.components.example_gen.csv_example_gen import component as csv_component
from tfx.components.example_gen.csv_example_gen import executor as csv_executor
from tfx.components.example_gen.import_example_gen import component as import_component
from tfx.components.example_gen.import_example_gen import executor as import_executor
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_component_specs

from tfx_accum.components.atomic_files import gfile_digest, gfile_write_atomic

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


class CsvExecutor(_Fingerprinting, csv_executor.Executor):
    """TFX's CsvExampleGen executor, then the fingerprint of what it wrote."""


class ImportExecutor(_Fingerprinting, import_executor.Executor):
    """TFX's ImportExampleGen executor, then the fingerprint of what it wrote."""


class CsvExampleGen(csv_component.CsvExampleGen):
    """``tfx.components.CsvExampleGen`` that fingerprints its output."""

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(CsvExecutor)


class ImportExampleGen(import_component.ImportExampleGen):
    """``tfx.components.ImportExampleGen`` that fingerprints its output."""

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(ImportExecutor)
