"""The local run's Beam sizing (tfx_accum.pipeline.beam_args) against ``bench.beam_sizing``'s
committed figures: on every shape the bench measured, the mode the rule picks for that
input on the bench's CPUs took no longer than ``in_memory``."""

from __future__ import annotations

import json

from bench.figures import RESULTS
from tfx_accum.pipeline.beam_args import local_beam_args


def test_the_default_sizing_is_never_slower_than_in_memory_on_the_benchs_shapes():
    measured = json.loads((RESULTS / "beam_sizing.json").read_text())
    assert {entry["component"] for entry in measured} == {"StatisticsGen", "Evaluator"}
    for entry in measured:
        args, why = local_beam_args(entry["csv_bytes"], cpus=entry["cpus"], rows=entry["rows"])
        chosen = args[0].removeprefix("--direct_running_mode=")
        assert entry[chosen]["wall_s"] <= entry["in_memory"]["wall_s"], (entry, why)
