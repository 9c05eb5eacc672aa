"""The search room's TFX component: TFX's Tuner, with StatisticsGen's statistics as an input
and a run's ``max_trials`` and ``tuning_epochs`` as execution properties.

TFX's own Tuner, extended the way TFX components are: a component spec with the inputs of
``data.component_inputs`` and optional integer execution properties
(:data:`TUNER_PARAMETERS`), and an executor that hands the statistics' location to the module
and writes a run's parameter values into its search space (:func:`tuner_properties`), then
runs TFX's executor unchanged. ``tuner_fn`` and every other argument are TFX's.

Execution properties, not ``custom_config``, carry a run's values because TFX's Kubeflow
compiler substitutes only those (tfx_accum.pipeline.run_parameters). Used as
TFX's (docs/tfx.md), with one more input: ``statistics=statistics_gen.outputs["statistics"]``.
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
import dataclasses
from typing import TYPE_CHECKING, Any

from tfx.components.tuner import executor as tuner_executor
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import channel as channel_types
from tfx.types import standard_artifacts, standard_component_specs

from tfx_accum.components.data.anomalies import check_before_training
from tfx_accum.components.data.component_inputs import (
    ModuleOptions,
    check_run_parameter,
    module_config,
    spec_arguments,
    spec_inputs,
    spec_parameters,
    with_config,
    with_statistics,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

MAX_TRIALS, TUNING_EPOCHS = "max_trials", "tuning_epochs"
TUNER_PARAMETERS = {MAX_TRIALS: int, TUNING_EPOCHS: int}  # into the search space


def tuner_properties(exec_properties: dict[str, Any]) -> dict[str, Any]:
    """``exec_properties`` with a run's max_trials and tuning_epochs in the search space."""
    values = {
        name: check_run_parameter(name, exec_properties[name])
        for name in TUNER_PARAMETERS
        if exec_properties.get(name) is not None
    }
    if not values:
        return exec_properties
    config = module_config(exec_properties)
    space = dataclasses.replace(config.space, **values)
    return with_config(exec_properties, dataclasses.replace(config, search_space=space))


class TunerExecutor(tuner_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        check_before_training(input_dict, exec_properties, "Tuner")
        properties = tuner_properties(with_statistics(input_dict, exec_properties))
        return super().Do(input_dict, output_dict, properties)


class TunerSpec(standard_component_specs.TunerSpec):
    INPUTS = spec_inputs(standard_component_specs.TunerSpec)
    PARAMETERS = spec_parameters(standard_component_specs.TunerSpec, TUNER_PARAMETERS)


class Tuner(base_component.BaseComponent):
    """TFX's Tuner (a ``tuner_fn`` by dotted path) that also receives the statistics;
    ``options``: TFX's ``train_args``, ``eval_args``, ``custom_config``, and
    ``run_parameters`` (of :data:`TUNER_PARAMETERS`), ``anomalies``, ``fail_on_anomalies``
    (:class:`~tfx_accum.components.data.component_inputs.ModuleOptions`)."""

    SPEC_CLASS = TunerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(TunerExecutor)

    def __init__(
        self,
        examples: channel_types.BaseChannel,
        schema: channel_types.BaseChannel,
        statistics: channel_types.BaseChannel,
        tuner_fn: str,
        **options: Unpack[ModuleOptions],
    ):
        spec = TunerSpec(
            **spec_arguments(TUNER_PARAMETERS, examples, schema, statistics, options),
            tuner_fn=tuner_fn,
            best_hyperparameters=channel_types.Channel(type=standard_artifacts.HyperParameters),
            tuner_results=channel_types.Channel(type=standard_artifacts.TunerResults),
        )
        super().__init__(spec=spec)
