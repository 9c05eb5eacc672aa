"""Strategy choice and the batch arithmetic across replicas
(tfx_accum.components.accumulation.strategy)."""

from __future__ import annotations

import pytest
import tensorflow as tf

from tfx_accum.components.accumulation.strategy import choose_strategy, replica_plan, strategy_kind


@pytest.mark.parametrize(
    "gpus,tpu,kind",
    [
        (0, False, "default"),
        (1, False, "default"),
        (2, False, "mirrored"),
        (8, False, "mirrored"),
        (0, True, "tpu"),
        (4, True, "tpu"),
    ],
)
def test_strategy_kind_follows_devices(gpus, tpu, kind):
    assert strategy_kind(gpus, tpu) == kind


@pytest.mark.parametrize(
    "steps,micro,replicas,per_replica_steps,global_batch",
    [
        (4, 32, 1, 4, 128),
        (4, 32, 2, 2, 128),
        (4, 32, 4, 1, 128),
        (8, 16, 8, 1, 128),
        (4, 32, 3, 2, 192),
        (1, 64, 4, 1, 256),
    ],
)
def test_replica_plan_arithmetic(steps, micro, replicas, per_replica_steps, global_batch):
    plan = replica_plan(steps, micro, replicas)
    assert plan.steps_per_replica == per_replica_steps
    assert plan.per_replica_batch == per_replica_steps * micro
    assert plan.global_batch == global_batch
    with pytest.raises(ValueError, match="replicas"):
        replica_plan(steps, micro, 0)


def test_choose_strategy_on_this_cpu_machine_is_the_default_one():
    strategy = choose_strategy()
    assert strategy.num_replicas_in_sync == 1
    assert not isinstance(strategy, tf.distribute.MirroredStrategy | tf.distribute.TPUStrategy)
