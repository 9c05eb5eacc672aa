"""Unit tests of the search policy (tfx_accum.components.search.search_policy): no TensorFlow,
milliseconds."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tfx_accum.components.config.search_space import (
    exceeds_effective_batch_limit,
    within_effective_batch_limit,
)
from tfx_accum.components.config.trial_records import TRIAL_SPEED, TunerDecision
from tfx_accum.components.search.search_policy import (
    TrialRecord,
    centre_configuration,
    choose_trainer_split,
    duplicate_key,
    finished_duplicate,
    other_splits,
    steps_per_epoch,
    untried_configuration,
)

ROOT = Path(__file__).resolve().parents[2]


def _values(k: int, m: int, lr: float = 1e-3, **rest) -> dict:
    return {"accumulation_steps": k, "micro_batch_size": m, "learning_rate": lr, **rest}


def _record(trial_id: str, k: int, m: int, score=0.9, lr=1e-3, speed=None, **kwargs):
    return TrialRecord(trial_id, "COMPLETED", score, _values(k, m, lr), speed=speed, **kwargs)


def test_the_policy_module_does_not_import_tensorflow_or_keras_tuner():
    # In a fresh interpreter: other tests of this session have imported TensorFlow.
    import subprocess

    code = (
        "import sys, tfx_accum.components.search.search_policy\n"
        "import tfx_accum.components.config.search_space\n"
        "print(sorted(m for m in ('tensorflow', 'keras', 'keras_tuner') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_splits_of_one_effective_batch_and_learning_rate_are_duplicates():
    assert (
        duplicate_key(_values(4, 8))
        == duplicate_key(_values(2, 16))
        == duplicate_key(_values(1, 32))
    )
    assert duplicate_key(_values(4, 8)) != duplicate_key(_values(4, 16))
    assert duplicate_key(_values(4, 8, 1e-3)) != duplicate_key(_values(4, 8, 1e-2))
    # Every other value counts (Hyperband's epochs, a model function's own) ...
    assert duplicate_key(_values(4, 8, units=64)) != duplicate_key(_values(2, 16, units=128))
    # ... but not what a trial measured beside its values.
    assert duplicate_key(_values(4, 8, **{TRIAL_SPEED: 10.0})) == duplicate_key(_values(2, 16))


def test_a_finished_duplicate_is_found_only_among_other_scored_trials():
    done = [
        _record("00", 4, 8),
        TrialRecord("01", "FAILED", None, _values(2, 16)),
        _record("02", 1, 64),
    ]
    assert finished_duplicate("05", _values(2, 16), done).trial_id == "00"
    assert finished_duplicate("00", _values(4, 8), done[:2]) is None  # not itself
    assert finished_duplicate("05", _values(8, 16), done) is None


def test_the_trainer_gets_the_fastest_split_of_the_best_trials_model():
    records = [
        _record("00", 4, 8, score=0.95, speed=100.0),
        _record("01", 1, 32, score=0.95, speed=300.0, reused_from="00"),
        _record("02", 2, 16, score=0.95, speed=200.0, reused_from="00"),
        _record("03", 1, 64, score=0.90, speed=900.0),
    ]
    choice = choose_trainer_split(records)
    assert choice.best.trial_id == "00"  # the trained one wins the tie with its reuses
    assert choice.fastest.trial_id == "01"
    assert choice.resplit and choice.speedup == pytest.approx(3.0)
    assert choice.values == {
        **_values(1, 32),
        "resplit_from_trial": "00",
        "resplit_from_split": "4 x 8",
        "resplit_speedup": 3.0,
    }
    assert choose_trainer_split([]) is None
    alone = choose_trainer_split([_record("00", 4, 8, speed=1.0)])
    assert not alone.resplit and alone.values == _values(4, 8)


def test_a_best_trial_without_a_speed_of_its_own_is_compared_at_its_timed_split():
    """A trial of one update per epoch has no steady speed: its split timed after the
    search stands in for it, so the speedup is of two measurements, never of nothing."""
    best = _record("00", 2, 64, speed=None)
    own = _record("00", 2, 64, speed=100.0, reused_from="00")
    other = _record("00", 8, 16, speed=150.0, reused_from="00")
    choice = choose_trainer_split([best, own, other])
    assert choice.best is best and choice.fastest is other
    assert choice.speedup == pytest.approx(1.5)


def test_the_decision_round_trips_through_best_hyperparameters():
    choice = choose_trainer_split(
        [_record("00", 4, 8, speed=100.0), _record("01", 2, 16, speed=250.0)]
    )
    decision = TunerDecision.from_config({"space": [], "values": choice.values})
    assert decision.hyperparameters.accumulation_steps == 2
    assert decision.hyperparameters.micro_batch_size == 16
    assert decision.resplit_from_trial == "00" and decision.resplit_from_split == "4 x 8"
    assert "2.50x faster" in decision.describe_source()


def test_an_untried_configuration_is_another_model_until_none_is_left():
    import random

    choices = ((1, 2), (8, 16), (1e-3, 1e-2), None)  # effective batches 8, 16, 32 x 2 rates
    tried: list[dict] = []
    rng = random.Random(0)
    while (
        values := untried_configuration(_values(1, 8, units=64), tried, *choices, rng)
    ) is not None:
        assert duplicate_key(values) not in {duplicate_key(t) for t in tried}
        assert values["units"] == 64  # a model function's own value is the proposal's
        tried.append(values)
    assert len(tried) == 3 * 2  # every model once, then None
    limited = untried_configuration(_values(1, 8), [], (1, 2), (8, 16), (1e-3,), 16, rng)
    assert limited["accumulation_steps"] * limited["micro_batch_size"] <= 16


def test_an_untried_configuration_is_drawn_uniformly_over_models_not_splits():
    """Effective batch 64 has four splits in the default space, 8 has one: each is drawn
    as often (a draw over k and m would favour 64 four to one)."""
    import collections
    import random

    choices = ((1, 2, 4, 8), (8, 16, 32, 64), (1e-3,), None)
    counts = collections.Counter(
        values["accumulation_steps"] * values["micro_batch_size"]
        for seed in range(700)
        if (values := untried_configuration(_values(1, 8), [], *choices, random.Random(seed)))
    )
    assert sorted(counts) == [8, 16, 32, 64, 128, 256, 512]
    assert all(60 <= count <= 140 for count in counts.values()), counts


def test_the_first_trial_is_the_middle_effective_batch_with_its_largest_micro_batch():
    k_choices, m_choices = (1, 2, 4, 8), (8, 16, 32, 64)
    centre = centre_configuration(_values(8, 8, units=64), k_choices, m_choices, None, 3e-3)
    # Effective batches 8..512: the geometric middle is 64, split as 1 x 64.
    assert centre == _values(1, 64, 3e-3, units=64)
    # Within a limit of 64 (8..64): 16 and 32 are as near to 22.6; the smaller is taken.
    assert centre_configuration(_values(1, 8), k_choices, m_choices, 64, 1e-3) == _values(1, 16)
    # Only accumulation gives the middle batch: 2 x 8 = 16 of 8, 16, 32.
    assert centre_configuration(_values(1, 8), (1, 2, 4), (8,), None, 1e-3) == _values(2, 8)
    with pytest.raises(ValueError, match="fits 4"):
        centre_configuration(_values(1, 8), k_choices, m_choices, 4, 1e-3)


def test_the_other_splits_of_an_effective_batch_are_the_untimed_ones():
    k_choices, m_choices = (1, 2, 4, 8), (8, 16, 32, 64)
    assert other_splits(2, 32, k_choices, m_choices) == [(1, 64), (4, 16), (8, 8)]
    assert other_splits(2, 32, k_choices, m_choices, timed=[(1, 64)]) == [(4, 16), (8, 8)]
    assert other_splits(1, 8, k_choices, m_choices) == []


def test_the_effective_batch_limit_is_one_rule():
    assert not exceeds_effective_batch_limit(4, 8, None)
    assert not exceeds_effective_batch_limit(4, 8, 32)
    assert exceeds_effective_batch_limit(4, 16, 32)
    choices = ((1, 2, 4, 8), (8, 16, 64))
    assert within_effective_batch_limit(_values(8, 16), *choices, 32) == _values(2, 16)
    assert within_effective_batch_limit(_values(1, 64), *choices, 32) == _values(2, 16)
    assert within_effective_batch_limit(_values(8, 16), *choices, None) == _values(8, 16)
    with pytest.raises(ValueError, match="fits 4"):
        within_effective_batch_limit(_values(8, 16), *choices, 4)


def test_every_trial_sees_the_same_examples_in_whole_batches():
    assert steps_per_epoch(1171, 32) == 37
    assert steps_per_epoch(1171, 1171) == 1
    assert steps_per_epoch(1171, 2048) == 1


def _sources():
    for folder in ("components", "pipeline", "kubeflow", "tfx_accum", "bench"):
        yield from (ROOT / folder).rglob("*.py")


def test_keras_tuner_is_extended_not_patched():
    """No assignment to a Keras Tuner object's method, no keras_tuner.src outside the adapter."""
    adapter = ROOT / "components" / "search" / "keras_tuner_adapter.py"
    patched, private = [], []
    for path in _sources():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    owner = getattr(target, "value", None)
                    name = getattr(owner, "attr", getattr(owner, "id", None))
                    if isinstance(target, ast.Attribute) and name in ("oracle", "tuner"):
                        patched.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "keras_tuner.src"
            ):
                if path != adapter:
                    private.append(f"{path.name}:{node.lineno}")
    assert not patched, patched
    assert not private, private
