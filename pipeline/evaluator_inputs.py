"""The Evaluator's extractors: TFMA's own, on only the columns the evaluation reads.

TFX's Evaluator reads the eval split into Arrow record batches of every feature, and TFMA's
``FeaturesExtractor`` turns each column into per-example values that every later stage
copies and (between Beam stages) pickles. The served model takes the serialized examples
(``__raw_record__``) and the labels come from its ``transform_labels`` signature, so the
features are read only for labels, example weights and slices. On a table of 5,000 numeric
columns the features were most of the Evaluator's time; they are also why its cost grew
with the columns at all.

:func:`custom_extractors` is the Evaluator's public hook for this (TFX loads it from the
component's ``module_path``, this module): TFMA's default extractors, after one
:func:`ColumnsExtractor` that keeps the raw examples and the columns the ``EvalConfig``
names (labels, example weights, slicing keys). An ``EvalConfig`` with SQL slices may read
any column: then every column is kept, as without this module.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pyarrow as pa
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis import constants

STAGE_NAME = "KeepEvaluatedColumns"


def evaluated_columns(eval_config: tfma.EvalConfig) -> set[str] | None:
    """The feature columns ``eval_config`` reads; None where it may read any (SQL slices)."""
    columns: set[str] = set()
    for spec in eval_config.model_specs:
        columns.update(filter(None, [spec.label_key, spec.example_weight_key]))
        columns.update(spec.label_keys.values())
        columns.update(spec.example_weight_keys.values())
    slicing = list(eval_config.slicing_specs)
    for cross in eval_config.cross_slicing_specs:
        slicing += [cross.baseline_spec, *cross.slicing_specs]
    for spec in slicing:
        if spec.slice_keys_sql:
            return None
        columns.update(spec.feature_keys)
        columns.update(spec.feature_values)
    return columns


def ColumnsExtractor(eval_config: tfma.EvalConfig) -> tfma.extractors.Extractor:  # noqa: N802
    """Keeps, in each incoming record batch, the raw examples and :func:`evaluated_columns`
    (TFMA's naming: an extractor is built by a capitalised function)."""
    return tfma.extractors.Extractor(
        stage_name=STAGE_NAME, ptransform=_KeepColumns(evaluated_columns(eval_config))
    )


def kept(record_batch: pa.RecordBatch, columns: set[str] | None) -> pa.RecordBatch:
    """``record_batch`` with only the raw-example column and ``columns`` (all: None)."""
    if columns is None:
        return record_batch
    keep = [
        i
        for i, name in enumerate(record_batch.schema.names)
        if name == constants.ARROW_INPUT_COLUMN or name in columns
    ]
    return pa.RecordBatch.from_arrays(
        [record_batch.column(i) for i in keep],
        schema=pa.schema([record_batch.schema.field(i) for i in keep]),
    )


@beam.ptransform_fn
def _KeepColumns(extracts: beam.PCollection, columns: set[str] | None) -> beam.PCollection:  # noqa: N802
    def keep(batch: dict[str, Any]) -> dict[str, Any]:
        if constants.ARROW_RECORD_BATCH_KEY not in batch:
            return batch
        return {
            **batch,
            constants.ARROW_RECORD_BATCH_KEY: kept(
                batch[constants.ARROW_RECORD_BATCH_KEY], columns
            ),
        }

    return extracts | "KeepColumns" >> beam.Map(keep)


def custom_extractors(
    eval_shared_model: Any,
    eval_config: tfma.EvalConfig,
    tensor_adapter_config: Any,
) -> list[tfma.extractors.Extractor]:
    """TFX Evaluator's hook: :func:`ColumnsExtractor`, then TFMA's default extractors."""
    return [
        ColumnsExtractor(eval_config),
        *tfma.default_extractors(
            eval_shared_model=eval_shared_model,
            eval_config=eval_config,
            tensor_adapter_config=tensor_adapter_config,
        ),
    ]
