"""TFX's penguin example (``tfx/examples/penguin/penguin_pipeline_local.py``) with tfx-accum's
``tuner_fn`` and ``run_fn`` in TFX's *stock* components: what README's "Use it in your own TFX
pipeline" shows, run by tests/training/test_tfx_pipelines.py.

The data is TFX's own penguin data as its wheel ships it (``tfx/components/testdata/penguin``:
the example's ``penguins_processed.csv``, split in ExampleGen's form), written back to CSV
files with its own column names, and an unlabelled copy of the eval rows for BulkInferrer.

``create_pipeline(..., transform=False)``: CsvExampleGen -> StatisticsGen -> SchemaGen ->
Tuner -> Trainer -> Evaluator (with a LatestBlessedModelStrategy Resolver) -> Pusher, and
BulkInferrer on the unlabelled CSV. ``transform=True``: the same with TFX's Transform (the
example's own ``preprocessing_fn``) between SchemaGen and the Tuner and Trainer, and the
example's ``EvalConfig`` (``label_key='species_xf'``, ``transform_features``) unchanged.
"""

from __future__ import annotations

import csv
from pathlib import Path

import tensorflow as tf
from tfx_example_runs import blessed_and_pushed, bulk_inferrer, local_pipeline, tuner_and_trainer

FEATURES = ["culmen_length_mm", "culmen_depth_mm", "flipper_length_mm", "body_mass_g"]
LABEL = "species"
# The search tfx-accum's Tuner runs here: small, for CI (every trial is trained).
SEARCH_SPACE = {
    "accumulation_steps_choices": [1, 2, 4],
    "micro_batch_choices": [8, 16],
    "learning_rate_min": 3e-3,
    "learning_rate_max": 3e-2,
    "max_trials": 3,
    "tuning_epochs": 8,
    "algorithm": "random",
}


def _testdata() -> Path:
    import tfx

    return Path(tfx.__file__).parent / "components" / "testdata" / "penguin"


def write_penguin_csvs(directory: Path) -> tuple[Path, Path]:
    """``(labelled, unlabelled)``: directories holding the penguin CSV files."""
    labelled, unlabelled = directory / "labelled", directory / "unlabelled"
    labelled.mkdir(parents=True)
    unlabelled.mkdir(parents=True)
    rows = []
    for split in ("train", "eval"):
        files = sorted(str(p) for p in (_testdata() / "data" / f"Split-{split}").glob("*.gz"))
        for record in tf.data.TFRecordDataset(files, "GZIP"):
            example = tf.train.Example.FromString(record.numpy())
            feature = example.features.feature
            row = {name: feature[name].float_list.value[0] for name in FEATURES}
            row[LABEL] = feature[LABEL].int64_list.value[0]
            rows.append(row)
    with open(labelled / "penguins_processed.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, [*FEATURES, LABEL])
        writer.writeheader()
        writer.writerows(rows)
    with open(unlabelled / "penguins_unlabelled.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, FEATURES)
        writer.writeheader()
        writer.writerows({name: row[name] for name in FEATURES} for row in rows[::3])
    return labelled, unlabelled


def create_pipeline(
    name: str,
    root: Path,
    labelled: Path,
    unlabelled: Path,
    serving_dir: Path,
    transform: bool,
):
    """The penguin pipeline with tfx-accum's functions in TFX's stock components."""
    import tensorflow_model_analysis as tfma
    from tfx import v1 as tfx

    example_gen = tfx.components.CsvExampleGen(input_base=str(labelled))
    statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    schema_gen = tfx.components.SchemaGen(
        statistics=statistics_gen.outputs["statistics"], infer_feature_shape=True
    )
    components = [example_gen, statistics_gen, schema_gen]
    examples, label = example_gen.outputs["examples"], LABEL
    extra = {}
    if transform:
        transform_component = tfx.components.Transform(
            examples=example_gen.outputs["examples"],
            schema=schema_gen.outputs["schema"],
            preprocessing_fn="tfx.examples.penguin.penguin_utils_base.preprocessing_fn",
        )
        components.append(transform_component)
        examples, label = transform_component.outputs["transformed_examples"], LABEL + "_xf"
        extra = {"transform_graph": transform_component.outputs["transform_graph"]}
    config = {"label_key": label, "model": "mlp"}
    tuner, trainer = tuner_and_trainer(
        tfx,
        {**config, "search_space": SEARCH_SPACE},
        config,
        examples=examples,
        schema=schema_gen.outputs["schema"],
        **extra,
    )
    accuracy = tfma.MetricConfig(
        class_name="SparseCategoricalAccuracy",
        threshold=tfma.MetricThreshold(
            value_threshold=tfma.GenericValueThreshold(lower_bound={"value": 0.6}),
            change_threshold=tfma.GenericChangeThreshold(
                direction=tfma.MetricDirection.HIGHER_IS_BETTER, absolute={"value": -1e-10}
            ),
        ),
    )
    if transform:  # the example's EvalConfig, as written
        model_spec = tfma.ModelSpec(
            signature_name="serving_default",
            label_key="species_xf",
            preprocessing_function_names=["transform_features"],
        )
    else:  # the example's, on raw examples: the label as it is
        model_spec = tfma.ModelSpec(signature_name="serving_default", label_key=LABEL)
    eval_config = tfma.EvalConfig(
        model_specs=[model_spec],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[tfma.MetricsSpec(metrics=[accuracy])],
    )
    resolver, evaluator, pusher = blessed_and_pushed(
        tfx, trainer, example_gen.outputs["examples"], eval_config, serving_dir
    )
    unlabelled_gen = tfx.components.CsvExampleGen(
        input_base=str(unlabelled),
        output_config=tfx.proto.Output(
            split_config=tfx.proto.SplitConfig(
                splits=[tfx.proto.SplitConfig.Split(name="unlabelled", hash_buckets=1)]
            )
        ),
    ).with_id("unlabelled_example_gen")
    inferrer = bulk_inferrer(
        tfx, trainer, evaluator, unlabelled_gen.outputs["examples"], "unlabelled"
    )
    components += [tuner, trainer, resolver, evaluator, pusher, unlabelled_gen, inferrer]
    return local_pipeline(tfx, name, root, components)


def run(root: Path, transform: bool) -> Path:
    """Runs the pipeline under ``root`` with TFX's LocalDagRunner; returns the serving dir."""
    from tfx import v1 as tfx

    labelled, unlabelled = write_penguin_csvs(root / "data")
    serving = root / "serving"
    name = "penguin-transform" if transform else "penguin"
    tfx.orchestration.LocalDagRunner().run(
        create_pipeline(name, root, labelled, unlabelled, serving, transform)
    )
    return serving


if __name__ == "__main__":
    import sys

    run(Path(sys.argv[1]), transform=sys.argv[2:] == ["transform"])
