"""ExampleValidator's anomalies: read, and (asked to) a gate before the Tuner and Trainer.

ExampleValidator compares the data's statistics with the schema and records what it finds
(``Split-<name>/SchemaDiff.pb``, TFDV's ``Anomalies`` per split), but TFX stops nothing on
them: the run used to train, bless and push on data outside the schema's ranges without a
word. :func:`read_anomalies` gives them one line each (the run's summary prints them);
with ``fail_on_anomalies`` the Tuner and Trainer components
(tfx_accum.components.data.component_inputs) take ExampleValidator's output as an input
and refuse to start on data with anomalies, so nothing is trained: :class:`AnomaliesFound`,
which the command turns into exit code 2.
"""

from __future__ import annotations

import os

ANOMALIES = "anomalies"  # the Tuner's and Trainer's optional input channel
FAIL_ON_ANOMALIES = "fail_on_anomalies"  # their execution property (0 or 1)


class AnomaliesFound(RuntimeError):
    """ExampleValidator found anomalies and the run was asked to stop on them."""


def read_anomalies(uri: str) -> list[tuple[str, str, str]]:
    """``(split, feature, short description)`` of every anomaly ExampleValidator recorded."""
    import tensorflow as tf
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    found = []
    for path in sorted(tf.io.gfile.glob(os.path.join(uri, "Split-*", "SchemaDiff.pb"))):
        split = os.path.basename(os.path.dirname(path)).removeprefix("Split-")
        with tf.io.gfile.GFile(path, "rb") as handle:
            anomalies = anomalies_pb2.Anomalies.FromString(handle.read())
        for feature, info in sorted(anomalies.anomaly_info.items()):
            found.append((split, feature, info.short_description or info.description))
        if anomalies.HasField("dataset_anomaly_info"):
            info = anomalies.dataset_anomaly_info
            found.append((split, "(dataset)", info.short_description or info.description))
    return found


def describe(anomalies: list[tuple[str, str, str]]) -> str:
    """The anomalies in one line: ``a: Out-of-range values (train split); ...``."""
    return "; ".join(f"{feature}: {what} ({split} split)" for split, feature, what in anomalies)


def check_before_training(input_dict: dict, exec_properties: dict, component: str) -> None:
    """Raises :class:`AnomaliesFound` when asked to and ExampleValidator found any."""
    if not exec_properties.get(FAIL_ON_ANOMALIES) or not input_dict.get(ANOMALIES):
        return
    found = [a for artifact in input_dict[ANOMALIES] for a in read_anomalies(artifact.uri)]
    if found:
        raise AnomaliesFound(
            f"data anomalies (ExampleValidator, against the schema): {describe(found)}; the "
            f"{component} did not start, as --fail-on-anomalies asks: fix the data or the "
            "schema, or run without --fail-on-anomalies"
        )
