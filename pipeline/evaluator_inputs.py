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

Where the ``EvalConfig`` has the overall slice only (the pipeline's), every example's slice
key is the empty one, which TFMA's ``SliceKeyExtractor`` works out example by example in a
stage of its own after unbatching. :func:`OverallSliceExtractor` sets it per batch instead,
before TFMA's own unbatching splits it with the rest of the batch: the same per-example
extracts, one per-example stage fewer. Any other slicing keeps TFMA's slicer. Where nothing
after slicing reads them (:func:`read_after_slicing`), the batch's features, transformed
features and serialized examples are dropped before unbatching, so that TFMA's metric stages
do not copy and pickle them example by example.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis import constants

# TFMA's own list of the metric computations an EvalConfig asks for (what its
# MetricsPlotsAndValidationsEvaluator runs) and its standard-inputs preprocessor class, which
# that evaluator treats apart; neither is exported by tfma.metrics. Tested: TFMA 0.47.1.
from tensorflow_model_analysis.metrics import metric_specs, metric_types

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


def overall_slice_only(eval_config: tfma.EvalConfig) -> bool:
    """Whether ``eval_config`` slices into the overall slice only (no slicing specs is the
    overall slice, as TFMA reads it)."""
    overall = tfma.SlicingSpec()
    return not eval_config.cross_slicing_specs and all(
        spec == overall for spec in eval_config.slicing_specs
    )


# The batch's extracts that TFMA's evaluators read after slicing only for some configs.
_BATCH_INPUTS = frozenset(
    {constants.FEATURES_KEY, constants.TRANSFORMED_FEATURES_KEY, constants.INPUT_KEY}
)


def read_after_slicing(eval_config: tfma.EvalConfig, eval_shared_model: Any) -> bool:
    """Whether TFMA's evaluators may read the features, transformed features or serialized
    examples after slicing: a metrics spec with a query key (examples grouped by a feature),
    a metric computation with any preprocessor other than TFMA's standard inputs filtered to
    other keys (``FeaturePreprocessor``'s features, a custom ``Preprocessor``, the wildcard),
    or a Keras model's own compiled metrics (TFMA's default metrics, computed from its
    features)."""
    if any(spec.query_key for spec in eval_config.metrics_specs):
        return True
    if isinstance(eval_shared_model, dict):
        models = list(eval_shared_model.values())
    elif isinstance(eval_shared_model, list):  # (an EvalSharedModel is a tuple)
        models = list(eval_shared_model)
    else:
        models = [eval_shared_model] if eval_shared_model is not None else []
    options = eval_config.options
    defaults = (
        not options.HasField("include_default_metrics") or options.include_default_metrics.value
    )
    if defaults and any(
        m.include_default_metrics and m.model_type == constants.TF_KERAS for m in models
    ):
        return True
    computations = metric_specs.to_computations(
        list(eval_config.metrics_specs), eval_config=eval_config
    )
    for computation in computations:
        for preprocessor in getattr(computation, "preprocessors", None) or []:
            if type(preprocessor) is not metric_types.StandardMetricInputsPreprocessor:
                return True
            if not preprocessor.include_filter or _BATCH_INPUTS & set(preprocessor.include_filter):
                return True
    return False


def OverallSliceExtractor(keep_inputs: bool = True) -> tfma.extractors.Extractor:  # noqa: N802
    """TFMA's ``UnbatchExtractor`` and ``SliceKeyExtractor`` for an ``EvalConfig`` of the
    overall slice only: each batch's examples keyed to the overall slice as one array,
    then split by TFMA's unbatching. Named as TFMA's slicing stage, after which its
    evaluators run (``MetricsPlotsAndValidationsEvaluator``'s ``run_after``).
    ``keep_inputs=False`` (nothing reads them after slicing: :func:`read_after_slicing`)
    drops the batch's features, transformed features and serialized examples."""
    return tfma.extractors.Extractor(
        stage_name=tfma.extractors.SLICE_KEY_EXTRACTOR_STAGE_NAME,
        ptransform=_KeyOverallSliceAndUnbatch(
            tfma.extractors.UnbatchExtractor().ptransform, keep_inputs
        ),
    )


def overall_slice_keys(batch: dict[str, Any], keep_inputs: bool = True) -> dict[str, Any]:
    """``batch`` with each of its examples' slice keys: the overall slice's (``()``), as an
    array that TFMA's unbatching splits into the array ``SliceKeyExtractor`` gives; without
    its features, transformed features and serialized examples where not ``keep_inputs``."""
    keys = np.empty(_examples_in(batch), dtype=object)
    keys.fill(())
    kept = batch if keep_inputs else {k: v for k, v in batch.items() if k not in _BATCH_INPUTS}
    return {**kept, constants.SLICE_KEY_TYPES_KEY: keys}


def _examples_in(batch: dict[str, Any]) -> int:
    """How many examples a batched extract holds: its serialized examples (TFMA's
    ``FeaturesExtractor`` moves them from the Arrow batch to ``tfma.INPUT_KEY``)."""
    if constants.INPUT_KEY in batch:
        return len(batch[constants.INPUT_KEY])
    if constants.ARROW_RECORD_BATCH_KEY in batch:
        return batch[constants.ARROW_RECORD_BATCH_KEY].num_rows
    raise ValueError(
        f"{tfma.extractors.SLICE_KEY_EXTRACTOR_STAGE_NAME}: a batch without its examples "
        f"({constants.INPUT_KEY!r} or {constants.ARROW_RECORD_BATCH_KEY!r}); keys: {sorted(batch)}"
    )


@beam.ptransform_fn
def _KeyOverallSliceAndUnbatch(  # noqa: N802
    extracts: beam.PCollection, unbatch: beam.PTransform, keep_inputs: bool
) -> beam.PCollection:
    keyed = extracts | "KeyOverallSlice" >> beam.Map(overall_slice_keys, keep_inputs)
    return keyed | "Unbatch" >> unbatch


def custom_extractors(
    eval_shared_model: Any,
    eval_config: tfma.EvalConfig,
    tensor_adapter_config: Any,
) -> list[tfma.extractors.Extractor]:
    """TFX Evaluator's hook: :func:`ColumnsExtractor`, then TFMA's default extractors, their
    last two (unbatching, slicing) as one :func:`OverallSliceExtractor` where the config
    has the overall slice only (dropping the batch's inputs unless
    :func:`read_after_slicing`)."""
    extractors = tfma.default_extractors(
        eval_shared_model=eval_shared_model,
        eval_config=eval_config,
        tensor_adapter_config=tensor_adapter_config,
    )
    last = [
        tfma.extractors.UnbatchExtractor().stage_name,
        tfma.extractors.SLICE_KEY_EXTRACTOR_STAGE_NAME,
    ]
    if overall_slice_only(eval_config) and [x.stage_name for x in extractors[-2:]] == last:
        keep = read_after_slicing(eval_config, eval_shared_model)
        extractors = [*extractors[:-2], OverallSliceExtractor(keep_inputs=keep)]
    return [ColumnsExtractor(eval_config), *extractors]
