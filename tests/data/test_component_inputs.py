"""The Tuner's and Trainer's shared arguments (tfx_accum.components.data.component_inputs):
one list of keyword arguments, checked once, for both components."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tfx")

from tfx.proto import trainer_pb2  # noqa: E402
from tfx.types import channel as channel_types  # noqa: E402
from tfx.types import standard_artifacts  # noqa: E402

from tfx_accum.components.search.tuner_component import Tuner  # noqa: E402
from tfx_accum.components.training.trainer_component import Trainer  # noqa: E402

INPUTS = {
    "examples": channel_types.Channel(type=standard_artifacts.Examples),
    "schema": channel_types.Channel(type=standard_artifacts.Schema),
    "statistics": channel_types.Channel(type=standard_artifacts.ExampleStatistics),
}


@pytest.mark.parametrize(
    "component, function",
    [(Tuner, {"tuner_fn": "m.tuner_fn"}), (Trainer, {"run_fn": "m.run_fn"})],
)
def test_an_argument_neither_component_takes_is_named(component, function):
    with pytest.raises(TypeError, match=r"\['train_argz'\]"):
        component(**INPUTS, **function, train_argz=trainer_pb2.TrainArgs(num_steps=3))


def test_both_components_read_the_same_options():
    anomalies = channel_types.Channel(type=standard_artifacts.ExampleAnomalies)
    options = {
        "train_args": trainer_pb2.TrainArgs(num_steps=3),
        "custom_config": {"a": 1},
        "anomalies": anomalies,
        "fail_on_anomalies": True,
    }
    tuner = Tuner(**INPUTS, tuner_fn="m.tuner_fn", run_parameters={"max_trials": 4}, **options)
    trainer = Trainer(**INPUTS, run_fn="m.run_fn", run_parameters={"train_steps": 7}, **options)
    for component in (tuner, trainer):
        properties = component.exec_properties
        assert json.loads(properties["train_args"]) == {"num_steps": 3}
        assert json.loads(properties["eval_args"]) == {}
        assert json.loads(properties["custom_config"]) == {"a": 1}
        assert properties["fail_on_anomalies"] == 1
        assert component.inputs["anomalies"] is anomalies
    assert tuner.exec_properties["max_trials"] == 4
    assert trainer.exec_properties["train_steps"] == 7
    # Without the anomalies channel the gate is off, whatever fail_on_anomalies says.
    plain = Trainer(**INPUTS, run_fn="m.run_fn", fail_on_anomalies=True)
    assert plain.exec_properties.get("fail_on_anomalies") is None
