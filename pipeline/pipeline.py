"""The TFX pipeline: ExampleGen through Pusher, shared by the local and Kubeflow runners.

ExampleGen is CsvExampleGen for CSV files, or ImportExampleGen for TFRecord files of
``tf.Example``s (``data_format``).

The Tuner and Trainer code is referenced by dotted path (``tuner_fn=``, ``run_fn=``), not
``module_file``, so it ships inside the installed package (and the container image) and a
Kubeflow compile needs no upload. There is no Resolver node (self-hosted Kubeflow
Pipelines cannot run one): the Evaluator blesses a model that beats the trivial baseline
on the eval split, and any fixed threshold asked for (tfx_accum.pipeline.evaluation).

The data root, the number of trials, the tuning epochs, the Trainer's updates and the
blessing threshold are run-time parameters of a compiled pipeline
(``tfx_accum.pipeline.run_parameters``); a local run gives them plain values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# TFX's classes from the modules that define them: `from tfx import v1` also imports its
# Google Cloud extensions (google.cloud.aiplatform, slow to import in every run).
from tfx.components import ExampleValidator, SchemaGen, StatisticsGen
from tfx.orchestration import metadata
from tfx.orchestration.pipeline import Pipeline
from tfx.proto import example_gen_pb2, pusher_pb2, trainer_pb2

from tfx_accum.components.config import tasks
from tfx_accum.components.config.blessing import Blessing
from tfx_accum.components.config.custom_config import BEST_TRIAL_BUDGET, ModuleConfig
from tfx_accum.components.config.hyperparameters import Hyperparameters
from tfx_accum.components.config.model_code import with_code
from tfx_accum.components.config.search_space import SearchSpace
from tfx_accum.components.config.settings import TRAIN_STEPS, ModelSettings
from tfx_accum.components.data.example_fingerprint import (
    CsvExampleGen,
    ImportExampleGen,
    ImportSchemaGen,
)
from tfx_accum.components.data.missing_values import missing_values_config
from tfx_accum.components.search.tuner_component import Tuner
from tfx_accum.components.training.pusher import Pusher
from tfx_accum.components.training.trainer_component import Trainer
from tfx_accum.pipeline import run_parameters as params
from tfx_accum.pipeline.beam_args import pod_beam_args, without_tfx_sdist
from tfx_accum.pipeline.checks.data_files import PATTERNS  # ExampleGen's, read by the input checks
from tfx_accum.pipeline.evaluation import eval_config

TUNER_FN = "tfx_accum.components.search.tuner_module.tuner_fn"
RUN_FN = "tfx_accum.components.training.trainer_module.run_fn"
# The Evaluator's custom_extractors: TFMA on only the columns the evaluation reads.
EVALUATOR_MODULE = "tfx_accum.pipeline.evaluator_inputs"


def example_gen_component(data_root: str, data_format: str, missing_values: Sequence[str] = ()):
    """CsvExampleGen for CSV files, ImportExampleGen for TFRecords of tf.Examples
    (``missing_values``: CSV cells read as empty)."""
    if data_format not in PATTERNS:
        raise ValueError(
            f"`data_format` must be one of {', '.join(PATTERNS)}. Received: {data_format!r}."
        )
    if missing_values and data_format != "csv":
        raise ValueError("`missing_values` applies to CSV files only.")
    input_config = example_gen_pb2.Input(
        splits=[example_gen_pb2.Input.Split(name="single_split", pattern=PATTERNS[data_format])]
    )
    # TFX's, fingerprinting what they write (checked before a cached output is trusted).
    if data_format == "csv":
        custom = {"custom_config": missing_values_config(missing_values)} if missing_values else {}
        return CsvExampleGen(input_base=data_root, input_config=input_config, **custom)
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
    bless_metric: str | None = None,
    bless_threshold: float | None = None,
    metadata_path: str | None = None,
    beam_pipeline_args: Sequence[str] | None = None,
    enable_cache: bool = True,
    parallel_trials: int = 1,
    data_format: str = "csv",
    schema_file: str | None = None,
    runtime_parameters: bool = False,
    fail_on_anomalies: bool = False,
    missing_values: Sequence[str] = (),
) -> Pipeline:
    """Builds the pipeline. ``metadata_path=None`` leaves ML Metadata to the orchestrator.

    ``hyperparameters`` are the Trainer's when ``tune`` is off (default:
    ``Hyperparameters()``); with tuning on, the Tuner's best ones are used.
    ``train_steps_auto`` (``--train-steps`` not given): with tuning, the Trainer trains the
    best configuration for the best trial's budget, and so ends with its model; otherwise
    ``train_steps`` updates with early stopping.
    ``beam_pipeline_args``: default, Beam's DirectRunner in-process with one worker (the
    runners size it: ``tfx_accum.pipeline.beam_args``).
    ``parallel_trials``: Keras Tuner trials run side by side in worker processes of the
    Tuner (``tfx_accum.components.search.parallel_search``); 1 runs them one after another.
    ``data_format``: ``csv`` or ``tfrecord`` (``tf.Example`` records).
    ``schema_file``: the user's schema (a ``schema.pbtxt``), imported by ImportSchemaGen
    instead of SchemaGen's inferred one: it also guides StatisticsGen (categorical
    integers get their values counted).
    ``bless_metric``, ``bless_threshold``: what the Evaluator blesses on, for the task of
    ``model_settings`` (:func:`~tfx_accum.pipeline.evaluation.eval_config`).
    ``missing_values``: CSV cells CsvExampleGen reads as empty (missing values).
    ``fail_on_anomalies``: the Tuner and Trainer take ExampleValidator's anomalies as an
    input and do not start when it found any (tfx_accum.components.data.anomalies).
    ``runtime_parameters``: the data root, ``max_trials``, ``tuning_epochs``,
    ``train_steps`` and ``bless_threshold`` become ``RuntimeParameter`` s with these
    values as defaults (for a Kubeflow compile).

    The Tuner and Trainer are TFX's, with StatisticsGen's statistics as an input
    (tfx_accum.components.data.component_inputs): the data description is made from them.
    """
    search_space = search_space or SearchSpace()
    model_settings = model_settings or ModelSettings()
    # The code of the model's functions in the Tuner's and Trainer's properties, so their
    # cache keys: an edited model function (or a module it imports) is searched and trained
    # again.
    model_settings = with_code(model_settings)
    label_key = model_settings.label_key
    run = params.RunParameters.of(
        data_root=data_root,
        max_trials=search_space.max_trials,
        tuning_epochs=search_space.tuning_epochs,
        train_steps=train_steps,
        bless_threshold=params.NO_THRESHOLD if bless_threshold is None else bless_threshold,
    )
    if runtime_parameters:
        run = run.runtime()

    example_gen = example_gen_component(run[params.DATA_ROOT], data_format, missing_values)
    if schema_file:
        schema_gen = ImportSchemaGen(schema_file=schema_file)
        statistics_gen = StatisticsGen(
            examples=example_gen.outputs["examples"], schema=schema_gen.outputs["schema"]
        )
        components: list[Any] = [example_gen, schema_gen, statistics_gen]
    else:
        statistics_gen = StatisticsGen(examples=example_gen.outputs["examples"])
        schema_gen = SchemaGen(
            statistics=statistics_gen.outputs["statistics"], infer_feature_shape=True
        )
        components = [example_gen, statistics_gen, schema_gen]
    statistics = statistics_gen.outputs["statistics"]
    example_validator = ExampleValidator(statistics=statistics, schema=schema_gen.outputs["schema"])
    components.append(example_validator)
    gate: dict[str, Any] = {}
    if fail_on_anomalies:
        gate = {"anomalies": example_validator.outputs["anomalies"], "fail_on_anomalies": True}

    best_hyperparameters = None  # the Tuner's output channel, when tuning
    if tune:
        # The Tuner budgets trials in examples (search_space.tuning_epochs) and reads the
        # whole eval split: its TrainArgs/EvalArgs are required by TFX but unused, and kept
        # constant so that --train-steps does not invalidate the Tuner's cache.
        tuner = Tuner(
            run_parameters=run.for_component(params.TUNER),
            tuner_fn=TUNER_FN,
            examples=example_gen.outputs["examples"],
            schema=schema_gen.outputs["schema"],
            statistics=statistics,
            train_args=trainer_pb2.TrainArgs(),
            eval_args=trainer_pb2.EvalArgs(),
            custom_config=ModuleConfig(
                model_settings=model_settings,
                search_space=search_space,
                # A stable place for the search, so a rerun continues it (tuner_module.py).
                search_root=f"{pipeline_root}/_search",
                parallel_trials=parallel_trials,
            ).to_custom_config(),
            **gate,
        )
        best_hyperparameters = tuner.outputs["best_hyperparameters"]
        components.append(tuner)

    trainer_config = ModuleConfig(
        model_settings=model_settings,
        # Without a Tuner, the Trainer's own (with one, the Tuner's best).
        hyperparameters=None if tune else (hyperparameters or Hyperparameters()),
        # A stable place for the Trainer's training-state backups (trainer.backup_location).
        backup_root=f"{pipeline_root}/_backup",
        # The search's seed: the Trainer trains the best trial's model (same start, order).
        seed=search_space.seed,
        train_budget=BEST_TRIAL_BUDGET if tune and train_steps_auto else None,
    )
    trainer = Trainer(
        run_parameters=run.for_component(params.TRAINER),
        run_fn=RUN_FN,
        examples=example_gen.outputs["examples"],
        schema=schema_gen.outputs["schema"],
        statistics=statistics,
        hyperparameters=best_hyperparameters,
        train_args=trainer_pb2.TrainArgs(num_steps=train_steps),  # a run's train_steps override
        eval_args=trainer_pb2.EvalArgs(),  # validation reads the whole eval split
        custom_config=trainer_config.to_custom_config(),
        **gate,
    )
    blessing = Blessing.for_task(
        tasks.evaluated_task(model_settings.task, model_settings.num_classes),
        bless_metric,
        bless_threshold,
    )
    evaluator = params.Evaluator(
        run_parameters=run.for_component(params.EVALUATOR),
        bless_metric=blessing.metric,
        examples=example_gen.outputs["examples"],
        model=trainer.outputs["model"],
        module_path=EVALUATOR_MODULE,
        eval_config=eval_config(
            blessing.task, label_key, model_settings.num_classes, blessing.metric, bless_threshold
        ),
    )
    # TFX's, publishing the model atomically (tfx_accum.components.training.pusher)
    pusher = Pusher(
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        push_destination=pusher_pb2.PushDestination(
            filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=serving_model_dir)
        ),
    )
    components += [trainer, evaluator, pusher]

    return Pipeline(
        pipeline_name=pipeline_name,
        pipeline_root=pipeline_root,
        components=components,
        enable_cache=enable_cache,
        metadata_connection_config=(
            metadata.sqlite_metadata_connection_config(metadata_path) if metadata_path else None
        ),
        beam_pipeline_args=without_tfx_sdist(beam_pipeline_args or pod_beam_args(1)),
    )
