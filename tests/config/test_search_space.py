"""The search space (tfx_accum.components.config.search_space): validation, custom_config, the
limit."""

from __future__ import annotations

import pytest

from tfx_accum.components.config.search_space import SearchSpace


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
        (dict(max_trial_examples=0), "max_trial_examples"),
        (dict(distinct_trials="yes"), "distinct_trials.*true or false"),
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
    with pytest.raises(ValueError, match="'batch' is not a search-space setting: the settings"):
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


def test_a_trials_budget_is_capped_on_a_large_split_unless_given():
    space = SearchSpace(tuning_epochs=4, max_trial_examples=200_000)
    small = space.trial_budget(1_000)
    assert (small.examples_per_epoch, small.epochs, small.uncapped) == (1_000, 4, None)
    assert small.describe_cap() is None
    large = space.trial_budget(2_000_000)
    assert (large.examples_per_epoch, large.epochs, large.examples) == (50_000, 4, 200_000)
    assert large.uncapped == 8_000_000 and "--trial-examples 0" in large.describe_cap()
    whole = SearchSpace(tuning_epochs=4, max_trial_examples=None).trial_budget(2_000_000)
    assert (whole.examples_per_epoch, whole.uncapped) == (2_000_000, None)
    given = SearchSpace(examples_per_epoch=300_000).trial_budget(2_000_000)
    assert (given.examples_per_epoch, given.uncapped) == (300_000, None)  # given: the budget
    # Scored on at most a quarter of the cap's examples held out, unless uncapped.
    assert space.trial_budget(2_000_000, 500_000).ranking_examples == 50_000
    assert space.trial_budget(1_000, 250).ranking_examples is None
    uncapped = SearchSpace(max_trial_examples=None).trial_budget(2_000_000, 500_000)
    assert uncapped.ranking_examples is None and uncapped.describe_cap() is None


@pytest.mark.parametrize(
    "argv,cap,epochs",
    [
        ([], SearchSpace().max_trial_examples, SearchSpace().tuning_epochs),
        (["--trial-examples", "0"], None, SearchSpace().tuning_epochs),
        (["--tuning-epochs", "2"], None, 2),  # a budget given outright: whole epochs
        (["--tuning-epochs", "2", "--trial-examples", "1000"], 1000, 2),
    ],
)
def test_the_cli_caps_trials_unless_the_budget_is_given(argv, cap, epochs):
    from tfx_accum.pipeline.cli.arguments import search_space_from_args
    from tfx_accum.pipeline.cli.parser import build_parser

    space = search_space_from_args(build_parser().parse_args(["run", *argv]))
    assert (space.max_trial_examples, space.tuning_epochs) == (cap, epochs)
