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

So the data root is ExampleGen's ``input_base``, and the Tuner, Trainer and Evaluator here
are TFX's, each with extra integer or float execution properties (:data:`TUNER`,
:data:`TRAINER`, :data:`EVALUATOR`) that its executor writes into the setting's one place
before TFX's own executor runs: ``max_trials`` and ``tuning_epochs`` into the search space
in ``custom_config``, ``train_steps`` into ``TrainArgs.num_steps``, the blessing threshold
into the ``EvalConfig`` (:mod:`tfx_accum.pipeline.blessing`). Locally (``tfx-accum run``)
the same components take plain values.

Example::

    params = RunParameters("/data", max_trials=8, tuning_epochs=4, train_steps=300,
                           accuracy_threshold=0.95).runtime()  # for a compile
    tuner = Tuner(examples=..., schema=..., tuner_fn=..., custom_config=...,
                  run_parameters=params.for_component(TUNER))
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from google.protobuf import json_format
from tfx import v1 as tfx
from tfx.components.evaluator import executor as evaluator_executor
from tfx.components.trainer import executor as trainer_executor
from tfx.components.tuner import executor as tuner_executor
from tfx.dsl.components.base import base_component, executor_spec
from tfx.orchestration import data_types
from tfx.types import standard_component_specs
from tfx.types.component_spec import ExecutionParameter

from tfx_accum.components.settings import validate_positive_int
from tfx_accum.pipeline import blessing

DATA_ROOT = "data_root"
MAX_TRIALS = "max_trials"
TUNING_EPOCHS = "tuning_epochs"
TRAIN_STEPS = "train_steps"
THRESHOLD = blessing.THRESHOLD_PARAMETER
TYPES = {DATA_ROOT: str, MAX_TRIALS: int, TUNING_EPOCHS: int, TRAIN_STEPS: int, THRESHOLD: float}
NAMES = tuple(TYPES)
# The execution properties each component adds to TFX's, with their types.
TUNER = {name: TYPES[name] for name in (MAX_TRIALS, TUNING_EPOCHS)}
TRAINER = {name: TYPES[name] for name in (TRAIN_STEPS, TUNING_EPOCHS)}
EVALUATOR = {THRESHOLD: TYPES[THRESHOLD]}


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


def defaults(pipeline: tfx.dsl.Pipeline) -> dict[str, Any]:
    """The run-time parameters the pipeline's components take, with their defaults."""
    found = {}
    for component in pipeline.components:
        for value in component.exec_properties.values():
            if isinstance(value, data_types.RuntimeParameter):
                found[value.name] = value.default
    return found


def _check_int(name: str, value: Any) -> int:
    try:
        return validate_positive_int(name, value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"run-time parameter {error}") from None


class _RunParametersSpec(base_component.BaseComponent):
    """Mixed in between a TFX component and ``BaseComponent``: its spec gains parameters.

    TFX's ``Tuner.__init__`` (and ``Trainer``'s, ``Evaluator``'s) builds its own spec class
    and hands it to ``BaseComponent.__init__``. Placed after the TFX component in the MRO,
    this class receives that spec and rebuilds it as the component's ``SPEC_CLASS`` (TFX's
    spec plus the run-time parameters), so TFX's own argument handling stays as it is.
    """

    RUN_PARAMETERS: dict[str, type]  # the run-time parameters the component adds

    def __init__(self, spec, custom_executor_spec=None):
        extended = type(self).SPEC_CLASS(
            **spec.inputs, **spec.outputs, **spec.exec_properties, **self._run_parameters
        )
        super().__init__(extended, custom_executor_spec)  # BaseComponent's

    def _take(self, run_parameters: dict[str, Any]) -> None:
        if set(run_parameters) != set(self.RUN_PARAMETERS):
            raise TypeError(
                f"{type(self).__name__} takes the run parameters {sorted(self.RUN_PARAMETERS)}, "
                f"got {sorted(run_parameters)}"
            )
        self._run_parameters = dict(run_parameters)


def _spec_class(base: type, parameters: dict[str, type]) -> type:
    return type(
        base.__name__,
        (base,),
        {
            "PARAMETERS": {
                **base.PARAMETERS,
                # Optional: None leaves TFX's own setting as compiled.
                **{
                    name: ExecutionParameter(type=ptype, optional=True)
                    for name, ptype in parameters.items()
                },
            },
            "__module__": __name__,
        },
    )


