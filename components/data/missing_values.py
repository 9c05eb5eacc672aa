"""The CSV cells CsvExampleGen reads as empty (``--missing-values``), in its ``custom_config``.

TFX's ExampleGen hands its executor a ``custom_config`` (``example_gen_pb2.CustomConfig``, an
``Any``): here a ``Struct`` ``{"missing_values": ["N/A", "-"]}``, written by the pipeline and
read by the streaming CSV executor (tfx_accum.components.data.csv_examples). Being an execution
property, it is part of ExampleGen's cache key, so a changed list reads the data again.

Example:

```python
CsvExampleGen(input_base=root, custom_config=missing_values_config(["N/A"]))
configured_missing_values(exec_properties)  # ("N/A",)
```
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
from collections.abc import Sequence
from typing import Any

from google.protobuf import struct_pb2
from tfx.proto import example_gen_pb2
from tfx.types import standard_component_specs
from tfx.utils import proto_utils

MISSING_VALUES_KEY = "missing_values"


def missing_values_config(missing_values: Sequence[str]) -> example_gen_pb2.CustomConfig:
    """ExampleGen's ``custom_config`` that makes the CSV cells ``missing_values`` empty."""
    config = example_gen_pb2.CustomConfig()
    values = struct_pb2.Struct()
    values.update({MISSING_VALUES_KEY: list(missing_values)})
    config.custom_config.Pack(values)
    return config


def configured_missing_values(exec_properties: dict[str, Any]) -> tuple[str, ...]:
    """The cells read as empty, from ExampleGen's ``custom_config`` (none by default)."""
    text = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
    if not text:
        return ()
    config = example_gen_pb2.CustomConfig()
    proto_utils.json_to_proto(text, config)
    values = struct_pb2.Struct()
    if not config.custom_config.Unpack(values):
        return ()
    return tuple(values[MISSING_VALUES_KEY]) if MISSING_VALUES_KEY in values else ()
