"""The run's summary: what was trained, on which budget, how it evaluated, where it went.

:func:`summary_lines` formats what :func:`~tfx_accum.pipeline.cli.report.read_summary` read
from ML Metadata (this run's executions only); :func:`trial_files` writes ``trials.csv``
and ``trials.png`` for the run's own trials.
"""

from __future__ import annotations

from pathlib import Path

from tfx_accum.components import settings
from tfx_accum.components.data import tasks
from tfx_accum.pipeline.config import EXIT_FAILED, EXIT_UNBLESSED


def summary_lines(
    summary,
    blessing: settings.Blessing,
    trial_files,
    seconds: float,
    allow_unblessed: bool = False,
) -> list[str]:
    lines = ["", "=== tfx-accum summary ==="]
    lines.extend(anomaly_lines(summary.anomalies))
    if summary.best_hyperparameters:
        hp = summary.best_hyperparameters
        lines.append(
            f"best trial: accumulation_steps={hp.accumulation_steps} "
            f"micro_batch={hp.micro_batch_size} learning_rate={hp.learning_rate:.3g} "
            f"effective_batch={hp.effective_batch}"
        )
        if summary.resplit:
            lines.append(
                f"  (trial {summary.resplit['trial']} ran it as {summary.resplit['split']}; the "
                "Trainer used the faster split above, which trains the same model)"
            )
    else:
        lines.append("tuning: off (fixed hyperparameters)")
    budget = summary.trainer_budget
    if budget:
        lines.append("budget: " + budget_text(budget, summary.best_trial_examples))
    from tfx_accum.pipeline.evaluation import blessing_reason, evaluation_line

    if summary.evaluation is not None:
        lines.append(evaluation_line(summary.evaluation, blessing.task))
    if summary.blessed is None:
        lines.append("blessed: unknown")
    elif summary.blessed:
        lines.append(f"blessed: yes ({blessing_reason(summary.evaluation, blessing, True)})")
    else:
        exit_code = (
            f"exit code 0 as --allow-unblessed asks (else {EXIT_UNBLESSED})"
            if allow_unblessed
            else f"exit code {EXIT_UNBLESSED} (--allow-unblessed to exit 0)"
        )
        lines.append(
            f"blessed: no ({blessing_reason(summary.evaluation, blessing, False)}): not "
            f"pushed; {exit_code}"
        )
    lines.append(pushed_line(summary))
    lines.append(trial_files)
    lines.append(f"wall time: {seconds:.0f} s")
    return lines


def pushed_line(summary) -> str:
    """Where the model went: a version that a server of the serving directory loads (the
    newest), or a line that says it is not."""
    if not summary.pushed_to:
        return "pushed to: not pushed"
    if summary.not_served:
        return (
            f"pushed to: {summary.pushed_to}, which is not what a server loads: "
            f"{summary.not_served}; exit code {EXIT_FAILED}"
        )
    again = f" ({summary.pushed_again})" if summary.pushed_again else ""
    return f"pushed to: {summary.pushed_to}{again}"


def anomaly_lines(anomalies: list[tuple[str, str, str]] | None) -> list[str]:
    """ExampleValidator's findings, one line each: the data against the schema."""
    if anomalies is None:
        return []
    if not anomalies:
        return ["data anomalies: none (ExampleValidator, against the schema)"]
    lines = [f"data anomalies: {len(anomalies)} (ExampleValidator, against the schema):"]
    lines += [f"  {feature}: {what} ({split} split)" for split, feature, what in anomalies]
    return lines


def budget_text(budget: dict, best_trial: int | None) -> str:
    """One budget in examples: the Trainer's, and the best trial's when they are one."""
    trained = (
        f"{budget['examples']:,} training examples ({budget['updates']:,} updates x "
        f"{budget['global_batch']})"
    )
    kept = ""
    if budget.get("best_epoch") and budget.get("validation_score") is not None:
        kept = (
            f"; the model is epoch {budget['best_epoch']}'s, validation score "
            f"{budget['validation_score']:.4f}"
        )
    if best_trial and best_trial == budget["examples"]:
        return f"{trained}, the best trial's and the Trainer's{kept}"
    if best_trial:
        return f"Trainer {trained}, the best trial {best_trial:,} (--train-steps){kept}"
    return f"Trainer {trained}{kept}"


def trial_files(summary, output_dir: Path, task: str) -> str:
    """Writes this run's trials.csv/png; with tuning off, earlier ones are left alone."""
    from tfx_accum.pipeline.cli.report import write_trials

    written = write_trials(summary.trials, output_dir, tasks.OBJECTIVES[task])
    if written:
        return f"trials: {written[0]} and {written[1]}"
    earlier = [p.name for p in (output_dir / "trials.csv", output_dir / "trials.png") if p.exists()]
    if earlier:
        return f"trials: none in this run ({' and '.join(earlier)} are from an earlier run)"
    return "trials: none in this run"
