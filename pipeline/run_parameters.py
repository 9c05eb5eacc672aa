"""Run-time parameters: settings a compiled pipeline takes per run, without a recompile.

A Kubeflow (KFP ``parameterValues``) or Vertex AI (``parameter_values``) run may set
:data:`NAMES`; the compile-time values are the defaults. TFX's way is
``tfx.dsl.experimental.RuntimeParameter``, and what ``KubeflowV2DagRunner`` (TFX 1.16)
compiles is a ``RuntimeParameter`` that is a component's *whole* execution property
(``step_builder.py``: it becomes a task input ``componentInputParameter``). One inside
``custom_config``, ``TrainArgs`` or ``EvalConfig`` is not: a dict is JSON-dumped into a
constant (the parameter object itself, never substituted) and a proto field cannot hold one;
TFX's documented way for a proto is a string parameter holding the whole proto's JSON
(``'{"num_steps": 5}'``), which is no way to ask for "20 trials".

So the data root is ExampleGen's ``input_base``, and the Tuner, Trainer and Evaluator are
TFX's, each with extra integer or float execution properties (:data:`TUNER`,
:data:`TRAINER`, :data:`EVALUATOR`) that its executor writes into the setting's one place
before TFX's own executor runs: ``max_trials`` and ``tuning_epochs`` into the search space
in ``custom_config``, ``train_steps`` into ``TrainArgs.num_steps``
(tfx_accum.components.search.tuner_component, tfx_accum.components.training.trainer_component), the
blessing threshold into the ``EvalConfig``
(:func:`~tfx_accum.pipeline.evaluation.with_bless_threshold`; a negative value,
:data:`NO_THRESHOLD`, is no fixed bar: the model need only beat the trivial baseline).
Locally (``tfx-accum run``) the same components take plain values.

Example::

    params = RunParameters.of(data_root="/data", max_trials=8, tuning_epochs=4,
                              train_steps=300, bless_threshold=-1.0).runtime()  # a compile
    tuner = Tuner(examples=..., schema=..., statistics=..., tuner_fn=..., custom_config=...,
                  run_parameters=params.for_component(TUNER))
"""

from __future__ import annotations

import dataclasses
from typing import Any

from google.protobuf import json_format
from tfx.components import Evaluator as TfxEvaluator  # not tfx.v1: see tfx_accum.pipeline.pipeline
from tfx.components.evaluator import executor as evaluator_executor
from tfx.dsl.components.base import base_component, executor_spec
from tfx.orchestration import data_types
from tfx.orchestration.pipeline import Pipeline
from tfx.types import standard_component_specs

from tfx_accum.components.data.component_inputs import optional_parameters
from tfx_accum.components.search.tuner_component import (  # noqa: F401 - re-exported
    MAX_TRIALS,
    TUNER_PARAMETERS,
    TUNING_EPOCHS,
    tuner_properties,
)
from tfx_accum.components.training.trainer_component import (  # noqa: F401 - re-exported
    TRAIN_STEPS,
    TRAINER_PARAMETERS,
    trainer_properties,
)

DATA_ROOT = "data_root"
THRESHOLD = "bless_threshold"
NO_THRESHOLD = -1.0  # bless_threshold < 0: no fixed bar, only the trivial baseline to beat
TYPES = {DATA_ROOT: str, MAX_TRIALS: int, TUNING_EPOCHS: int, TRAIN_STEPS: int, THRESHOLD: float}
NAMES = tuple(TYPES)
# The execution properties each component adds to TFX's, with their types.
TUNER = TUNER_PARAMETERS
TRAINER = TRAINER_PARAMETERS
EVALUATOR = {THRESHOLD: float}
BLESS_METRIC = "bless_metric"  # the Evaluator's (static) property: what the threshold bounds