# --- Tuner: max_trials and tuning_epochs, into custom_config["search_space"] ---


def tuner_properties(exec_properties: dict[str, Any]) -> dict[str, Any]:
    """``exec_properties`` with the run's max_trials and tuning_epochs in the search space."""
    config = json.loads(exec_properties["custom_config"])
    space = config["search_space"]
    for name in TUNER:
        if exec_properties.get(name) is not None:
            space[name] = _check_int(name, exec_properties[name])
    return {**exec_properties, "custom_config": json.dumps(config)}


class TunerExecutor(tuner_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 (TFX's name)
        super().Do(input_dict, output_dict, tuner_properties(exec_properties))


class Tuner(tfx.components.Tuner, _RunParametersSpec):
    """TFX's Tuner with ``max_trials`` and ``tuning_epochs`` as execution properties."""

    SPEC_CLASS = _spec_class(standard_component_specs.TunerSpec, TUNER)
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(TunerExecutor)

    RUN_PARAMETERS = TUNER

    def __init__(self, *, run_parameters: dict[str, Any], **kwargs):
        self._take(run_parameters)
        super().__init__(**kwargs)


# --- Trainer: train_steps into TrainArgs, tuning_epochs into the minimum budget ---


def trainer_properties(exec_properties: dict[str, Any]) -> dict[str, Any]:
    """``exec_properties`` with the run's train_steps and tuning_epochs where TFX reads them."""
    changed = dict(exec_properties)
    if exec_properties.get(TRAIN_STEPS) is not None:
        train_args = json.loads(exec_properties.get("train_args") or "{}")
        train_args["num_steps"] = _check_int(TRAIN_STEPS, exec_properties[TRAIN_STEPS])
        changed["train_args"] = json.dumps(train_args)
    config = json.loads(exec_properties.get("custom_config") or "null") or {}
    if exec_properties.get(TUNING_EPOCHS) is not None and config.get("min_examples"):
        epochs = _check_int(TUNING_EPOCHS, exec_properties[TUNING_EPOCHS])
        config["min_examples"]["epochs"] = epochs
        changed["custom_config"] = json.dumps(config)
    return changed


class TrainerExecutor(trainer_executor.GenericExecutor):
    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802
        super().Do(input_dict, output_dict, trainer_properties(exec_properties))


class Trainer(tfx.components.Trainer, _RunParametersSpec):
    """TFX's Trainer with ``train_steps`` and ``tuning_epochs`` as execution properties."""

    SPEC_CLASS = _spec_class(standard_component_specs.TrainerSpec, TRAINER)
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(TrainerExecutor)

    RUN_PARAMETERS = TRAINER

    def __init__(self, *, run_parameters: dict[str, Any], **kwargs):
        self._take(run_parameters)
        super().__init__(**kwargs)


# --- Evaluator: the blessing threshold into the EvalConfig ---


def evaluator_properties(exec_properties: dict[str, Any]) -> dict[str, Any]:
    """``exec_properties`` with the run's blessing threshold in the eval config."""
    if exec_properties.get(THRESHOLD) is None:
        return exec_properties
    import tensorflow_model_analysis as tfma

    config = json_format.Parse(exec_properties["eval_config"], tfma.EvalConfig())
    try:
        blessing.with_threshold(config, exec_properties[THRESHOLD])
    except ValueError as error:
        raise ValueError(f"run-time parameter {error}") from None
    return {**exec_properties, "eval_config": json_format.MessageToJson(config, sort_keys=True)}


class EvaluatorExecutor(evaluator_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802
        super().Do(input_dict, output_dict, evaluator_properties(exec_properties))


class Evaluator(tfx.components.Evaluator, _RunParametersSpec):
    """TFX's Evaluator with the blessing threshold as an execution property."""

    SPEC_CLASS = _spec_class(standard_component_specs.EvaluatorSpec, EVALUATOR)
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(EvaluatorExecutor)  # a Beam component

    RUN_PARAMETERS = EVALUATOR

    def __init__(self, *, run_parameters: dict[str, Any], **kwargs):
        self._take(run_parameters)
        super().__init__(**kwargs)
