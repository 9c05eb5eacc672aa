"""The TFX pipeline: ExampleGen through Pusher, shared by the local and Kubeflow runners.

ExampleGen is CsvExampleGen for CSV files, or ImportExampleGen for TFRecord files of
``tf.Example``s (``data_format``).

The Tuner and Trainer code is referenced by dotted path (``tuner_fn=``, ``run_fn=``), not
``module_file``, so it ships inside the installed package (and the container image) and a
Kubeflow compile needs no upload. There is no Resolver node (self-hosted Kubeflow
Pipelines cannot run one): the Evaluator gates on an absolute accuracy threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow_model_analysis as tfma
from tfx import v1 as tfx
from tfx.proto import example_gen_pb2

from tfx_accum.components.example_fingerprint import CsvExampleGen, ImportExampleGen
from tfx_accum.components.export import LABELS_SIGNATURE, OUTPUT_KEY, SERVING_SIGNATURE
from tfx_accum.components.pusher import Pusher
from tfx_accum.components.search_space import SearchSpace
from tfx_accum.components.settings import (
    ACCURACY_THRESHOLD,
    TRAIN_STEPS,
    Hyperparameters,
    ModelSettings,
)
from tfx_accum.pipeline.beam import pod_beam_args
from tfx_accum.pipeline.data_files import PATTERNS  # ExampleGen's, read by the input checks

TUNER_FN = "tfx_accum.components.tuner.tuner_fn"
RUN_FN = "tfx_accum.components.trainer.run_fn"


def eval_config(label_key: str, accuracy_threshold: float) -> tfma.EvalConfig:
    """Accuracy on the eval split must reach ``accuracy_threshold`` to bless the model."""
    return tfma.EvalConfig(
        model_specs=[
            tfma.ModelSpec(
                label_key=label_key,
                signature_name=SERVING_SIGNATURE,
                prediction_key=OUTPUT_KEY,
                # The label as a class index, from the model's own label vocabulary (string
                # labels) or range check (components/export.py).
                preprocessing_function_names=[LABELS_SIGNATURE],
            )
        ],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[
            tfma.MetricsSpec(
                metrics=[
                    tfma.MetricConfig(
                        class_name="SparseCategoricalAccuracy",
                        threshold=tfma.MetricThreshold(
                            value_threshold=tfma.GenericValueThreshold(
                                lower_bound={"value": accuracy_threshold}
                            )
                        ),
                    ),
                    tfma.MetricConfig(class_name="ExampleCount"),
                ]
            )
        ],
    )


def example_gen_component(data_root: str, data_format: str):
    """CsvExampleGen for CSV files, ImportExampleGen for TFRecords of tf.Examples."""
    if data_format not in PATTERNS:
        raise ValueError(
            f"`data_format` must be one of {', '.join(PATTERNS)}. Received: {data_format!r}."
        )
    input_config = example_gen_pb2.Input(
        splits=[example_gen_pb2.Input.Split(name="single_split", pattern=PATTERNS[data_format])]
    )
    # TFX's, fingerprinting what they write (checked before a cached output is trusted).
    if data_format == "csv":
        return CsvExampleGen(input_base=data_root, input_config=input_config)
    return ImportExampleGen(input_base=data_root, input_config=input_config)


def create_pipeline(
    pipeline_name: str,
    pipeline_root: str,
    data_root: str,
    serving_model_dir: str,
    *,
    search_space: SearchSpace | None = None,
    tune: bool = True,
    hyperparameters: Hyperparameters | None = None,
    model_settings: ModelSettings | None = None,
    train_steps: int = TRAIN_STEPS,
    train_steps_auto: bool = False,
    accuracy_threshold: float = ACCURACY_THRESHOLD,
    metadata_path: str | None = None,
    beam_pipeline_args: Sequence[str] | None = None,
    enable_cache: bool = True,
    parallel_trials: int = 1,
    data_format: str = "csv",
) -> tfx.dsl.Pipeline:
    """Builds the pipeline. ``metadata_path=None`` leaves ML Metadata to the orchestrator.

    ``hyperparameters`` are the Trainer's when ``tune`` is off (default:
    ``Hyperparameters()``); with tuning on, the Tuner's best ones are used.
    ``train_steps_auto``: with tuning, the Trainer makes more than ``train_steps`` updates
    if that is what it takes to see as many examples as each trial saw.
    ``beam_pipeline_args``: default, Beam's DirectRunner in-process with one worker (the
    runners size it: :mod:`tfx_accum.pipeline.beam`).
    ``parallel_trials``: Keras Tuner trials run side by side in worker processes of the
    Tuner (:mod:`tfx_accum.components.parallel_search`); 1 runs them one after another.
    ``data_format``: ``csv`` or ``tfrecord`` (``tf.Example`` records).
    """
    search_space = search_space or SearchSpace()
    model_settings = model_settings or ModelSettings()
    custom_config: dict[str, Any] = model_settings.to_custom_config()
    label_key = model_settings.label_key

    example_gen = example_gen_component(data_root, data_format)
    statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    schema_gen = tfx.components.SchemaGen(
        statistics=statistics_gen.outputs["statistics"], infer_feature_shape=True
    )
    example_validator = tfx.components.ExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema_gen.outputs["schema"]
    )
    components: list[Any] = [example_gen, statistics_gen, schema_gen, example_validator]

    best_hyperparameters = None  # the Tuner's output channel, when tuning
    if tune:
        # The Tuner budgets trials in examples (search_space.tuning_epochs) and reads the
        # whole eval split: its TrainArgs/EvalArgs are required by TFX but unused, and kept
        # constant so that --train-steps does not invalidate the Tuner's cache.
        tuner = tfx.components.Tuner(
            tuner_fn=TUNER_FN,
            examples=example_gen.outputs["examples"],
            schema=schema_gen.outputs["schema"],
            train_args=tfx.proto.TrainArgs(),
            eval_args=tfx.proto.EvalArgs(),
            custom_config={
                **custom_config,
                "search_space": search_space.to_config(),
                # A stable place for the search, so a rerun continues it (tuner.py).
                "search_root": f"{pipeline_root}/_search",
                "parallel_trials": parallel_trials,
            },
        )
        best_hyperparameters = tuner.outputs["best_hyperparameters"]
        components.append(tuner)
    else:
        custom_config["hyperparameters"] = (hyperparameters or Hyperparameters()).to_values()

    # A stable place for the Trainer's training-state backups (see trainer.backup_location).
    trainer_config = {**custom_config, "backup_root": f"{pipeline_root}/_backup"}
    if tune and train_steps_auto:
        trainer_config["min_examples"] = {
            "epochs": search_space.tuning_epochs,
            "examples_per_epoch": search_space.examples_per_epoch,  # None: the train split
        }
    trainer = tfx.components.Trainer(
        run_fn=RUN_FN,
        examples=example_gen.outputs["examples"],
        schema=schema_gen.outputs["schema"],
        hyperparameters=best_hyperparameters,
        train_args=tfx.proto.TrainArgs(num_steps=train_steps),
        eval_args=tfx.proto.EvalArgs(),  # validation reads the whole eval split
        custom_config=trainer_config,
    )
    evaluator = tfx.components.Evaluator(
        examples=example_gen.outputs["examples"],
        model=trainer.outputs["model"],
        eval_config=eval_config(label_key, accuracy_threshold),
    )
    pusher = Pusher(  # TFX's, publishing the model atomically (components/pusher.py)
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        push_destination=tfx.proto.PushDestination(
            filesystem=tfx.proto.PushDestination.Filesystem(base_directory=serving_model_dir)
        ),
    )
    components += [trainer, evaluator, pusher]

    return tfx.dsl.Pipeline(
        pipeline_name=pipeline_name,
        pipeline_root=pipeline_root,
        components=components,
        enable_cache=enable_cache,
        metadata_connection_config=(
            tfx.orchestration.metadata.sqlite_metadata_connection_config(metadata_path)
            if metadata_path
            else None
        ),
        beam_pipeline_args=list(beam_pipeline_args or pod_beam_args(1)),
    )
