"""TFX Tuner module: Keras Tuner searches accumulation steps, micro-batch and learning rate.

Referenced from the pipeline as ``tuner_fn="tfx_accum.components.tuner.tuner_fn"``.

The three hyperparameters are searched jointly: ``accumulation_steps`` (k),
``micro_batch_size`` (m) and ``learning_rate``; a trial's effective batch is ``k * m``.
TFX batches its datasets once, so :class:`AccumulationHyperModel` batches the data itself
in ``fit`` (tfx #3591).

Budget rule: every trial sees the same number of training *examples*
(``tuning_epochs * examples_per_epoch``), not the same number of steps; a trial with a
larger effective batch makes fewer optimizer updates, which is the trade-off being tuned.

A trial that fails (out of memory, or an effective batch above ``max_effective_batch``) is
recorded as failed and the search goes on; the Tuner fails only if every trial fails.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import time
from collections.abc import Iterable
from typing import Any

import keras
import keras_tuner
import tensorflow as tf

from tfx_accum import console
from tfx_accum.components import parallel_search, search_state
from tfx_accum.components.data import Splits, batched, load_splits, location_for_inputs
from tfx_accum.components.keras_tuner_adapter import DeclaredSpaceMixin, NoSessionResetMixin
from tfx_accum.components.micro_batch_probe import fitting_micro_batches, gpu_present
from tfx_accum.components.models import build_model
from tfx_accum.components.peak_memory import PeakMemory
from tfx_accum.components.search_space import SearchSpace
from tfx_accum.components.settings import (
    EVAL_BATCH,
    HP_ACCUMULATION_STEPS,
    HP_LEARNING_RATE,
    HP_MICRO_BATCH_SIZE,
    RESPLIT_FROM_SPLIT,
    RESPLIT_FROM_TRIAL,
    RESPLIT_SPEEDUP,
    TRIAL_EXAMPLES,
    TRIAL_PEAK_MEMORY,
    TRIAL_REUSED_FROM,
    TRIAL_SPEED,
    ModelSettings,
    is_model_function,
)
from tfx_accum.components.strategy import (
    check_node_pool,
    choose_strategy,
    replica_plan,
    tpu_present,
)

OBJECTIVE = "val_accuracy"
PROJECT_NAME = "tfx_accum"  # Keras Tuner's project folder inside the search directory
_OURS = (HP_ACCUMULATION_STEPS, HP_MICRO_BATCH_SIZE, HP_LEARNING_RATE)


class AccumulationHyperModel(keras_tuner.HyperModel):
    """Builds the GA model for a trial and trains it at the trial's effective batch."""

    def __init__(
        self,
        space: SearchSpace,
        splits: Splits,
        model_name: str,
        replicas: int = 1,
    ):
        super().__init__(name="gradient_accumulation")
        self.space = space
        self.splits = splits
        self.model_name = model_name
        self.replicas = replicas
        self.last_timing: EpochTimes | None = None  # of the latest fit, for the trial line
        self._models: dict[int, tuple[keras.Model, list]] = {}  # k -> model, initial state

    def declare(self, hp: keras_tuner.HyperParameters) -> tuple[int, int, float]:
        steps = hp.Choice(
            HP_ACCUMULATION_STEPS, list(self.space.accumulation_steps_choices), ordered=True
        )
        micro = hp.Choice(HP_MICRO_BATCH_SIZE, list(self.space.micro_batch_choices), ordered=True)
        lr = hp.Float(
            HP_LEARNING_RATE,
            self.space.learning_rate_min,
            self.space.learning_rate_max,
            step=self.space.learning_rate_step,
            sampling="log",
        )
        return steps, micro, lr

    def declare_space(self, hp: keras_tuner.HyperParameters) -> None:
        """Declares the search space: ours, and a model function's own hyperparameters.

        A model function declares its own while it builds, so it is built once here (the
        model is cached for the first trial); a parallel search's chief has no data and
        leaves that to the workers (Keras Tuner takes new entries from trials).
        """
        self.declare(hp)
        if is_model_function(self.model_name) and self.splits is not None:
            self.build(hp)

    def build(self, hp: keras_tuner.HyperParameters):
        """The trial's model: compiled once per accumulation step count, then reused.

        Every trial starts from the same initial weights (seeded) and a fresh optimizer
        state; only ``k`` changes the model, so a model built and traced for one ``k`` is
        reset and reused by later trials with the same ``k`` (a different micro-batch only
        changes the batch size, a different learning rate is a variable). Tracing the
        training step was most of a small trial's time.
        """
        steps, micro, lr = self.declare(hp)
        k = replica_plan(steps, micro, self.replicas).steps_per_replica
        # A model function may declare hyperparameters of its own: they shape the model.
        own = tuple(
            sorted(
                (n, v)
                for n, v in hp.values.items()
                if n not in _OURS and not n.startswith("tuner/")
            )
        )
        if (k, own) not in self._models:
            keras.utils.set_random_seed(self.space.seed)
            model = build_model(self.model_name, self.splits.data, k, lr, hp=hp)
            model.optimizer.build(model.trainable_variables)
            state = [v.numpy() for v in (*model.variables, *model.optimizer.variables)]
            self._models[(k, own)] = (model, state)
        model, state = self._models[(k, own)]
        for variable, value in zip((*model.variables, *model.optimizer.variables), state):
            variable.assign(value)
        model.optimizer.learning_rate = lr
        return model

    def fit(self, hp: keras_tuner.HyperParameters, model, *args, **kwargs):
        steps, micro = hp.get(HP_ACCUMULATION_STEPS), hp.get(HP_MICRO_BATCH_SIZE)
        plan = replica_plan(steps, micro, self.replicas)
        batch = plan.global_batch
        limit = self.space.max_effective_batch
        if limit is not None and batch > limit:
            raise keras_tuner.errors.FailedTrialError(
                f"effective batch {steps} x {micro} = {batch} exceeds max_effective_batch={limit}"
            )
        examples = self.space.examples_per_epoch or self.splits.train_size
        epochs = kwargs.pop("epochs", self.space.tuning_epochs)
        kwargs.pop("x", None)
        kwargs.pop("validation_data", None)
        steps_per_epoch = math.ceil(examples / batch)
        train = batched(self.splits.train, batch, shuffle_seed=self.space.seed)
        validation = self.splits.eval.batch(EVAL_BATCH)
        timing = EpochTimes(batch)
        kwargs["callbacks"] = [*kwargs.get("callbacks", []), timing]
        memory = PeakMemory()
        memory.reset()
        try:
            history = model.fit(
                train,
                steps_per_epoch=steps_per_epoch,
                epochs=epochs,
                validation_data=validation,
                verbose=0,
                **kwargs,
            )
        except tf.errors.ResourceExhaustedError as error:
            raise keras_tuner.errors.FailedTrialError(
                f"out of memory with micro-batch {micro} (x{steps} steps): {error.message[:200]}"
            ) from error
        self.last_timing = timing
        # Speed and memory ride along as metrics: Keras Tuner keeps them with the trial
        # (trial.json, and over gRPC from a parallel worker to the chief's oracle).
        done = len(history.history.get(OBJECTIVE, []))
        extra = {
            TRIAL_SPEED: timing.examples_per_second(),
            TRIAL_PEAK_MEMORY: memory.peak_mb(),
            TRIAL_EXAMPLES: float(timing.examples),
        }
        for name, value in extra.items():
            if value is not None:
                history.history[name] = [value] * done
        return history

    def measure_speed(self, hp: keras_tuner.HyperParameters, model, updates: int = 10) -> dict:
        """Throughput and peak memory of ``hp``'s split over a few updates, without scoring.

        For an exact duplicate (see :func:`duplicate_key`): its score is known, its speed
        and memory at this split are not. Timed as a trial's steps are (:class:`EpochTimes`).
        """
        plan = replica_plan(
            hp.get(HP_ACCUMULATION_STEPS), hp.get(HP_MICRO_BATCH_SIZE), self.replicas
        )
        train = batched(self.splits.train, plan.global_batch, shuffle_seed=self.space.seed)
        timing = EpochTimes(plan.global_batch)
        memory = PeakMemory()
        memory.reset()
        try:
            model.fit(train, steps_per_epoch=updates, epochs=1, verbose=0, callbacks=[timing])
        except tf.errors.ResourceExhaustedError as error:
            raise keras_tuner.errors.FailedTrialError(
                f"out of memory with micro-batch {hp.get(HP_MICRO_BATCH_SIZE)}: "
                f"{error.message[:200]}"
            ) from error
        self.last_timing = timing
        return {
            name: value
            for name, value in {
                TRIAL_SPEED: timing.examples_per_second(),
                TRIAL_PEAK_MEMORY: memory.peak_mb(),
            }.items()
            if value is not None
        }

    def probe_micro_batches(self, try_step=None) -> tuple[int, ...]:
        """Drops micro-batch choices that do not fit the device; returns the dropped ones.

        ``try_step(m)`` defaults to one training step of the model at micro-batch ``m``
        with the largest accumulation step count (the accumulators take memory too).
        """
        if try_step is None:
            try_step = self._one_step
        kept, dropped = fitting_micro_batches(self.space.micro_batch_choices, try_step)
        if dropped:
            self.space = self.space.with_micro_batches(kept)
            self._models.clear()
        return dropped

    def _one_step(self, micro: int) -> None:
        hp = keras_tuner.HyperParameters()
        steps = max(self.space.accumulation_steps_choices)
        hp.values = {
            HP_ACCUMULATION_STEPS: steps,
            HP_MICRO_BATCH_SIZE: micro,
            HP_LEARNING_RATE: self.space.learning_rate_min,
        }
        model = self.build(hp)
        batch = replica_plan(steps, micro, self.replicas).global_batch
        x, y = next(iter(self.splits.train.repeat().batch(batch)))
        model.train_on_batch(x, y)


