"""--bless-metric / --bless-threshold: which metric fits which task, checked before work starts."""

from __future__ import annotations

import pytest

from tfx_accum.components.config import tasks
from tfx_accum.components.config.blessing import BLESS_METRICS, Blessing
from tfx_accum.pipeline.cli.parser import build_parser, main


def nothing_written(output_dir) -> bool:
    """The output directory is at most created (the writability check), never written."""
    return not output_dir.exists() or not any(output_dir.iterdir())


def test_each_task_has_a_default_metric_with_a_baseline():
    assert Blessing.for_task(tasks.MULTICLASS) == Blessing(tasks.MULTICLASS, "accuracy")
    assert Blessing.for_task(tasks.BINARY) == Blessing(tasks.BINARY, "accuracy")
    assert Blessing.for_task(tasks.REGRESSION) == Blessing(tasks.REGRESSION, "mse")
    assert Blessing.for_task(tasks.BINARY, "auc").threshold is None  # beats chance
    assert Blessing.for_task(tasks.REGRESSION, "mae", 3).threshold == 3.0


@pytest.mark.parametrize(
    "task,metric,threshold,message",
    [
        (
            tasks.MULTICLASS,
            "mse",
            None,
            "--bless-metric mse does not fit a multiclass task; use one of accuracy.",
        ),
        (tasks.MULTICLASS, "auc", None, "does not fit a multiclass task"),
        (tasks.REGRESSION, "accuracy", 0.9, "use one of mse, mae"),
        (tasks.BINARY, "mae", 1.0, "use one of accuracy, auc, precision, recall"),
        (tasks.BINARY, "f1", None, "--bless-metric must be one of accuracy, auc"),
        (tasks.BINARY, "recall", None, "--bless-metric recall needs --bless-threshold"),
        (tasks.BINARY, "precision", None, "needs --bless-threshold"),
        (tasks.REGRESSION, "mae", None, "needs --bless-threshold"),
        (tasks.BINARY, "auc", 1.5, "--bless-threshold 1.5 is outside [0, 1], the range of auc"),
        # Without a metric: the task's default (accuracy) decides the range.
        (tasks.MULTICLASS, None, 2.0, "outside [0, 1], the range of accuracy"),
        (tasks.REGRESSION, "mse", -1.0, "--bless-threshold must be a number >= 0"),
        (tasks.REGRESSION, "mse", float("nan"), "must be a number >= 0"),
    ],
)
def test_options_that_do_not_fit_the_task_are_refused(task, metric, threshold, message):
    with pytest.raises(ValueError, match=None) as error:
        Blessing.for_task(task, metric, threshold)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_an_error_threshold_may_exceed_one():
    assert Blessing.for_task(tasks.REGRESSION, "mse", 2500.0).threshold == 2500.0


def test_every_bless_metric_fits_some_task_and_names_its_baseline_or_why_not():
    for name, spec in BLESS_METRICS.items():
        assert spec.tasks and set(spec.tasks) <= set(tasks.TASKS), name
        assert spec.baseline or spec.why_no_baseline, name


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--bless-metric", "mse"], "--bless-metric mse does not fit a multiclass task"),
        (["--bless-metric", "f1"], "--bless-metric must be one of"),
        (["--bless-threshold", "1.5"], "outside [0, 1], the range of accuracy"),
        (["--bless-metric", "auc"], "does not fit a multiclass task"),
        (
            ["--accuracy-threshold", "0.9", "--bless-metric", "auc"],
            "--accuracy-threshold X is --bless-metric accuracy --bless-threshold X",
        ),
        (["--accuracy-threshold", "1.2"], "outside [0, 1], the range of accuracy"),
    ],
)
def test_run_refuses_bless_options_in_one_line_with_exit_2(argv, message, tmp_path, capsys):
    """On the embedded digits (10 classes: multiclass), before anything is written."""
    assert main(["run", "--output-dir", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert nothing_written(tmp_path / "out")


def test_a_binary_data_set_takes_binary_metrics(tmp_path, capsys):
    """Two classes make a binary task: auc fits; recall needs a threshold; mse does not fit."""
    data = tmp_path / "data"
    data.mkdir()
    rows = "\n".join(f"{i % 7},{i % 3},{i % 2}" for i in range(40))
    (data / "d.csv").write_text("a,b,label\n" + rows + "\n")
    base = ["run", "--data-root", str(data), "--output-dir", str(tmp_path / "out")]
    assert main([*base, "--bless-metric", "recall"]) == 2
    err = capsys.readouterr().err
    assert "--bless-metric recall needs --bless-threshold" in err and err.count("\n") == 1
    assert main([*base, "--bless-metric", "mse"]) == 2
    assert "does not fit a binary task" in capsys.readouterr().err
    assert nothing_written(tmp_path / "out")


def test_accuracy_threshold_is_the_old_spelling_of_bless_options():
    from tfx_accum.pipeline.cli.arguments import check_common as _check_common

    args = build_parser().parse_args(["run", "--accuracy-threshold", "0.8"])
    _check_common(args)
    assert (args.bless_metric, args.bless_threshold) == ("accuracy", 0.8)
    args = build_parser().parse_args(["run", "--bless-metric", "auc"])
    _check_common(args)
    assert (args.bless_metric, args.bless_threshold) == ("auc", None)
