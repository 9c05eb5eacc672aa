"""The search space (components/search_space.py): validation, custom_config, the limit."""

from __future__ import annotations

import pytest

from tfx_accum.components.search_space import SearchSpace


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(accumulation_steps_choices=(0, 2)), "accumulation_steps_choices.*positive"),
        (dict(micro_batch_choices=()), "micro_batch_choices.*non-empty"),
        (dict(micro_batch_choices=(8, -1)), "micro_batch_choices"),
        (dict(learning_rate_min=0.1, learning_rate_max=0.01), "range is empty"),
        (dict(learning_rate_min=0.0), "learning_rate_min.*positive"),
        (dict(algorithm="grid"), "algorithm.*bayesian"),
        (dict(max_trials=0), "max_trials"),
        (
            dict(max_effective_batch=4, accumulation_steps_choices=(2,), micro_batch_choices=(8,)),
            "No combination fits",
        ),
    ],
)
def test_search_space_rejects_nonsense(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SearchSpace(**kwargs)


def test_search_space_round_trips_through_custom_config():
    space = SearchSpace(
        accumulation_steps_choices=(4, 1, 2), micro_batch_choices=(16,), max_trials=3
    )
    assert space.accumulation_steps_choices == (1, 2, 4)
    assert SearchSpace.from_config(space.to_config()) == space
    with pytest.raises(ValueError, match="Unknown search-space settings"):
        SearchSpace.from_config({"batch": 3})


def test_nearest_fitting_combination_keeps_the_micro_batch_and_learning_rate():
    space = SearchSpace(
        accumulation_steps_choices=(1, 2, 4, 8),
        micro_batch_choices=(8, 16, 64),
        max_effective_batch=32,
    )
    values = {"accumulation_steps": 8, "micro_batch_size": 16, "learning_rate": 0.01}
    assert space.within_limit(values) == {**values, "accumulation_steps": 2}
    big_m = {"accumulation_steps": 1, "micro_batch_size": 64, "learning_rate": 0.01}
    assert space.within_limit(big_m) == {
        "accumulation_steps": 2,
        "micro_batch_size": 16,
        "learning_rate": 0.01,
    }