class EpochTimes(keras.callbacks.Callback):
    """Where a trial's time goes, and its steady training throughput.

    Throughput is measured between consecutive training steps of an epoch: the first step
    of each epoch (tracing, the input pipeline's start) and validation are left out, so
    that a one-epoch trial and a short speed measurement compare fairly.
    """

    def __init__(self, batch: int = 0):
        super().__init__()
        self.batch = batch

    def on_train_begin(self, logs=None):
        self.start = time.monotonic()
        self.epochs: list[float] = []
        self.examples = 0
        self.steady_steps, self.steady_seconds = 0, 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._last_step = None

    def on_train_batch_end(self, batch, logs=None):
        now = time.monotonic()
        self.examples += self.batch
        if self._last_step is not None:
            self.steady_steps += 1
            self.steady_seconds += now - self._last_step
        self._last_step = now

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(time.monotonic() - self.start - sum(self.epochs))

    def examples_per_second(self) -> float | None:
        if not self.steady_steps or self.steady_seconds <= 0:
            return None
        return self.steady_steps * self.batch / self.steady_seconds

    def describe(self) -> str:
        if not self.epochs:
            return ""
        rest = self.epochs[1:]
        later = f", later epochs {sum(rest) / len(rest):.1f} each" if rest else ""
        return f" (fit {sum(self.epochs):.1f}: first epoch {self.epochs[0]:.1f}{later})"


