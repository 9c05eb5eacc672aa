"""``bench.search_odds``: the odds of the search-quality check, read off a table of scores."""

from __future__ import annotations

import random

from bench import search_odds

MODELS = [(batch, rate) for batch in (8, 64, 512) for rate in (1e-3, 1e-2)]
CENTRE = (64, 1e-2)


def test_a_curve_is_the_best_score_so_far_in_the_search_order():
    scores = {search_odds._key(*m): i / 10 for i, m in enumerate(MODELS)}
    order = [MODELS[2], MODELS[0], MODELS[5], MODELS[1]]
    assert search_odds.curve(order, scores) == [0.2, 0.2, 0.5, 0.5]


def test_searches_draw_distinct_models_and_the_project_starts_at_the_centre():
    rng = random.Random(0)
    for _ in range(50):
        order = search_odds.search_order("centre_then_random", MODELS, CENTRE, 4, rng)
        assert order[0] == CENTRE and len(set(order)) == 4
        assert len(set(search_odds.search_order("random", MODELS, CENTRE, 4, rng))) == 4


def test_odds_count_how_often_one_median_curve_is_never_below_the_other():
    # The centre is the best model: a search that starts there is never below.
    best_at_centre = {search_odds._key(*m): 0.5 for m in MODELS} | {search_odds._key(*CENTRE): 0.9}
    held, means = search_odds.odds([best_at_centre], MODELS, CENTRE, 2, 3, 200, seed=0)
    assert held["centre_then_random >= random"] == 1.0
    assert means["centre_then_random"] == [0.9, 0.9]
    # Every model scores the same: every comparison holds (ties are not below).
    flat = {search_odds._key(*m): 0.5 for m in MODELS}
    held, _ = search_odds.odds([flat], MODELS, CENTRE, 2, 3, 50, seed=0)
    assert held == {"random >= random": 1.0, "centre_then_random >= random": 1.0}
    # Distinct scores: a search against itself is below at some t in a share of draws.
    spread = {search_odds._key(*m): i / 10 for i, m in enumerate(MODELS)}
    held, _ = search_odds.odds([spread], MODELS, CENTRE, 3, 3, 400, seed=0)
    assert 0.2 < held["random >= random"] < 0.9
