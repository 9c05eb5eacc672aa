"""What TFX's example pipelines with tfx-accum's functions share (tests/penguin_pipelines.py,
tests/taxi_pipelines.py): the Tuner and Trainer, the example's blessing and push, BulkInferrer,
the local run; and reading a run's outputs back (tests/training/test_tfx_pipelines.py,
tests/training/test_taxi_pipeline.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tensorflow as tf

TUNER_FN = "tfx_accum.components.search.tuner.tuner_fn"
RUN_FN = "tfx_accum.components.training.trainer.run_fn"


def tuner_and_trainer(tfx, tuner_config: dict, trainer_config: dict, **inputs: Any):
    """TFX's stock Tuner and Trainer with tfx-accum's functions, the example's
    ``TrainArgs``/``EvalArgs``; ``inputs``: ``examples``, ``schema`` (``transform_graph``)."""
    args = {
        "train_args": tfx.proto.TrainArgs(num_steps=100),
        "eval_args": tfx.proto.EvalArgs(num_steps=5),
    }
    tuner = tfx.components.Tuner(tuner_fn=TUNER_FN, custom_config=tuner_config, **args, **inputs)
    trainer = tfx.components.Trainer(
        run_fn=RUN_FN,
        hyperparameters=tuner.outputs["best_hyperparameters"],
        custom_config=trainer_config,
        **args,
        **inputs,
    )
    return tuner, trainer


def blessed_and_pushed(tfx, trainer, examples, eval_config, serving_dir: Path) -> list:
    """A LatestBlessedModelStrategy Resolver, the Evaluator with the example's
    ``eval_config`` on ``examples``, and the Pusher to ``serving_dir``."""
    model_resolver = tfx.dsl.Resolver(
        strategy_class=tfx.dsl.experimental.LatestBlessedModelStrategy,
        model=tfx.dsl.Channel(type=tfx.types.standard_artifacts.Model),
        model_blessing=tfx.dsl.Channel(type=tfx.types.standard_artifacts.ModelBlessing),
    ).with_id("latest_blessed_model_resolver")
    evaluator = tfx.components.Evaluator(
        examples=examples,
        model=trainer.outputs["model"],
        baseline_model=model_resolver.outputs["model"],
        eval_config=eval_config,
    )
    pusher = tfx.components.Pusher(
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        push_destination=tfx.proto.PushDestination(
            filesystem=tfx.proto.PushDestination.Filesystem(base_directory=str(serving_dir))
        ),
    )
    return [model_resolver, evaluator, pusher]


def bulk_inferrer(tfx, trainer, evaluator, examples, split: str):
    """BulkInferrer on ``examples``' ``split`` with the blessed model."""
    return tfx.components.BulkInferrer(
        examples=examples,
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        data_spec=tfx.proto.DataSpec(example_splits=[split]),
        model_spec=tfx.proto.ModelSpec(),
    )


def local_pipeline(tfx, name: str, root: Path, components: list):
    """The pipeline under ``root`` (``pipeline/``, ``metadata.db``), without the cache."""
    return tfx.dsl.Pipeline(
        pipeline_name=name,
        pipeline_root=str(root / "pipeline"),
        components=components,
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            str(root / "metadata.db")
        ),
        enable_cache=False,
    )


def latest(directory: Path) -> Path:
    """The newest execution's folder of a component's output."""
    return max(directory.iterdir(), key=lambda p: int(p.name))


def eval_examples(root: Path) -> list[bytes]:
    """ExampleGen's eval split, serialized ``tf.Example``s."""
    split = latest(root / "pipeline" / "CsvExampleGen" / "examples") / "Split-eval"
    files = sorted(str(p) for p in split.glob("*.gz"))
    return [r.numpy() for r in tf.data.TFRecordDataset(files, "GZIP")]


def without(record: bytes, feature: str) -> bytes:
    """``record`` without ``feature`` (a label, as TF Serving gets examples)."""
    example = tf.train.Example.FromString(record)
    del example.features.feature[feature]
    return example.SerializeToString()


def evaluator_metric(root: Path, name: str) -> float:
    """The Evaluator's value of the metric ``name`` over the whole eval split."""
    import tensorflow_model_analysis as tfma

    (metrics,) = tfma.load_metrics(str(latest(root / "pipeline" / "Evaluator" / "evaluation")))
    (entry,) = [m for m in metrics.metric_keys_and_values if m.key.name == name]
    return entry.value.double_value.value


def inferences(root: Path) -> list:
    """BulkInferrer's ``PredictionLog``s."""
    from tensorflow_serving.apis import prediction_log_pb2

    results = latest(root / "pipeline" / "BulkInferrer" / "inference_result")
    files = sorted(str(p) for p in results.glob("*.gz"))
    return [
        prediction_log_pb2.PredictionLog.FromString(r.numpy())
        for r in tf.data.TFRecordDataset(files, "GZIP")
    ]
