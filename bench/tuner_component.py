"""TFX's own Tuner executor on a finished local run's examples: for benchmarks and tests.

The pipeline's Tuner is TFX's ``Tuner`` component with this project's ``tuner_fn``; this runs
that executor (``tfx.components.tuner.executor.Executor``) directly on the ExampleGen and
SchemaGen outputs of a run directory, so that a search can be repeated with other settings
(serial or parallel, reuse on or off) without re-running the data components.

Example:

```python
result = run_tuner_component(Path("out"), Path("/tmp/t1"), space, parallel_trials=2)
result.best, result.rows, result.trials, result.seconds
```
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

from tfx_accum.components.config.search_space import SearchSpace


@dataclasses.dataclass
class TunerResult:
    best: dict[str, Any]  # best_hyperparameters.txt's values
    rows: list[dict[str, Any]]  # tuner_results.json: the completed trials
    trials: list[dict[str, Any]]  # every trial.json of the search (any status)
    seconds: float  # the executor's wall time


def _latest(directory: Path) -> Path:
    return max(directory.iterdir(), key=lambda p: int(p.name))


def run_tuner_component(
    run_dir: Path,
    work_dir: Path,
    space: SearchSpace,
    parallel_trials: int = 1,
    model: str = "cnn",
    num_classes: int = 10,
    custom_config: dict[str, Any] | None = None,
) -> TunerResult:
    """Runs the Tuner's executor (tfx_accum's: TFX's, with the statistics) on ``run_dir``'s
    newest examples, statistics and schema, in ``work_dir``; ``custom_config``: more keys."""
    from tfx.dsl.components.base.base_executor import BaseExecutor
    from tfx.types import standard_artifacts

    from tfx_accum.components.search.tuner_component import TunerExecutor as Executor

    pipeline = run_dir / "pipeline"
    examples = standard_artifacts.Examples()
    examples.uri = str(_latest(pipeline / "CsvExampleGen" / "examples"))
    examples.split_names = json.dumps(["train", "eval"])
    schema = standard_artifacts.Schema()
    schema.uri = str(_latest(pipeline / "SchemaGen" / "schema"))
    statistics = standard_artifacts.ExampleStatistics()
    statistics.uri = str(_latest(pipeline / "StatisticsGen" / "statistics"))
    statistics.split_names = json.dumps(["train", "eval"])
    best, results = standard_artifacts.HyperParameters(), standard_artifacts.TunerResults()
    best.uri, results.uri = str(work_dir / "best"), str(work_dir / "results")
    os.makedirs(best.uri)
    os.makedirs(results.uri)
    custom_config = {
        "model": model,
        "num_classes": num_classes,
        "label_key": "label",
        "task": "multiclass",
        "search_space": space.to_config(),
        "search_root": str(work_dir / "search"),
        "parallel_trials": parallel_trials,
        **(custom_config or {}),
    }
    context = BaseExecutor.Context(tmp_dir=str(work_dir / "tmp"), unique_id="tuner")
    start = time.monotonic()
    Executor(context).Do(
        {"examples": [examples], "schema": [schema], "statistics": [statistics]},
        {"best_hyperparameters": [best], "tuner_results": [results]},
        {
            "tuner_fn": "tfx_accum.components.search.tuner_module.tuner_fn",
            "custom_config": json.dumps(custom_config),
            "train_args": "{}",
            "eval_args": "{}",
        },
    )
    seconds = time.monotonic() - start
    trials = [
        json.loads(path.read_text())
        for path in sorted((work_dir / "search").glob("*/*/trial_*/trial.json"))
    ]
    return TunerResult(
        json.loads((Path(best.uri) / "best_hyperparameters.txt").read_text())["values"],
        json.loads((Path(results.uri) / "tuner_results.json").read_text()),
        trials,
        seconds,
    )
