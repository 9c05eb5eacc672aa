"""The user's own schema (``--schema FILE``), checked against the data before anything runs.

The TFX way to curate features is a schema: ImportSchemaGen imports it instead of
SchemaGen's inferred one, StatisticsGen computes the statistics under it, and the Tuner and
Trainer describe the data from it (tfx_accum.components.data.features). A column the schema leaves
out is not a feature; an INT feature with ``int_domain { is_categorical: true }`` is a category.

Checked here, as ExampleGen and the components will read it: the file parses as a
``tensorflow_metadata`` Schema in text format, names the label, and every feature it names
is a column of the data with a type the data has. Errors are one line, exit code 2.

Example:

```python
schema = read_schema_file("my_schema.pbtxt")
summary, dropped = apply_schema(summary, schema, "label")
```
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tfx_accum.components.data.feature_kinds import CATEGORICAL, IMAGE, NUMERIC, STRING
from tfx_accum.pipeline.checks.data import DataError, DataSummary


def read_schema_file(path: str):
    """The ``Schema`` proto in ``path`` (text format), or a ``DataError``."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    file = Path(path)
    if not file.is_file():
        raise DataError(f"--schema {path}: no such file (a schema.pbtxt in text format).")
    try:
        text = file.read_text(encoding="utf-8")
        schema = text_format.Parse(text, schema_pb2.Schema())
    except (UnicodeDecodeError, text_format.ParseError) as error:
        raise DataError(
            f"--schema {path} is not a Schema in text format ({str(error).splitlines()[0]}); "
            "start from SchemaGen's output (<output>/pipeline/SchemaGen/schema/*/schema.pbtxt)."
        ) from None
    if not schema.feature:
        raise DataError(f"--schema {path} declares no feature.")
    return schema


def categorical_features(schema) -> tuple[str, ...]:
    """The INT features the schema declares categorical."""
    return tuple(
        f.name for f in schema.feature if f.HasField("int_domain") and f.int_domain.is_categorical
    )


def apply_schema(summary: DataSummary, schema, label_key: str) -> tuple[DataSummary, list[str]]:
    """``summary`` with only the schema's features; and the data's columns it leaves out.

    Raises ``DataError`` when the schema lacks the label, names a column the data lacks,
    or types a feature differently from the data.
    """
    from tensorflow_metadata.proto.v0 import schema_pb2

    declared = {f.name: f for f in schema.feature}
    if label_key not in declared:
        raise DataError(f"The schema has no feature for the label {label_key!r}; add it.")
    columns = set(summary.columns)
    missing = sorted(n for n in declared if n not in columns)
    if missing:
        raise DataError(
            f"The schema names {', '.join(map(repr, missing[:5]))}, which the data does not "
            "have; remove them from the schema or add the columns."
        )
    # The label's type, checked with the data before anything runs (a BYTES label over
    # integers failed in the Trainer, "Data types don't match").
    label_types = {schema_pb2.INT: ("int",), schema_pb2.FLOAT: ("int", "float")}
    label_types[schema_pb2.BYTES] = ("string",)
    label_type = declared[label_key].type
    if label_type in label_types and summary.label_dtype not in label_types[label_type]:
        type_name = schema_pb2.FeatureType.Name(label_type)
        holds = {"int": "integers", "float": "numbers", "string": "text"}[summary.label_dtype]
        raise DataError(
            f"The schema types the label {label_key!r} as {type_name}, but the data holds "
            f"{holds} there; fix the schema's type for {label_key!r}."
        )
    kinds = dict(summary.kinds)
    wanted = {schema_pb2.INT: NUMERIC, schema_pb2.FLOAT: NUMERIC, schema_pb2.BYTES: STRING}
    for name, feature in declared.items():
        if name == label_key or name not in kinds:
            continue
        kind = kinds[name]
        expected = wanted.get(feature.type)
        if expected is not None and (STRING if kind == IMAGE else kind) != expected:
            type_name = schema_pb2.FeatureType.Name(feature.type)
            raise DataError(
                f"The schema types {name!r} as {type_name}, but the data holds "
                f"{'text' if kind == STRING else kind} values there; fix the schema."
            )
    dropped = [n for n, _ in summary.kinds if n not in declared]
    categorical = set(categorical_features(schema))
    kept = tuple(
        (n, CATEGORICAL if n in categorical else k) for n, k in summary.kinds if n in declared
    )
    # A column the schema types BYTES is text by the user's word, stray tokens or not.
    stray = tuple(
        s
        for s in summary.stray_tokens
        if s.column not in declared or declared[s.column].type != schema_pb2.BYTES
    )
    return dataclasses.replace(summary, kinds=kept, stray_tokens=stray), dropped