def duplicate_key(values: dict[str, Any]) -> tuple:
    """What determines the model a trial trains, given exact accumulation.

    Two trials with the same effective batch ``k x m``, learning rate and every other value
    (Hyperband's epochs, for one), in one search (same initial weights and data order),
    train the same model: the split between ``k`` and ``m`` changes memory and speed only.
    """
    k, m = values.get(HP_ACCUMULATION_STEPS), values.get(HP_MICRO_BATCH_SIZE)
    rest = tuple(
        sorted(
            (name, round(value, 12) if isinstance(value, float) else value)
            for name, value in values.items()
            if name not in (HP_ACCUMULATION_STEPS, HP_MICRO_BATCH_SIZE)
        )
    )
    return (k * m if k and m else None, rest)


def _metric(trial, name: str) -> float | None:
    if trial.metrics.exists(name):
        value = trial.metrics.get_last_value(name)
        return None if value is None else float(value)
    return None


def fastest_split(trials: Iterable) -> tuple[Any, Any] | None:
    """``(best, fastest)``: the best trial, and the fastest trial that trains the same model.

    ``fastest`` has the best trial's :func:`duplicate_key` (same effective batch and
    learning rate) and the highest measured examples/s, so it is feasible (it ran) and,
    because accumulation is exact, trains the same weights faster. ``None`` if no trial
    completed.
    """
    completed = [t for t in trials if t.status == "COMPLETED" and t.score is not None]
    if not completed:
        return None
    # Ties (a reused score equals its source's): the trial that was trained counts.
    best = max(
        completed,
        key=lambda t: (t.score, _metric(t, TRIAL_REUSED_FROM) is None, -int(t.trial_id)),
    )
    key = duplicate_key(best.hyperparameters.values)
    same = [t for t in completed if duplicate_key(t.hyperparameters.values) == key]
    fastest = max(same, key=lambda t: (_metric(t, TRIAL_SPEED) or 0.0, t is best))
    return best, fastest


