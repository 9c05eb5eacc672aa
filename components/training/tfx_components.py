"""TFX's Tuner and Trainer, with StatisticsGen's statistics as an input and run-time
parameters as execution properties.

The stock components take the examples and the schema, not the statistics, although
StatisticsGen has computed over the whole training split exactly what the model needs
(means, variances, presence, the values of text features). These two components are TFX's
own, extended the way TFX components are: a component spec with one more input channel
(``statistics``, an ``ExampleStatistics`` artifact) and optional integer execution
properties (:data:`TUNER_PARAMETERS`, :data:`TRAINER_PARAMETERS`), and an executor that
hands the statistics' location to the module through ``custom_config["statistics"]``
(tfx_accum.components.data.datasets) and writes a run's parameter values where TFX and the module
read them (:func:`tuner_properties`, :func:`trainer_properties`), then runs TFX's executor
unchanged. ``tuner_fn``, ``run_fn`` and every other argument are TFX's.

Why execution properties: TFX 1.16's Kubeflow compiler makes a ``RuntimeParameter`` a
pipeline parameter only when it is a component's *whole* execution property; one inside
``custom_config`` or a ``TrainArgs`` proto is never substituted (tfx_accum.pipeline.run_parameters).

**Several machines.** The Trainer's executor runs in every worker of a multi-worker
training job (``TF_CONFIG``; tfx_accum.components.accumulation.multi_worker); TFX's check that
``run_fn`` wrote the model applies to the chief, which alone writes it. The Vertex AI Training
form of this Trainer is in tfx_accum.components.training.vertex_trainer (kept apart: its TFX
extension imports Google Cloud's AI Platform client, seconds of start-up that a local run or an
ordinary Trainer pod must not pay).

Example (what tfx_accum.pipeline.pipeline does):

```python
tuner = Tuner(examples=..., schema=..., statistics=statistics_gen.outputs["statistics"],
              tuner_fn="tfx_accum.components.search.tuner.tuner_fn", custom_config={...})
```
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
from typing import Any

from tfx.components.trainer import executor as trainer_executor
from tfx.components.tuner import executor as tuner_executor
from tfx.components.util import udf_utils
from tfx.dsl.components.base import base_component, executor_spec
from tfx.proto import trainer_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types import channel as channel_types
from tfx.types.component_spec import ChannelParameter, ExecutionParameter
from tfx.utils import json_utils

from tfx_accum.components.accumulation.multi_worker import Cluster
from tfx_accum.components.data.anomalies import ANOMALIES, FAIL_ON_ANOMALIES, check_before_training
from tfx_accum.components.data.datasets import STATISTICS_KEY
from tfx_accum.components.settings import validate_positive_int

STATISTICS = "statistics"  # the input channel's name
MAX_TRIALS, TUNING_EPOCHS, TRAIN_STEPS = "max_trials", "tuning_epochs", "train_steps"
TUNER_PARAMETERS = {MAX_TRIALS: int, TUNING_EPOCHS: int}  # into the search space
TRAINER_PARAMETERS = {TRAIN_STEPS: int}  # into TrainArgs.num_steps


def with_statistics(input_dict: dict, exec_properties: dict[str, Any]) -> dict[str, Any]:
    """``exec_properties`` whose ``custom_config`` names the statistics artifact's URI."""
    key = standard_component_specs.CUSTOM_CONFIG_KEY
    config = json_utils.loads(exec_properties.get(key) or "null") or {}
    config[STATISTICS_KEY] = artifact_utils.get_single_uri(input_dict[STATISTICS])
    return {**exec_properties, key: json_utils.dumps(config)}


def _check_int(name: str, value: Any) -> int:
    try:
        return validate_positive_int(name, value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"run-time parameter {error}") from None


def tuner_properties(exec_properties: dict[str, Any]) -> dict[str, Any]:
    """``exec_properties`` with a run's max_trials and tuning_epochs in the search space."""
    key = standard_component_specs.CUSTOM_CONFIG_KEY
    config = json_utils.loads(exec_properties.get(key) or "null") or {}
    space = config.setdefault("search_space", {})
    for name in TUNER_PARAMETERS:
        if exec_properties.get(name) is not None:
            space[name] = _check_int(name, exec_properties[name])
    return {**exec_properties, key: json_utils.dumps(config)}


def trainer_properties(exec_properties: dict[str, Any]) -> dict[str, Any]:
    """``exec_properties`` with a run's train_steps in ``TrainArgs.num_steps``."""
    if exec_properties.get(TRAIN_STEPS) is None:
        return exec_properties
    key = standard_component_specs.TRAIN_ARGS_KEY
    train_args = json_utils.loads(exec_properties.get(key) or "{}") or {}
    train_args["num_steps"] = _check_int(TRAIN_STEPS, exec_properties[TRAIN_STEPS])
    return {**exec_properties, key: json_utils.dumps(train_args)}


