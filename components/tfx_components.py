"""TFX's Tuner and Trainer, with StatisticsGen's statistics as an input.

The stock components take the examples and the schema, not the statistics, although
StatisticsGen has computed over the whole training split exactly what the model needs
(means, variances, presence, the values of text features). These two components are TFX's
own, extended the way TFX components are: a component spec with one more input channel
(``statistics``, an ``ExampleStatistics`` artifact) and an executor that hands its location
to the module through ``custom_config["statistics"]`` (components/data.py), then runs
TFX's executor unchanged. ``tuner_fn``, ``run_fn`` and every other argument are TFX's.

Example (what pipeline/pipeline.py does):

```python
tuner = Tuner(examples=..., schema=..., statistics=statistics_gen.outputs["statistics"],
              tuner_fn="tfx_accum.components.tuner.tuner_fn", custom_config={...})
```
"""

from __future__ import annotations

from typing import Any

from tfx.components.trainer import executor as trainer_executor
from tfx.components.tuner import executor as tuner_executor
from tfx.dsl.components.base import base_component, executor_spec
from tfx.proto import trainer_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types import channel as channel_types
from tfx.types.component_spec import ChannelParameter
from tfx.utils import json_utils

from tfx_accum.components.data import STATISTICS_KEY

STATISTICS = "statistics"  # the input channel's name


def with_statistics(input_dict: dict, exec_properties: dict[str, Any]) -> dict[str, Any]:
    """``exec_properties`` whose ``custom_config`` names the statistics artifact's URI."""
    key = standard_component_specs.CUSTOM_CONFIG_KEY
    config = json_utils.loads(exec_properties.get(key) or "null") or {}
    config[STATISTICS_KEY] = artifact_utils.get_single_uri(input_dict[STATISTICS])
    return {**exec_properties, key: json_utils.dumps(config)}


class TunerExecutor(tuner_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        return super().Do(input_dict, output_dict, with_statistics(input_dict, exec_properties))


class TrainerExecutor(trainer_executor.GenericExecutor):
    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        return super().Do(input_dict, output_dict, with_statistics(input_dict, exec_properties))


_STATISTICS_INPUT = {STATISTICS: ChannelParameter(type=standard_artifacts.ExampleStatistics)}


class TunerSpec(standard_component_specs.TunerSpec):
    INPUTS = {**standard_component_specs.TunerSpec.INPUTS, **_STATISTICS_INPUT}


class TrainerSpec(standard_component_specs.TrainerSpec):
    INPUTS = {**standard_component_specs.TrainerSpec.INPUTS, **_STATISTICS_INPUT}


class Tuner(base_component.BaseComponent):
    """TFX's Tuner (a ``tuner_fn`` by dotted path) that also receives the statistics."""

    SPEC_CLASS = TunerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(TunerExecutor)

    def __init__(
        self,
        examples: channel_types.BaseChannel,
        schema: channel_types.BaseChannel,
        statistics: channel_types.BaseChannel,
        tuner_fn: str,
        train_args: trainer_pb2.TrainArgs | None = None,
        eval_args: trainer_pb2.EvalArgs | None = None,
        custom_config: dict[str, Any] | None = None,
    ):
        spec = TunerSpec(
            examples=examples,
            schema=schema,
            statistics=statistics,
            tuner_fn=tuner_fn,
            train_args=train_args or trainer_pb2.TrainArgs(),
            eval_args=eval_args or trainer_pb2.EvalArgs(),
            custom_config=json_utils.dumps(custom_config),
            best_hyperparameters=channel_types.Channel(type=standard_artifacts.HyperParameters),
            tuner_results=channel_types.Channel(type=standard_artifacts.TunerResults),
        )
        super().__init__(spec=spec)


class Trainer(base_component.BaseComponent):
    """TFX's Trainer (a ``run_fn`` by dotted path) that also receives the statistics."""

    SPEC_CLASS = TrainerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(TrainerExecutor)

    def __init__(
        self,
        examples: channel_types.BaseChannel,
        schema: channel_types.BaseChannel,
        statistics: channel_types.BaseChannel,
        run_fn: str,
        hyperparameters: channel_types.BaseChannel | None = None,
        train_args: trainer_pb2.TrainArgs | None = None,
        eval_args: trainer_pb2.EvalArgs | None = None,
        custom_config: dict[str, Any] | None = None,
    ):
        spec = TrainerSpec(
            examples=examples,
            schema=schema,
            statistics=statistics,
            hyperparameters=hyperparameters,
            run_fn=run_fn,
            train_args=train_args or trainer_pb2.TrainArgs(),
            eval_args=eval_args or trainer_pb2.EvalArgs(),
            custom_config=json_utils.dumps(custom_config),
            model=channel_types.Channel(type=standard_artifacts.Model),
            model_run=channel_types.Channel(type=standard_artifacts.ModelRun),
        )
        super().__init__(spec=spec)