class _ReportingMixin:
    """One line per finished trial, exact-duplicate reuse, parallel workers, the best split.

    - A trial that would train the same model as a finished one (:func:`duplicate_key`)
      reuses its score and only measures its own speed and memory (``reused_from``).
    - With ``parallel_trials`` > 1, :meth:`search` hosts the oracle and runs the trials in
      worker processes (:mod:`components.parallel_search`).
    - :meth:`get_best_hyperparameters` returns the best trial's values with the fastest
      measured split of its effective batch (:func:`fastest_split`).
    """

    parallel_trials: int = 1
    worker_spec: dict | None = None  # what a worker process needs to rebuild this tuner

    def on_trial_begin(self, trial):
        self._trial_started = time.monotonic()
        self.hypermodel.last_timing = None
        super().on_trial_begin(trial)

    def run_trial(self, trial, *args, **kwargs):
        source = self._finished_duplicate(trial)
        if source is None:
            return super().run_trial(trial, *args, **kwargs)
        model = self.hypermodel.build(trial.hyperparameters)
        speed = self.hypermodel.measure_speed(trial.hyperparameters, model)
        examples = _metric(source, TRIAL_EXAMPLES)
        return {
            OBJECTIVE: float(source.score),
            **speed,
            **({TRIAL_EXAMPLES: examples} if examples is not None else {}),
            TRIAL_REUSED_FROM: float(int(source.trial_id)),
        }

    def _finished_duplicate(self, trial):
        if not self.hypermodel.space.reuse_exact_duplicates:
            return None
        key = duplicate_key(trial.hyperparameters.values)
        for done in self.oracle.get_best_trials(10**6):  # completed trials (also over gRPC)
            if (
                done.trial_id != trial.trial_id
                and done.score is not None
                and duplicate_key(done.hyperparameters.values) == key
            ):
                return done
        return None

    def on_trial_end(self, trial):
        seconds = time.monotonic() - getattr(self, "_trial_started", time.monotonic())
        timing = getattr(self.hypermodel, "last_timing", None)
        super().on_trial_end(trial)
        if parallel_search.is_worker():
            # The chief's oracle scored it; this process's copy has neither score nor metrics.
            trial = self.oracle.get_trial(trial.trial_id)
        values = trial.hyperparameters.values
        steps, micro = values.get(HP_ACCUMULATION_STEPS), values.get(HP_MICRO_BATCH_SIZE)
        lr = values.get(HP_LEARNING_RATE)
        effective = steps * micro if steps and micro else "?"
        score = f"{OBJECTIVE}={trial.score:.4f}" if trial.score is not None else "no score"
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
            score += (
                f" (reused from trial {int(reused):0{len(trial.trial_id)}d}: same effective "
                "batch and learning rate, exact accumulation; speed measured only)"
            )
        console.say(
            f"[tuner] trial {trial.trial_id}: accumulation_steps={steps} micro_batch={micro} "
            f"lr={lr:.2e} (effective batch {effective}) -> {score} [{trial.status}] "
            f"{seconds:.1f} s{speed}{timing.describe() if timing else ''}{message}"
        )

    def search(self, *args, **kwargs):
        if parallel_search.is_worker():
            return super().search(*args, **kwargs)  # asks the chief's oracle for trials
        if self.parallel_trials > 1 and self.worker_spec is not None:
            parallel_search.run_workers(self, self.parallel_trials, self.worker_spec)
        else:
            super().search(*args, **kwargs)
        trials = list(self.oracle.trials.values())
        if self.oracle.max_trials is None:
            # Hyperband's oracle has no trial limit; TFX's write_best_hyperparameters
            # ranks get_best_trials(oracle.max_trials) and fails on None.
            self.oracle.max_trials = len(trials)
        if not any(t.status == "COMPLETED" for t in trials):
            last = next((t.message for t in reversed(trials) if t.message), "no trial ran")
            raise RuntimeError(
                f"All {len(trials)} tuning trials failed, so there are no best "
                "hyperparameters. Last failure: "
                f"{last.strip().splitlines()[-1] if last else last}. Try smaller "
                "micro_batch_choices, or a larger max_effective_batch."
            )
        self._report_results(trials)

    def _report_results(self, trials: list) -> None:
        """Says what the search saved and which split the Trainer gets; annotates results.

        TFX writes ``tuner_results.json`` rows as ``trial_id``, ``score`` and the trial's
        hyperparameter values, so each trial's speed, memory, examples and reuse are added
        to (copies of) its values as fixed entries; the oracle's own state is untouched.
        """
        reused = [t for t in trials if _metric(t, TRIAL_REUSED_FROM) is not None]
        if reused:
            console.say(
                f"[tuner] {len(reused)} of {len(trials)} trial(s) were exact duplicates of a "
                "finished trial (same effective batch and learning rate): their scores were "
                "reused, not retrained"
            )
        choice = fastest_split(trials)
        self._best = None
        if choice is not None:
            best, fastest = choice
            hp = best.hyperparameters.copy()
            split = (HP_ACCUMULATION_STEPS, HP_MICRO_BATCH_SIZE)
            if [fastest.hyperparameters.get(n) for n in split] != [hp.get(n) for n in split]:
                speedup = (_metric(fastest, TRIAL_SPEED) or 0) / max(
                    _metric(best, TRIAL_SPEED) or 0, 1e-9
                )
                old = f"{hp.get(HP_ACCUMULATION_STEPS)} x {hp.get(HP_MICRO_BATCH_SIZE)}"
                new_k = fastest.hyperparameters.get(HP_ACCUMULATION_STEPS)
                new_m = fastest.hyperparameters.get(HP_MICRO_BATCH_SIZE)
                hp.values[HP_ACCUMULATION_STEPS], hp.values[HP_MICRO_BATCH_SIZE] = new_k, new_m
                hp.Fixed(RESPLIT_FROM_TRIAL, best.trial_id)
                hp.Fixed(RESPLIT_FROM_SPLIT, old)
                hp.Fixed(RESPLIT_SPEEDUP, round(speedup, 3))
                console.say(
                    f"[tuner] best: trial {best.trial_id} ({old}, effective batch "
                    f"{new_k * new_m}); trial {fastest.trial_id} ran the same effective batch "
                    f"and learning rate as {new_k} x {new_m} {speedup:.2f}x faster. "
                    "Accumulation is exact, so that split trains the same model: the "
                    "Trainer uses it"
                )
            self._best = hp
        annotated = []
        for trial in trials:
            copy_ = copy.copy(trial)
            copy_.hyperparameters = trial.hyperparameters.copy()
            for name in (TRIAL_EXAMPLES, TRIAL_SPEED, TRIAL_PEAK_MEMORY, TRIAL_REUSED_FROM):
                value = _metric(trial, name)
                if value is not None:
                    copy_.hyperparameters.Fixed(name, round(value, 3))
            annotated.append(copy_)
        oracle_best = self.oracle.get_best_trials
        by_id = {t.trial_id: t for t in annotated}
        self.oracle.get_best_trials = lambda num_trials=1: [
            by_id[t.trial_id] for t in oracle_best(num_trials)
        ]

    def get_best_hyperparameters(self, num_trials=1):
        """The best trial's values, with the fastest split of its effective batch first."""
        found = super().get_best_hyperparameters(num_trials)
        best = getattr(self, "_best", None)
        if best is None or not found:
            return found
        return [best, *found[1:]]


