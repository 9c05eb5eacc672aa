"""``bench.search_quality`` in its smoke setting: the project's search and plain Keras
Tuner's random and Bayesian searches really run (wine, one seed, 2 trials of 1 epoch), and
the results have the structure the report is built from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import search_quality


@pytest.mark.e2e  # the bench's smoke run: three real searches on a real table
def test_smoke_run_writes_curves_for_every_method(tmp_path: Path) -> None:
    assert search_quality.main(["--smoke", "--output", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "search_quality.json").read_text())
    assert (tmp_path / "search_quality.md").read_text().startswith("# Search quality")
    assert report["settings"]["trials"] == 2
    assert report["settings"]["plain_batch_sizes"] == [8, 16, 32, 64, 128, 256, 512]
    assert isinstance(report["acceptance"], bool)
    assert set(report["datasets"]) == {"wine"}
    wine = report["datasets"]["wine"]
    assert wine["objective"] == "val_accuracy"
    assert set(wine["methods"]) == set(search_quality.METHODS)
    assert set(wine["project_not_below"]) == {"keras_tuner_random", "keras_tuner_bayesian"}
    for method, summary in wine["methods"].items():
        assert len(summary["median_curve"]) == 2, method
        (run,) = summary["runs"]
        assert run["seed"] == 0
        assert len(run["trials"]) == 2
        assert 1 <= run["distinct_configurations"] <= 2
        assert run["wall_s"] > 0
        for value in (*summary["median_curve"], *run["curve"]):
            assert isinstance(value, float) and 0.0 <= value <= 1.0, (method, value)
        assert run["curve"][1] >= run["curve"][0]  # best so far never falls
        for trial in run["trials"]:
            assert trial["effective_batch"] in report["settings"]["plain_batch_sizes"]
            assert 1e-4 * 0.999 <= trial["learning_rate"] <= 1e-1 * 1.001
    (project_run,) = wine["methods"]["tfx_accum"]["runs"]
    for trial in project_run["trials"]:
        k, m = trial["split"]
        assert k * m == trial["effective_batch"]


def test_best_curve_and_verdict_helpers() -> None:
    def trial(score: float | None) -> search_quality.TrialResult:
        return search_quality.TrialResult("0", "COMPLETED", score, 8, 1e-3)

    results = [trial(None), trial(0.5), trial(0.25), trial(0.75)]
    assert search_quality.best_curve(results, 5) == [None, 0.5, 0.5, 0.75, 0.75]
    assert search_quality.median_curve([[None, 0.5], [0.2, 0.4], [0.3, 0.9]]) == [0.2, 0.5]
    assert search_quality.not_below([0.5, 0.6], [0.5, 0.6])
    assert not search_quality.not_below([0.5, 0.6], [0.4, 0.7])
