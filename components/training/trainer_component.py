"""The training room's TFX component: TFX's Trainer, with StatisticsGen's statistics as an
input and a run's ``train_steps`` as an execution property.

TFX's own Trainer, extended the way TFX components are: a component spec with the inputs of
``data.component_inputs`` and an optional integer execution property
(:data:`TRAINER_PARAMETERS`), and an executor that hands the statistics' location to the
module and writes a run's ``train_steps`` where TFX reads it (:func:`trainer_properties`),
then runs TFX's executor unchanged. ``run_fn`` and every other argument are TFX's. (The
Tuner is its sibling in the search room: ``search.tuner_component``.)

Execution properties, not ``custom_config`` or ``TrainArgs``, carry a run's values because
TFX's Kubeflow compiler substitutes only those (tfx_accum.pipeline.run_parameters).

**Several machines.** The Trainer's executor runs in every worker of a multi-worker
training job (``TF_CONFIG``; tfx_accum.components.accumulation.multi_worker); TFX's check that
``run_fn`` wrote the model applies to the chief, which alone writes it. The Vertex AI
Training form of this Trainer is in tfx_accum.components.training.vertex_trainer (kept apart: its
TFX extension imports Google Cloud's AI Platform client, seconds of start-up that a local
run or an ordinary Trainer pod must not pay).

Used as TFX's (docs/tfx.md), with one more input:
``statistics=statistics_gen.outputs["statistics"]``.
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
from typing import TYPE_CHECKING, Any

from tfx.components.trainer import executor as trainer_executor
from tfx.components.util import udf_utils
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import channel as channel_types
from tfx.types import standard_artifacts, standard_component_specs
from tfx.utils import json_utils

from tfx_accum.components.accumulation.multi_worker import Cluster
from tfx_accum.components.data.anomalies import check_before_training
from tfx_accum.components.data.component_inputs import (
    ModuleOptions,
    check_run_parameter,
    spec_arguments,
    spec_inputs,
    spec_parameters,
    with_statistics,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

TRAIN_STEPS = "train_steps"
TRAINER_PARAMETERS = {TRAIN_STEPS: int}  # into TrainArgs.num_steps


def trainer_properties(exec_properties: dict[str, Any]) -> dict[str, Any]:
    """``exec_properties`` with a run's train_steps in ``TrainArgs.num_steps``."""
    if exec_properties.get(TRAIN_STEPS) is None:
        return exec_properties
    key = standard_component_specs.TRAIN_ARGS_KEY
    train_args = json_utils.loads(exec_properties.get(key) or "{}") or {}
    train_args["num_steps"] = check_run_parameter(TRAIN_STEPS, exec_properties[TRAIN_STEPS])
    return {**exec_properties, key: json_utils.dumps(train_args)}


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


class TrainerSpec(standard_component_specs.TrainerSpec):
    INPUTS = spec_inputs(standard_component_specs.TrainerSpec)
    PARAMETERS = spec_parameters(standard_component_specs.TrainerSpec, TRAINER_PARAMETERS)


class Trainer(base_component.BaseComponent):
    """TFX's Trainer (a ``run_fn`` by dotted path) that also receives the statistics;
    ``hyperparameters``: the Tuner's best; ``options``: TFX's ``train_args``, ``eval_args``,
    ``custom_config``, and ``run_parameters`` (of :data:`TRAINER_PARAMETERS`),
    ``anomalies``, ``fail_on_anomalies``
    (:class:`~tfx_accum.components.data.component_inputs.ModuleOptions`)."""

    SPEC_CLASS = TrainerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(TrainerExecutor)

    def __init__(
        self,
        examples: channel_types.BaseChannel,
        schema: channel_types.BaseChannel,
        statistics: channel_types.BaseChannel,
        run_fn: str,
        hyperparameters: channel_types.BaseChannel | None = None,
        **options: Unpack[ModuleOptions],
    ):
        spec = TrainerSpec(
            **spec_arguments(TRAINER_PARAMETERS, examples, schema, statistics, options),
            hyperparameters=hyperparameters,
            run_fn=run_fn,
            model=channel_types.Channel(type=standard_artifacts.Model),
            model_run=channel_types.Channel(type=standard_artifacts.ModelRun),
        )
        super().__init__(spec=spec)