class TunerExecutor(tuner_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        check_before_training(input_dict, exec_properties, "Tuner")
        properties = tuner_properties(with_statistics(input_dict, exec_properties))
        return super().Do(input_dict, output_dict, properties)


class TrainerExecutor(trainer_executor.GenericExecutor):
    """TFX's Trainer executor, with the statistics and a run's parameters; in a
    multi-worker job, a non-chief worker trains with the others and exports to a
    temporary location (``run_fn``), so TFX's check for the exported model is the chief's."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        check_before_training(input_dict, exec_properties, "Trainer")
        properties = trainer_properties(with_statistics(input_dict, exec_properties))
        if Cluster.from_env().is_chief:
            return super().Do(input_dict, output_dict, properties)
        self._log_startup(input_dict, output_dict, properties)
        fn_args = self._GetFnArgs(input_dict, output_dict, properties)
        udf_utils.get_fn(properties, "run_fn")(fn_args)
        return None


_STATISTICS_INPUT = {
    STATISTICS: ChannelParameter(type=standard_artifacts.ExampleStatistics),
    # ExampleValidator's output, for the gate of --fail-on-anomalies
    # (tfx_accum.components.data.anomalies)
    ANOMALIES: ChannelParameter(type=standard_artifacts.ExampleAnomalies, optional=True),
}
_ANOMALIES_GATE = {FAIL_ON_ANOMALIES: ExecutionParameter(type=int, optional=True)}


def optional_parameters(parameters: dict[str, type]) -> dict[str, ExecutionParameter]:
    """Execution properties a run may set (None: TFX's own setting, as compiled)."""
    return {
        name: ExecutionParameter(type=ptype, optional=True) for name, ptype in parameters.items()
    }


class TunerSpec(standard_component_specs.TunerSpec):
    INPUTS = {**standard_component_specs.TunerSpec.INPUTS, **_STATISTICS_INPUT}
    PARAMETERS = {
        **standard_component_specs.TunerSpec.PARAMETERS,
        **optional_parameters(TUNER_PARAMETERS),
        **_ANOMALIES_GATE,
    }


class TrainerSpec(standard_component_specs.TrainerSpec):
    INPUTS = {**standard_component_specs.TrainerSpec.INPUTS, **_STATISTICS_INPUT}
    PARAMETERS = {
        **standard_component_specs.TrainerSpec.PARAMETERS,
        **optional_parameters(TRAINER_PARAMETERS),
        **_ANOMALIES_GATE,
    }


class Tuner(base_component.BaseComponent):
    """TFX's Tuner (a ``tuner_fn`` by dotted path) that also receives the statistics;
    ``run_parameters``: values (or ``RuntimeParameter`` s) of :data:`TUNER_PARAMETERS`;
    ``anomalies`` with ``fail_on_anomalies``: it does not start on data with anomalies."""

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
        run_parameters: dict[str, Any] | None = None,
        anomalies: channel_types.BaseChannel | None = None,
        fail_on_anomalies: bool = False,
    ):
        spec = TunerSpec(
            **_only(run_parameters, TUNER_PARAMETERS),
            examples=examples,
            schema=schema,
            statistics=statistics,
            anomalies=anomalies,
            fail_on_anomalies=int(fail_on_anomalies) if anomalies is not None else None,
            tuner_fn=tuner_fn,
            train_args=train_args or trainer_pb2.TrainArgs(),
            eval_args=eval_args or trainer_pb2.EvalArgs(),
            custom_config=json_utils.dumps(custom_config),
            best_hyperparameters=channel_types.Channel(type=standard_artifacts.HyperParameters),
            tuner_results=channel_types.Channel(type=standard_artifacts.TunerResults),
        )
        super().__init__(spec=spec)


class Trainer(base_component.BaseComponent):
    """TFX's Trainer (a ``run_fn`` by dotted path) that also receives the statistics;
    ``run_parameters``: values (or ``RuntimeParameter`` s) of :data:`TRAINER_PARAMETERS`;
    ``anomalies`` with ``fail_on_anomalies``: it does not start on data with anomalies."""

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
        run_parameters: dict[str, Any] | None = None,
        anomalies: channel_types.BaseChannel | None = None,
        fail_on_anomalies: bool = False,
    ):
        spec = TrainerSpec(
            **_only(run_parameters, TRAINER_PARAMETERS),
            examples=examples,
            schema=schema,
            statistics=statistics,
            anomalies=anomalies,
            fail_on_anomalies=int(fail_on_anomalies) if anomalies is not None else None,
            hyperparameters=hyperparameters,
            run_fn=run_fn,
            train_args=train_args or trainer_pb2.TrainArgs(),
            eval_args=eval_args or trainer_pb2.EvalArgs(),
            custom_config=json_utils.dumps(custom_config),
            model=channel_types.Channel(type=standard_artifacts.Model),
            model_run=channel_types.Channel(type=standard_artifacts.ModelRun),
        )
        super().__init__(spec=spec)


def _only(values: dict[str, Any] | None, parameters: dict[str, type]) -> dict[str, Any]:
    """``values`` of ``parameters`` that are set (a name the component lacks: TypeError)."""
    values = dict(values or {})
    unknown = sorted(set(values) - set(parameters))
    if unknown:
        raise TypeError(
            f"unknown run parameters {unknown}; this component takes {sorted(parameters)}"
        )
    return {name: value for name, value in values.items() if value is not None}
