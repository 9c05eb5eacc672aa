"""The data room's inputs to tfx-accum's Tuner and Trainer components, shared by both.

TFX's stock Tuner and Trainer take the examples and the schema, not the statistics, although
StatisticsGen has computed over the whole training split exactly what the model needs. Both
components (``search.tuner_component``, ``training.trainer_component``) add the same input
channels (``statistics``, an ``ExampleStatistics`` artifact; ``anomalies`` with
``fail_on_anomalies``, ExampleValidator's gate) and optional integer run-time parameters as
execution properties; their executors hand the statistics' location to the module through
:class:`~tfx_accum.components.config.custom_config.ModuleConfig` (:func:`with_statistics`).
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
import dataclasses
from typing import Any, TypedDict

from tfx.proto import trainer_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types import channel as channel_types
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter
from tfx.utils import json_utils

from tfx_accum.components.accumulation.arguments import validate_positive_int
from tfx_accum.components.config.custom_config import ModuleConfig
from tfx_accum.components.data.anomalies import ANOMALIES, FAIL_ON_ANOMALIES

STATISTICS = "statistics"  # the input channel's name

STATISTICS_INPUT = {
    STATISTICS: ChannelParameter(type=standard_artifacts.ExampleStatistics),
    # ExampleValidator's output, for the gate of --fail-on-anomalies (data/anomalies.py)
    ANOMALIES: ChannelParameter(type=standard_artifacts.ExampleAnomalies, optional=True),
}
ANOMALIES_GATE = {FAIL_ON_ANOMALIES: ExecutionParameter(type=int, optional=True)}


def module_config(exec_properties: dict[str, Any]) -> ModuleConfig:
    """The module's ``custom_config`` among ``exec_properties``, typed and checked."""
    key = standard_component_specs.CUSTOM_CONFIG_KEY
    return ModuleConfig.from_custom_config(json_utils.loads(exec_properties.get(key) or "null"))


def with_config(exec_properties: dict[str, Any], config: ModuleConfig) -> dict[str, Any]:
    """``exec_properties`` with ``config`` as the module's ``custom_config``."""
    key = standard_component_specs.CUSTOM_CONFIG_KEY
    return {**exec_properties, key: json_utils.dumps(config.to_custom_config())}


def with_statistics(input_dict: dict, exec_properties: dict[str, Any]) -> dict[str, Any]:
    """``exec_properties`` whose ``custom_config`` names the statistics artifact's URI."""
    uri = artifact_utils.get_single_uri(input_dict[STATISTICS])
    config = dataclasses.replace(module_config(exec_properties), statistics=uri)
    return with_config(exec_properties, config)


def check_run_parameter(name: str, value: Any) -> int:
    """A run-time parameter's value, an int >= 1; else one line naming it."""
    try:
        return validate_positive_int(name, value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"run-time parameter {error}") from None


def optional_parameters(parameters: dict[str, type]) -> dict[str, ExecutionParameter]:
    """Execution properties a run may set (None: TFX's own setting, as compiled)."""
    return {
        name: ExecutionParameter(type=ptype, optional=True) for name, ptype in parameters.items()
    }


def spec_inputs(stock: type[ComponentSpec]) -> dict[str, ChannelParameter]:
    """The stock component spec's input channels, with the statistics and the anomalies."""
    return {**stock.INPUTS, **STATISTICS_INPUT}


def spec_parameters(
    stock: type[ComponentSpec], parameters: dict[str, type]
) -> dict[str, ExecutionParameter]:
    """The stock component spec's execution properties, with a run's ``parameters`` and the
    anomalies gate."""
    return {**stock.PARAMETERS, **optional_parameters(parameters), **ANOMALIES_GATE}


class ModuleOptions(TypedDict, total=False):
    """The Tuner's and Trainer's keyword arguments beyond their inputs and module function:
    TFX's ``train_args``, ``eval_args`` and ``custom_config``; ``run_parameters``, values (or
    ``RuntimeParameter`` s) of the component's run-time parameters; ``anomalies`` with
    ``fail_on_anomalies``: the component does not start on data with anomalies."""

    train_args: trainer_pb2.TrainArgs | None
    eval_args: trainer_pb2.EvalArgs | None
    custom_config: dict[str, Any] | None
    run_parameters: dict[str, Any] | None
    anomalies: channel_types.BaseChannel | None
    fail_on_anomalies: bool


def spec_arguments(
    parameters: dict[str, type],
    examples: channel_types.BaseChannel,
    schema: channel_types.BaseChannel,
    statistics: channel_types.BaseChannel,
    options: ModuleOptions,
) -> dict[str, Any]:
    """The component spec's arguments the Tuner and the Trainer share: the run's
    ``parameters`` that are set, the inputs, TFX's args and the ``custom_config``; an
    argument neither takes is a ``TypeError`` naming it."""
    unknown = sorted(set(options) - set(ModuleOptions.__annotations__))
    if unknown:
        raise TypeError(
            f"unexpected keyword arguments {unknown}; beside their inputs and module function "
            f"the Tuner and Trainer take {sorted(ModuleOptions.__annotations__)}"
        )
    anomalies = options.get("anomalies")
    return dict(
        **_only(options.get("run_parameters"), parameters),
        examples=examples,
        schema=schema,
        statistics=statistics,
        anomalies=anomalies,
        fail_on_anomalies=(
            int(options.get("fail_on_anomalies", False)) if anomalies is not None else None
        ),
        train_args=options.get("train_args") or trainer_pb2.TrainArgs(),
        eval_args=options.get("eval_args") or trainer_pb2.EvalArgs(),
        custom_config=json_utils.dumps(options.get("custom_config")),
    )


def _only(values: dict[str, Any] | None, parameters: dict[str, type]) -> dict[str, Any]:
    """``values`` of ``parameters`` that are set (a name the component lacks: TypeError)."""
    values = dict(values or {})
    unknown = sorted(set(values) - set(parameters))
    if unknown:
        raise TypeError(
            f"unknown run parameters {unknown}; this component takes {sorted(parameters)}"
        )
    return {name: value for name, value in values.items() if value is not None}