class RandomSearch(
    _ReportingMixin, DeclaredSpaceMixin, NoSessionResetMixin, keras_tuner.RandomSearch
):
    pass


class BayesianOptimization(
    _ReportingMixin, DeclaredSpaceMixin, NoSessionResetMixin, keras_tuner.BayesianOptimization
):
    pass


class Hyperband(_ReportingMixin, DeclaredSpaceMixin, NoSessionResetMixin, keras_tuner.Hyperband):
    pass


def fit_effective_batch_limit(values: dict[str, Any], space: SearchSpace) -> dict[str, Any]:
    """``values`` with ``k x m`` within ``space.max_effective_batch``.

    A proposal above the limit becomes the nearest one that fits: the same micro-batch with
    the largest accumulation step count that fits, else the largest effective batch that
    fits (SearchSpace guarantees one exists). The learning rate is kept.
    """
    limit = space.max_effective_batch
    k, m = values.get(HP_ACCUMULATION_STEPS), values.get(HP_MICRO_BATCH_SIZE)
    if limit is None or k is None or m is None or k * m <= limit:
        return values
    fits = [
        (kk, mm)
        for kk in space.accumulation_steps_choices
        for mm in space.micro_batch_choices
        if kk * mm <= limit
    ]
    k, m = max(fits, key=lambda pair: (pair[1] == m, pair[0] * pair[1], pair[1]))
    return {**values, HP_ACCUMULATION_STEPS: k, HP_MICRO_BATCH_SIZE: m}


