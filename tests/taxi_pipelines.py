"""TFX's Chicago taxi example (``tfx/examples/chicago_taxi_pipeline/taxi_pipeline_native_keras.py``)
with tfx-accum's ``tuner_fn`` and ``run_fn`` in TFX's stock Tuner and Trainer, and the
example's own module unchanged: its ``preprocessing_fn`` in Transform, its
``_build_keras_model`` named in ``custom_config``, its ``EvalConfig`` as written. What
docs/tfx.md shows; run by tests/training/test_taxi_pipeline.py.

The data is the example's own (``data/simple/data.csv`` in TFX's wheel), its first
``ROWS`` rows (the same every run), written here.

CsvExampleGen -> StatisticsGen -> SchemaGen -> Transform -> Tuner -> Trainer -> Evaluator
(with a LatestBlessedModelStrategy Resolver) -> Pusher, and BulkInferrer on the eval split
(the serving signature parses only the raw features the model needs, not ``tips``).
"""

from __future__ import annotations

import csv
from pathlib import Path

from tfx_example_runs import blessed_and_pushed, bulk_inferrer, local_pipeline, tuner_and_trainer

ROWS = 2000  # of the example's 15,002
LABEL = "tips"
TAXI = "tfx.examples.chicago_taxi_pipeline.taxi_utils_native_keras"
# The search tfx-accum's Tuner runs here: small, for CI (every trial is trained).
SEARCH_SPACE = {
    "accumulation_steps_choices": [1, 4],
    "micro_batch_choices": [16, 32],
    "learning_rate_min": 1e-3,
    "learning_rate_max": 3e-2,
    "max_trials": 3,
    "tuning_epochs": 2,
    "algorithm": "random",
}


def write_taxi_csv(directory: Path) -> Path:
    """The directory holding the sample's CSV file."""
    import tfx

    source = Path(tfx.__file__).parent / "examples" / "chicago_taxi_pipeline" / "data"
    with open(source / "simple" / "data.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        columns, rows = list(reader.fieldnames or []), [row for _, row in zip(range(ROWS), reader)]
    directory.mkdir(parents=True)
    with open(directory / "data.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)
    return directory


def create_pipeline(name: str, root: Path, data: Path, serving_dir: Path):
    """The taxi pipeline with tfx-accum's functions in TFX's stock components."""
    import tensorflow_model_analysis as tfma
    from tfx import v1 as tfx

    from tfx_accum.components import module_config

    # Checked here, as the pipeline is written: a misspelt key fails before anything runs.
    config = module_config(
        model=f"{TAXI}:_build_keras_model", label_key="tips_xf", search_space=SEARCH_SPACE
    )
    example_gen = tfx.components.CsvExampleGen(input_base=str(data))
    statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    schema_gen = tfx.components.SchemaGen(
        statistics=statistics_gen.outputs["statistics"], infer_feature_shape=True
    )
    transform = tfx.components.Transform(
        examples=example_gen.outputs["examples"],
        schema=schema_gen.outputs["schema"],
        preprocessing_fn=f"{TAXI}.preprocessing_fn",
    )
    tuner, trainer = tuner_and_trainer(
        tfx,
        config,
        config,
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        schema=schema_gen.outputs["schema"],
    )
    # The example's EvalConfig, as written.
    eval_config = tfma.EvalConfig(
        model_specs=[
            tfma.ModelSpec(
                signature_name="serving_default",
                label_key="tips_xf",
                preprocessing_function_names=["transform_features"],
            )
        ],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[
            tfma.MetricsSpec(
                metrics=[
                    tfma.MetricConfig(
                        class_name="BinaryAccuracy",
                        threshold=tfma.MetricThreshold(
                            value_threshold=tfma.GenericValueThreshold(lower_bound={"value": 0.6}),
                            change_threshold=tfma.GenericChangeThreshold(
                                direction=tfma.MetricDirection.HIGHER_IS_BETTER,
                                absolute={"value": -1e-10},
                            ),
                        ),
                    )
                ]
            )
        ],
    )
    examples = example_gen.outputs["examples"]
    resolver, evaluator, pusher = blessed_and_pushed(
        tfx, trainer, examples, eval_config, serving_dir
    )
    components = [example_gen, statistics_gen, schema_gen, transform, tuner, trainer]
    components += [resolver, evaluator, pusher]
    components.append(bulk_inferrer(tfx, trainer, evaluator, examples, "eval"))
    return local_pipeline(tfx, name, root, components)


def run(root: Path) -> Path:
    """Runs the pipeline under ``root`` with TFX's LocalDagRunner; returns the serving dir."""
    from tfx import v1 as tfx

    data = write_taxi_csv(root / "data")
    serving = root / "serving"
    tfx.orchestration.LocalDagRunner().run(create_pipeline("taxi", root, data, serving))
    return serving


if __name__ == "__main__":
    import sys

    run(Path(sys.argv[1]))
