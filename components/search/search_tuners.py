"""Keras Tuner extended for exact accumulation: an oracle mixin and a tuner mixin.

Both use Keras Tuner's public seams (``Oracle.populate_space``, ``Oracle.get_best_trials``,
``Tuner.run_trial``, ``on_trial_begin``/``on_trial_end``, ``search``,
``get_best_hyperparameters``); the policy they apply is
``tfx_accum.components.search.search_policy``. The one private use left (building a trial's model
without a session reset) is in ``tfx_accum.components.search.keras_tuner_adapter``.

- :class:`AccumulationOracleMixin`: proposals stay within ``max_effective_batch`` (every
  algorithm proposes in ``populate_space``); the best trials carry what each trial measured
  (speed, memory, examples, reuse) as fixed values, which is how they reach TFX's
  ``tuner_results.json``; ``get_best_trials(None)`` means all (TFX ranks Hyperband's
  trials with its ``max_trials``, which is None).
- :class:`AccumulationTunerMixin`: a trial that would train the same model as a finished
  one reuses its score and only measures its own speed and memory; one line per trial;
  with ``parallel_trials`` > 1 the trials run in worker processes
  (``tfx_accum.components.search.parallel_search``); ``get_best_hyperparameters`` returns the
  Tuner's decision: the best trial's values with the fastest exact split of its effective batch.

Example:

```python
tuner = make_tuner(space, AccumulationHyperModel(space, splits, "mlp"), directory)
tuner.search(epochs=space.tuning_epochs)
tuner.get_best_hyperparameters()[0].values  # what the Trainer trains with
```

Size (about 500 lines): the oracle and tuner mixins override Keras Tuner's seams together;
the policy they apply lives apart in ``search_policy`` (plain functions).
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
import copy
import dataclasses
import random
import time
from typing import Any

import keras_tuner

from tfx_accum import console
from tfx_accum.components.config.hyperparameters import (
    HP_ACCUMULATION_STEPS,
    HP_LEARNING_RATE,
    HP_MICRO_BATCH_SIZE,
)
from tfx_accum.components.config.search_space import SearchSpace
from tfx_accum.components.config.trial_records import (
    TRIAL_EXAMPLES,
    TRIAL_PEAK_MEMORY,
    TRIAL_REUSED_FROM,
    TRIAL_SCORED_ON,
    TRIAL_SPEED,
)
from tfx_accum.components.search import keras_tuner_adapter as kt_adapter
from tfx_accum.components.search import parallel_search, search_state
from tfx_accum.components.search.hypermodel import AccumulationHyperModel
from tfx_accum.components.search.keras_tuner_adapter import NoSessionResetMixin
from tfx_accum.components.search.peak_memory import PeakMemory
from tfx_accum.components.search.search_policy import (
    TrialRecord,
    centre_configuration,
    choose_trainer_split,
    duplicate_key,
    finished_duplicate,
    other_splits,
    untried_configuration,
)

_MEASURED = (TRIAL_EXAMPLES, TRIAL_SCORED_ON, TRIAL_SPEED, TRIAL_PEAK_MEMORY, TRIAL_REUSED_FROM)
_PROPOSALS = 3  # repeats asked of the algorithm before an untried configuration is drawn
PROJECT_NAME = "tfx_accum"  # Keras Tuner's project folder inside the search directory


def _metric(trial, name: str) -> float | None:
    if trial.metrics.exists(name):
        value = trial.metrics.get_last_value(name)
        return None if value is None else float(value)
    return None


def trial_record(trial) -> TrialRecord:
    """What ``search_policy`` needs of a Keras Tuner trial."""
    reused = _metric(trial, TRIAL_REUSED_FROM)
    return TrialRecord(
        trial.trial_id,
        trial.status,
        trial.score,
        dict(trial.hyperparameters.values),
        speed=_metric(trial, TRIAL_SPEED),
        reused_from=None if reused is None else str(int(reused)),
        examples=_metric(trial, TRIAL_EXAMPLES),
        scored_examples=_metric(trial, TRIAL_SCORED_ON),
    )


def _with_measurements(trial):
    """A copy of ``trial`` whose values also hold what it measured (for TFX's results)."""
    measured = {name: _metric(trial, name) for name in _MEASURED}
    if all(value is None for value in measured.values()):
        return trial
    annotated = copy.copy(trial)  # the oracle's own trial is left as it is
    annotated.hyperparameters = trial.hyperparameters.copy()
    for name, value in measured.items():
        if value is not None:
            annotated.hyperparameters.Fixed(name, round(value, 3))
    return annotated


class AccumulationOracleMixin:
    """Mixed in front of a Keras Tuner oracle class; ``space`` is the search space."""

    def __init__(self, *args, space: SearchSpace, **kwargs):
        super().__init__(*args, **kwargs)
        self.space = space

    def reload(self):
        """Keras Tuner's reload, and a trial killed as it was created runs again too
        (``keras_tuner_adapter.retry_orphaned_trials``): else it counts toward
        ``max_trials`` without ever training."""
        super().reload()
        kt_adapter.retry_orphaned_trials(self)

    def populate_space(self, trial_id):
        """The algorithm's proposal, within ``max_effective_batch`` and, with
        ``space.distinct_trials`` (random and Bayesian search), a model no trial trains yet.

        A proposal with a tried trial's effective batch and learning rate would train the
        same model again (exact accumulation): the algorithm is asked again (Bayesian
        optimization restarts its acquisition from new random points; random search draws
        again), and after ``_PROPOSALS`` repeats an untried configuration is drawn at
        random (``search_policy.untried_configuration``). None left: the search stops, so
        ``max_trials`` counts distinct models, never repeats.

        Where the algorithm samples at random (random search; Bayesian optimization's
        initial points), the draw is uniform over the untried *models* (effective batch,
        learning rate), then over their splits: Keras Tuner's draw over ``k`` and ``m``
        would favour effective batches with many splits (64 = 1 x 64 = 2 x 32 = 4 x 16 =
        8 x 8, but 8 only as 1 x 8). Only the proposal's other values (a model
        function's own) are kept then.
        """
        if self._starts_here(trial_id):
            return self._centre(super().populate_space(trial_id))
        if not self._distinct():
            return self._within_limit(super().populate_space(trial_id))
        tried = [t.hyperparameters.values for t in self.trials.values()]
        taken = {duplicate_key(values) for values in tried}
        at_random = self._samples_at_random()
        result = None
        for _ in range(1 if at_random else _PROPOSALS):
            result = self._within_limit(super().populate_space(trial_id))
            if result.get("status") != "RUNNING":
                return result
            if not at_random and duplicate_key(result["values"]) not in taken:
                return result
        values = untried_configuration(
            result["values"],
            tried,
            self.space.accumulation_steps_choices,
            self.space.micro_batch_choices,
            sorted(set(self._learning_rate().values)),  # the Float's grid (with a step)
            self.space.max_effective_batch,
            random.Random(f"{self.space.seed}/{trial_id}"),
        )
        if values is None:
            console.say(
                f"[tuner] all {len(taken)} distinct configurations of the search space are "
                "trained: the search stops before max_trials"
            )
            return {"status": "STOPPED", "values": None}
        return {"status": "RUNNING", "values": values}

    def _starts_here(self, trial_id) -> bool:
        """Whether this is a random or Bayesian search's first trial, which trains the
        middle of the space (``space.start_at_centre``); a resumed search has trials."""
        return (
            self.space.start_at_centre
            and self.space.algorithm != "hyperband"
            and not any(t.trial_id != trial_id for t in self.trials.values())
        )

    def _centre(self, result: dict) -> dict:
        """``result`` (the algorithm's proposal) moved to the middle of the space: the
        middle effective batch, and the learning rate Keras Tuner's own hyperparameter
        places at the middle of its range (``prob_to_value(0.5)``: on its grid, if any)."""
        if result.get("status") != "RUNNING" or not result.get("values"):
            return result
        result["values"] = centre_configuration(
            result["values"],
            self.space.accumulation_steps_choices,
            self.space.micro_batch_choices,
            self.space.max_effective_batch,
            self._learning_rate().prob_to_value(0.5),
        )
        return result

    def _learning_rate(self):
        """Keras Tuner's learning-rate hyperparameter of this search (its grid, its range)."""
        (hp,) = (hp for hp in self.hyperparameters.space if hp.name == HP_LEARNING_RATE)
        return hp

    def _samples_at_random(self) -> bool:
        """Whether the algorithm's next proposal is a random draw (Keras Tuner's rule)."""
        if self.space.algorithm == "random":
            return True
        completed = sum(t.status == "COMPLETED" for t in self.trials.values())
        initial = getattr(self, "num_initial_points", None) or max(
            3 * len(self.hyperparameters.space), 3
        )
        return completed < initial

    def _distinct(self) -> bool:
        # Hyperband runs a configuration again on purpose (more epochs, from its weights).
        return self.space.distinct_trials and self.space.algorithm != "hyperband"

    def _within_limit(self, result: dict) -> dict:
        if result.get("values"):
            result["values"] = self.space.within_limit(result["values"])
        return result

    def get_best_trials(self, num_trials=1):
        count = len(self.trials) if num_trials is None else num_trials
        return [_with_measurements(t) for t in super().get_best_trials(count)]


class RandomSearchOracle(AccumulationOracleMixin, keras_tuner.oracles.RandomSearchOracle):
    pass


class BayesianOptimizationOracle(
    AccumulationOracleMixin, keras_tuner.oracles.BayesianOptimizationOracle
):
    pass


class HyperbandOracle(AccumulationOracleMixin, keras_tuner.oracles.HyperbandOracle):
    pass


class AccumulationTunerMixin:
    """Reuse of exact duplicates, trial lines, parallel workers and the Trainer's split.

    ``parallel_trials`` > 1 with a ``worker_spec`` (what a worker process needs to rebuild
    this tuner: ``parallel_search.worker_spec``) runs the trials in worker processes.
    """

    def __init__(self, *args, parallel_trials: int = 1, worker_spec: dict | None = None, **kw):
        super().__init__(*args, **kw)
        self.parallel_trials, self.worker_spec = parallel_trials, worker_spec

    def on_trial_begin(self, trial):
        self._trial_started = time.monotonic()
        self.hypermodel.last_timing = None
        super().on_trial_begin(trial)

    def run_trial(self, trial, *args, **kwargs):
        source = self._finished_duplicate(trial)
        if source is None:
            return super().run_trial(trial, *args, **kwargs)
        if trial_record(trial).split == trial_record(source).split:
            # The very same trial (Bayesian optimization proposes a point again): its
            # speed and memory are the source's too; nothing is trained or measured.
            speed = {
                name: value
                for name in (TRIAL_SPEED, TRIAL_PEAK_MEMORY)
                if (value := _metric(source, name)) is not None
            }
        else:
            model = self.hypermodel.build(trial.hyperparameters)
            speed = self.hypermodel.measure_speed(trial.hyperparameters, model)
        recorded = {
            name: value
            for name in (TRIAL_EXAMPLES, TRIAL_SCORED_ON)
            if (value := _metric(source, name)) is not None
        }
        return {
            self.hypermodel.objective: float(source.score),
            **speed,
            **recorded,
            TRIAL_REUSED_FROM: float(int(source.trial_id)),
        }

    def _finished_duplicate(self, trial):
        """A finished trial that trains ``trial``'s model (asked of the oracle, which in a
        worker is the chief's, over gRPC), or None."""
        if not self.hypermodel.space.reuse_exact_duplicates:
            return None
        finished = {t.trial_id: t for t in self.oracle.get_best_trials(10**6)}
        record = finished_duplicate(
            trial.trial_id,
            trial.hyperparameters.values,
            (trial_record(t) for t in finished.values()),
        )
        return None if record is None else finished[record.trial_id]

    def on_trial_end(self, trial):
        seconds = time.monotonic() - getattr(self, "_trial_started", time.monotonic())
        timing = getattr(self.hypermodel, "last_timing", None)
        super().on_trial_end(trial)
        if parallel_search.is_worker():
            # The chief's oracle scored it; this process's copy has neither score nor metrics.
            trial = self.oracle.get_trial(trial.trial_id)
        console.say(_trial_line(trial, seconds, timing, self.hypermodel.objective))

    def search(self, *args, **kwargs):
        if parallel_search.is_worker():
            super().search(*args, **kwargs)  # asks the chief's oracle for trials
            self._say_traces()
            return
        if self.parallel_trials > 1 and self.worker_spec is not None:
            parallel_search.run_workers(self, self.parallel_trials, self.worker_spec)
        else:
            super().search(*args, **kwargs)
            self._say_traces()
        trials = list(self.oracle.trials.values())
        self._split_timings = self._time_other_splits(trials)
        if not any(t.status == "COMPLETED" for t in trials):
            last = next((t.message for t in reversed(trials) if t.message), "no trial ran")
            raise RuntimeError(
                f"All {len(trials)} tuning trials failed, so there are no best "
                "hyperparameters. Last failure: "
                f"{last.strip().splitlines()[-1] if last else last}. Try smaller "
                "micro_batch_choices, or a larger max_effective_batch."
            )
        self._say_results(trials)

    def _say_traces(self) -> None:
        """How often this process traced the training step (1: one step for the search)."""
        traces = self.hypermodel.trace_count
        if traces:
            console.say(
                f"[tuner] the training step was traced {traces} time(s) in this process: "
                + (
                    "one traced step served every trial's k and micro-batch"
                    if traces == 1
                    else "once per model (a model function's own hyperparameters) and, under "
                    "XLA, once per accumulation step count"
                )
            )

    def trial_records(self, trials=None) -> list[TrialRecord]:
        """The trials as the policy sees them, with the splits timed after the search."""
        trials = self.oracle.trials.values() if trials is None else trials
        return [*(trial_record(t) for t in trials), *getattr(self, "_split_timings", [])]

    def _time_other_splits(self, trials: list) -> list[TrialRecord]:
        """The best trial's model at the other splits of its effective batch, timed (a few
        updates each, not trained to a score: accumulation is exact, so the score is the
        best trial's). Not trials: they spend none of ``max_trials``. The Trainer gets the
        fastest (``choose_trainer_split``). Skipped in a parallel search's chief, which
        holds no data: there only the trials' own timings count."""
        records = [trial_record(t) for t in trials]
        choice = choose_trainer_split(records, self.hypermodel.direction)
        if choice is None or self.hypermodel.splits is None or parallel_search.is_worker():
            return []
        best, space = choice.best, self.hypermodel.space
        key = duplicate_key(best.values)
        timed = [r.split for r in records if r.speed and duplicate_key(r.values) == key]
        splits = other_splits(
            *best.split, space.accumulation_steps_choices, space.micro_batch_choices, timed
        )
        if not best.speed:  # a trial of one update per epoch has no steady speed of its own
            splits.insert(0, best.split)
        timings = []
        for k, m in splits:
            hp = self.oracle.trials[best.trial_id].hyperparameters.copy()
            hp.values.update({HP_ACCUMULATION_STEPS: k, HP_MICRO_BATCH_SIZE: m})
            try:
                speed = self.hypermodel.measure_speed(hp, self.hypermodel.build(hp))
            except keras_tuner.errors.FailedTrialError as error:
                console.say(f"[tuner] split {k} x {m} not timed: {error}")
                continue
            timings.append(
                dataclasses.replace(
                    best,
                    values=dict(hp.values),
                    speed=speed.get(TRIAL_SPEED),
                    reused_from=best.trial_id,
                )
            )
        if timings:
            console.say(
                f"[tuner] timed the best trial's effective batch at {len(timings)} "
                "split(s): "
                + ", ".join(
                    f"{r.split[0]} x {r.split[1]} {r.speed or 0:,.0f} examples/s" for r in timings
                )
                + (
                    f" (trial {best.trial_id}'s own: {best.speed:,.0f} examples/s)"
                    if best.speed
                    else ""
                )
            )
        return timings

    def _say_results(self, trials: list) -> None:
        reused = [t for t in trials if _metric(t, TRIAL_REUSED_FROM) is not None]
        if reused:
            console.say(
                f"[tuner] {len(reused)} of {len(trials)} trial(s) were exact duplicates of a "
                "finished trial (same effective batch and learning rate): their scores were "
                "reused, not retrained"
            )
        choice = choose_trainer_split(self.trial_records(trials), self.hypermodel.direction)
        if choice is not None and choice.resplit:
            (k, m), (new_k, new_m) = choice.best.split, choice.fastest.split
            source = (
                "timed after the search"
                if choice.fastest.trial_id == choice.best.trial_id
                else f"trial {choice.fastest.trial_id} ran"
            )
            console.say(
                f"[tuner] best: trial {choice.best.trial_id} ({k} x {m}, effective batch "
                f"{k * m}); {source} the same effective batch and learning rate as "
                f"{new_k} x {new_m} {choice.speedup:.2f}x faster. Accumulation is exact, so "
                "that split trains the same model: the Trainer uses it"
            )

    def get_best_hyperparameters(self, num_trials=1):
        """The Tuner's decision first: the best trial's values with the fastest exact split
        of its effective batch (``search_policy.choose_trainer_split``), then the rest."""
        found = super().get_best_hyperparameters(num_trials)
        choice = choose_trainer_split(self.trial_records(), self.hypermodel.direction)
        if choice is None or not found:
            return found
        decision = self.oracle.trials[choice.best.trial_id].hyperparameters.copy()
        for name, value in choice.values.items():
            if name in decision.values:
                decision.values[name] = value
            else:
                decision.Fixed(name, value)
        return [decision, *found[1:]]


def _trial_line(trial, seconds: float, timing, objective: str) -> str:
    values = trial.hyperparameters.values
    steps, micro = values.get(HP_ACCUMULATION_STEPS), values.get(HP_MICRO_BATCH_SIZE)
    lr = values.get(HP_LEARNING_RATE)
    effective = steps * micro if steps and micro else "?"
    score = f"{objective}={trial.score:.4f}" if trial.score is not None else "no score"
    message = ""
    if trial.status != "COMPLETED" and trial.message:
        message = " - " + trial.message.strip().splitlines()[-1][:160]
    speed = ""
    if trial.status == "COMPLETED":
        rate, peak = _metric(trial, TRIAL_SPEED), _metric(trial, TRIAL_PEAK_MEMORY)
        speed = f", {rate:,.0f} examples/s" if rate else ""
        speed += f", peak {PeakMemory().kind} memory {peak:,.0f} MiB" if peak else ""
    reused = _metric(trial, TRIAL_REUSED_FROM) if trial.status == "COMPLETED" else None
    if reused is not None:
        source = f"trial {int(reused):0{len(trial.trial_id)}d}"
        score += (
            f" (identical to {source}: its score, speed and memory; nothing trained)"
            if timing is None
            else f" (reused from {source}: same effective batch and learning rate, exact "
            "accumulation; speed measured only)"
        )
    return (
        f"[tuner] trial {trial.trial_id}: accumulation_steps={steps} micro_batch={micro} "
        f"lr={lr:.2e} (effective batch {effective}) -> {score} [{trial.status}] "
        f"{seconds:.1f} s{speed}{timing.describe() if timing else ''}{message}"
    )


class NoTrialCheckpointMixin:
    """A trial trains as Keras Tuner's documented ``run_trial`` example does (build the
    model, fit it), without the ``SaveBestEpoch`` checkpoint that ``Tuner.run_trial`` adds.

    The checkpoint (the trial's best epoch's weights, written at every improving epoch) is
    read back only by ``get_best_models``/``load_model``, which TFX's Tuner never calls:
    the Trainer trains the best configuration from the start, so writing it at every
    improving epoch is time spent for nothing. Hyperband keeps it: a continued trial starts from its
    parent's checkpoint.
    """

    def run_trial(self, trial, *args, **kwargs):
        hp = trial.hyperparameters
        model = self.build_trial_model(hp)  # keras_tuner_adapter.NoSessionResetMixin
        return self.hypermodel.fit(hp, model, *args, **kwargs)


class AccumulationTuner(
    AccumulationTunerMixin, NoTrialCheckpointMixin, NoSessionResetMixin, keras_tuner.Tuner
):
    """Random and Bayesian search (the algorithm is the oracle's); no trial checkpoints
    (:class:`NoTrialCheckpointMixin`)."""


class AccumulationHyperband(AccumulationTunerMixin, NoSessionResetMixin, keras_tuner.Hyperband):
    """Hyperband: Keras Tuner's Hyperband tuner (epochs per round, weights carried from the
    trial it continues) with our oracle."""

    def __init__(self, oracle, hypermodel, parallel_trials: int = 1, worker_spec=None, **kwargs):
        # keras_tuner.Hyperband.__init__ only builds its own HyperbandOracle; ours is given.
        keras_tuner.Tuner.__init__(self, oracle=oracle, hypermodel=hypermodel, **kwargs)
        self.parallel_trials, self.worker_spec = parallel_trials, worker_spec


def make_oracle(space: SearchSpace, objective) -> keras_tuner.Oracle:
    """The oracle for ``space.algorithm``; failed trials never stop the search early."""
    common: dict[str, Any] = dict(
        objective=objective,
        seed=space.seed,
        max_retries_per_trial=0,
        max_consecutive_failed_trials=max(space.max_trials, 1000),
        space=space,
    )
    if space.algorithm == "random":
        return RandomSearchOracle(max_trials=space.max_trials, **common)
    if space.algorithm == "bayesian":
        return BayesianOptimizationOracle(
            max_trials=space.max_trials, num_initial_points=max(2, space.max_trials // 3), **common
        )
    return HyperbandOracle(
        max_epochs=space.tuning_epochs, factor=3, hyperband_iterations=1, **common
    )


def make_tuner(
    space: SearchSpace,
    hypermodel: AccumulationHyperModel,
    directory: str,
    strategy=None,
    resume: bool = False,
    parallel_trials: int = 1,
    worker_spec: dict | None = None,
) -> keras_tuner.Tuner:
    """The Keras Tuner for ``space.algorithm``.

    ``resume``: continue a search already in ``directory`` (Keras Tuner reloads its oracle
    and trials; finished trials are not run again, an interrupted one is run again).
    ``parallel_trials``, ``worker_spec``: see :class:`AccumulationTunerMixin`.
    """
    # Atomic state writes; a damaged state is set aside and rebuilt from the trial files.
    recovered = search_state.prepare(directory, PROJECT_NAME, resume)
    objective = keras_tuner.Objective(hypermodel.objective, direction=hypermodel.direction)
    oracle = make_oracle(space, objective)
    tuner_class = AccumulationHyperband if space.algorithm == "hyperband" else AccumulationTuner
    tuner = tuner_class(
        oracle=oracle,
        hypermodel=hypermodel,
        directory=directory,
        project_name=PROJECT_NAME,
        overwrite=not resume,
        distribution_strategy=strategy,
        parallel_trials=parallel_trials,
        worker_spec=worker_spec,
    )
    search_state.readmit(tuner, recovered)
    return tuner