def _shape_proposals(oracle: keras_tuner.Oracle, space: SearchSpace) -> None:
    """Makes ``oracle`` propose only combinations within the effective-batch limit.

    ``Oracle.populate_space`` is where every algorithm proposes a trial's values; wrapping
    it on the instance works for the random, Bayesian and Hyperband oracles alike.
    """
    if space.max_effective_batch is None:
        return
    propose = oracle.populate_space

    def populate_space(trial_id):
        result = propose(trial_id)
        if result.get("values"):
            result["values"] = fit_effective_batch_limit(result["values"], space)
        return result

    oracle.populate_space = populate_space


def make_tuner(
    space: SearchSpace,
    hypermodel: AccumulationHyperModel,
    directory: str,
    strategy: tf.distribute.Strategy | None = None,
    resume: bool = False,
) -> keras_tuner.Tuner:
    """The Keras Tuner for ``space.algorithm``; failures never stop the search early.

    ``resume``: continue a search already in ``directory`` (Keras Tuner reloads its oracle
    and trials; finished trials are not run again, an interrupted one is run again).
    """
    # Atomic state writes; a damaged state is set aside and rebuilt from the trial files.
    recovered = search_state.prepare(directory, PROJECT_NAME, resume)
    common: dict[str, Any] = dict(
        hypermodel=hypermodel,
        objective=keras_tuner.Objective(OBJECTIVE, direction="max"),
        directory=directory,
        project_name=PROJECT_NAME,
        seed=space.seed,
        overwrite=not resume,
        max_retries_per_trial=0,
        max_consecutive_failed_trials=max(space.max_trials, 1000),
        distribution_strategy=strategy,
    )
    if space.algorithm == "random":
        tuner = RandomSearch(max_trials=space.max_trials, **common)
    elif space.algorithm == "bayesian":
        tuner = BayesianOptimization(
            max_trials=space.max_trials,
            num_initial_points=max(2, space.max_trials // 3),
            **common,
        )
    else:
        tuner = Hyperband(
            max_epochs=space.tuning_epochs, factor=3, hyperband_iterations=1, **common
        )
    _shape_proposals(tuner.oracle, space)
    search_state.readmit(tuner, recovered)
    return tuner


def search_location(fn_args, space: SearchSpace, settings: ModelSettings) -> str | None:
    """A directory for the search that is the same whenever its inputs are the same.

    TFX gives every execution a new working directory, so a Tuner killed mid-search (a
    preempted pod, Ctrl-C) would start over. Under ``custom_config["search_root"]``
    (``<pipeline_root>/_search`` from create_pipeline) the search lives in a folder named
    by a hash of the examples, the schema, the search space and the model settings, and a
    rerun with the same inputs continues it. ``None`` without a search root.
    """
    root = (fn_args.custom_config or {}).get("search_root")
    if not root:
        return None
    return location_for_inputs(
        root, "search", fn_args, space=space.to_config(), model=settings.to_custom_config()
    )


def tuner_fn(fn_args):
    """TFX entry point: returns the tuner and the arguments of ``tuner.search``.

    With ``custom_config["parallel_trials"]`` > 1 this process is the chief of a parallel
    search (:mod:`components.parallel_search`): it trains nothing and loads no data; the
    workers do both.
    """
    logging.getLogger("keras_tuner").setLevel(logging.WARNING)
    settings = ModelSettings.from_custom_config(fn_args.custom_config)
    space = SearchSpace.from_config((fn_args.custom_config or {}).get("search_space"))
    workers = parallel_search.parallel_trials(fn_args.custom_config)
    directory = search_location(fn_args, space, settings)
    if workers > 1:
        check_node_pool()
        if tpu_present():
            raise ValueError(
                f"parallel_trials={workers} needs GPUs or CPUs: a TPU host serves one "
                "process. Set parallel_trials to 1 for TPU node pools."
            )
        if gpu_present():
            space = _probe_in_subprocess(fn_args, space, directory or fn_args.working_dir)
        hypermodel = AccumulationHyperModel(space, None, settings.model)
        budget = f"{space.examples_per_epoch or 'the training split'}"
    else:
        strategy = choose_strategy()
        splits = load_splits(fn_args, settings.label_key, settings.num_classes)
        hypermodel = AccumulationHyperModel(
            space, splits, settings.model, strategy.num_replicas_in_sync
        )
        if gpu_present():
            _say_dropped(hypermodel.probe_micro_batches())
            space = hypermodel.space
        budget = f"{space.examples_per_epoch or splits.train_size}"
    console.say(
        f"[tuner] {space.algorithm} search over accumulation steps "
        f"{list(space.accumulation_steps_choices)}, "
        f"micro-batch {list(space.micro_batch_choices)}, learning rate "
        f"[{space.learning_rate_min:g}, {space.learning_rate_max:g}] (log"
        + (f", x{space.learning_rate_step:.3g} steps" if space.learning_rate_step else "")
        + f"); budget {space.tuning_epochs} x {budget} examples per trial"
        + (f"; {workers} trials at a time" if workers > 1 else "")
    )
    tuner = make_tuner(
        space,
        hypermodel,
        directory or fn_args.working_dir,
        strategy if workers == 1 and strategy.num_replicas_in_sync > 1 else None,
        resume=directory is not None,
    )
    if workers > 1:
        tuner.parallel_trials = workers
        tuner.worker_spec = parallel_search.worker_spec(
            fn_args, directory or fn_args.working_dir, space.to_config()
        )
    done = [t for t in tuner.oracle.trials.values() if t.status == "COMPLETED"]
    if done:
        console.say(
            f"[tuner] resuming the search in {directory}: {len(done)} trial(s) already "
            "finished are not run again"
        )
    from tfx.components.tuner.component import TunerFnResult  # TFX is loaded: its executor runs

    return TunerFnResult(tuner=tuner, fit_kwargs={"epochs": space.tuning_epochs})


def worker_tuner(fn_args, spec: dict) -> tuple[keras_tuner.Tuner, dict]:
    """The tuner of a parallel-search worker (``components/tuner_worker.py``)."""
    settings = ModelSettings.from_custom_config(fn_args.custom_config)
    space = SearchSpace.from_config(spec["search_space"])  # as the chief probed it
    if spec.get("probe"):
        # Only the memory probe, for a chief that must not touch the GPU itself.
        splits = load_splits(fn_args, settings.label_key, settings.num_classes)
        hypermodel = AccumulationHyperModel(space, splits, settings.model)
        hypermodel.probe_micro_batches()
        print(json.dumps({"micro_batch_choices": list(hypermodel.space.micro_batch_choices)}))
        return None, {}
    strategy = choose_strategy()
    splits = load_splits(fn_args, settings.label_key, settings.num_classes)
    hypermodel = AccumulationHyperModel(
        space, splits, settings.model, strategy.num_replicas_in_sync
    )
    tuner = make_tuner(space, hypermodel, spec["directory"], None, resume=True)
    return tuner, {"epochs": space.tuning_epochs}


def _say_dropped(dropped: tuple[int, ...]) -> None:
    if dropped:
        console.say(
            f"[tuner] micro-batch {', '.join(map(str, dropped))} dropped: a training step "
            "runs out of device memory (memory probe)"
        )


def _probe_in_subprocess(fn_args, space: SearchSpace, directory: str) -> SearchSpace:
    """The memory probe in a process of its own, so the chief holds no GPU memory."""
    import subprocess
    import sys
    import tempfile

    spec = parallel_search.worker_spec(fn_args, directory, space.to_config())
    spec["probe"] = True
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(spec, handle)
    result = subprocess.run(
        [sys.executable, "-m", "tfx_accum.components.tuner_worker", handle.name],
        capture_output=True,
        text=True,
        check=False,
    )
    os.unlink(handle.name)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(
            "The micro-batch memory probe failed: "
            + ((result.stderr or result.stdout).strip().splitlines() or ["no output"])[-1]
        )
    kept = tuple(json.loads(lines[-1])["micro_batch_choices"])
    _say_dropped(tuple(m for m in space.micro_batch_choices if m not in kept))
    return space.with_micro_batches(kept)