@dataclasses.dataclass(frozen=True)
class RunParameters:
    """The run-time settings: plain values (a local run) or ``RuntimeParameter`` s."""

    values: dict[str, Any]  # name (of NAMES) -> value or RuntimeParameter

    @classmethod
    def of(cls, **values: Any) -> RunParameters:
        """Plain values, one for each of :data:`NAMES` (a ``TypeError`` names a missing one)."""
        if set(values) != set(NAMES):
            raise TypeError(f"run parameters {sorted(NAMES)} expected, got {sorted(values)}")
        return cls({name: TYPES[name](value) for name, value in values.items()})

    def runtime(self) -> RunParameters:
        """Each value as a ``RuntimeParameter`` of the same name, defaulting to the value."""
        return RunParameters(
            {
                name: data_types.RuntimeParameter(name=name, ptype=TYPES[name], default=value)
                for name, value in self.values.items()
            }
        )

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def for_component(self, parameters: dict[str, type]) -> dict[str, Any]:
        """The values of ``parameters`` (one of TUNER, TRAINER, EVALUATOR), by name."""
        return {name: self.values[name] for name in parameters}


def defaults(pipeline: Pipeline) -> dict[str, Any]:
    """The run-time parameters the pipeline's components take, with their defaults."""
    found = {}
    for component in pipeline.components:
        for value in component.exec_properties.values():
            if isinstance(value, data_types.RuntimeParameter):
                found[value.name] = value.default
    return found


# --- Evaluator: the blessing threshold into the EvalConfig ---


def evaluator_properties(exec_properties: dict[str, Any]) -> dict[str, Any]:
    """``exec_properties`` with the run's blessing threshold on the bless metric."""
    threshold = exec_properties.get(THRESHOLD)
    if threshold is None or threshold < 0:  # none given: the compiled gates as they are
        return exec_properties
    import tensorflow_model_analysis as tfma

    from tfx_accum.pipeline.evaluation import with_bless_threshold

    config = json_format.Parse(exec_properties["eval_config"], tfma.EvalConfig())
    try:
        with_bless_threshold(config, exec_properties[BLESS_METRIC], threshold)
    except ValueError as error:
        raise ValueError(f"run-time parameter {THRESHOLD}: {error}") from None
    return {**exec_properties, "eval_config": json_format.MessageToJson(config, sort_keys=True)}


class EvaluatorExecutor(evaluator_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        super().Do(input_dict, output_dict, evaluator_properties(exec_properties))


class EvaluatorSpec(standard_component_specs.EvaluatorSpec):
    PARAMETERS = {
        **standard_component_specs.EvaluatorSpec.PARAMETERS,
        **optional_parameters({**EVALUATOR, BLESS_METRIC: str}),
    }


class _ExtendedSpec(base_component.BaseComponent):
    """Mixed in between TFX's Evaluator and ``BaseComponent``: its spec gains properties.

    TFX's ``Evaluator.__init__`` builds its own spec and hands it to
    ``BaseComponent.__init__``. Placed after it in the MRO, this class receives that spec
    and rebuilds it as the component's ``SPEC_CLASS`` (TFX's, plus the extra properties), so
    TFX's own argument handling stays as it is.
    """

    def __init__(self, spec, custom_executor_spec=None):
        extended = type(self).SPEC_CLASS(
            **spec.inputs, **spec.outputs, **spec.exec_properties, **self._extra
        )
        super().__init__(extended, custom_executor_spec)  # BaseComponent's


class Evaluator(TfxEvaluator, _ExtendedSpec):
    """TFX's Evaluator with the blessing threshold (a run-time parameter) and the bless
    metric it bounds as execution properties."""

    SPEC_CLASS = EvaluatorSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(EvaluatorExecutor)  # a Beam component

    def __init__(self, *, run_parameters: dict[str, Any], bless_metric: str, **kwargs):
        unknown = sorted(set(run_parameters) - set(EVALUATOR))
        if unknown:
            raise TypeError(f"unknown run parameters {unknown}; the Evaluator takes {EVALUATOR}")
        self._extra = {**run_parameters, BLESS_METRIC: bless_metric}
        super().__init__(**kwargs)
