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

import logging
import math
import time
from typing import Any

import keras
import keras_tuner
import tensorflow as tf
from tfx import v1 as tfx

from tfx_accum import console
from tfx_accum.components.data import Splits, batched, load_splits, location_for_inputs
from tfx_accum.components.keras_tuner_adapter import NoSessionResetMixin
from tfx_accum.components.models import build_model
from tfx_accum.components.search_space import SearchSpace
from tfx_accum.components.settings import (
    EVAL_BATCH,
    HP_ACCUMULATION_STEPS,
    HP_LEARNING_RATE,
    HP_MICRO_BATCH_SIZE,
    ModelSettings,
)
from tfx_accum.components.strategy import choose_strategy, replica_plan

OBJECTIVE = "val_accuracy"


class AccumulationHyperModel(keras_tuner.HyperModel):
    """Builds the GA model for a trial and trains it at the trial's effective batch."""

    def __init__(
        self,
        space: SearchSpace,
        splits: Splits,
        model_name: str,
        num_classes: int,
        replicas: int = 1,
    ):
        super().__init__(name="gradient_accumulation")
        self.space = space
        self.splits = splits
        self.model_name = model_name
        self.num_classes = num_classes
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
            sampling="log",
        )
        return steps, micro, lr

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
        if k not in self._models:
            keras.utils.set_random_seed(self.space.seed)
            model = build_model(
                self.model_name,
                self.splits.keys,
                self.num_classes,
                k,
                lr,
                self.splits.mean,
                self.splits.variance,
            )
            model.optimizer.build(model.trainable_variables)
            state = [v.numpy() for v in (*model.variables, *model.optimizer.variables)]
            self._models[k] = (model, state)
        model, state = self._models[k]
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
        train = batched(self.splits.train, batch, shuffle_seed=self.space.seed)
        validation = self.splits.eval.batch(EVAL_BATCH)
        timing = EpochTimes()
        kwargs["callbacks"] = [*kwargs.get("callbacks", []), timing]
        try:
            history = model.fit(
                train,
                steps_per_epoch=math.ceil(examples / batch),
                epochs=epochs,
                validation_data=validation,
                verbose=0,
                **kwargs,
            )
            self.last_timing = timing
            return history
        except tf.errors.ResourceExhaustedError as error:
            raise keras_tuner.errors.FailedTrialError(
                f"out of memory with micro-batch {micro} (x{steps} steps): {error.message[:200]}"
            ) from error


class EpochTimes(keras.callbacks.Callback):
    """Where a trial's time goes: ``fit`` in all, and its first epoch (tracing included)."""

    def on_train_begin(self, logs=None):
        self.start = time.monotonic()
        self.epochs: list[float] = []

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(time.monotonic() - self.start - sum(self.epochs))

    def describe(self) -> str:
        if not self.epochs:
            return ""
        rest = self.epochs[1:]
        later = f", later epochs {sum(rest) / len(rest):.1f} each" if rest else ""
        return f" (fit {sum(self.epochs):.1f}: first epoch {self.epochs[0]:.1f}{later})"


class _ReportingMixin:
    """Prints one line per finished trial and fails clearly if every trial failed."""

    def on_trial_begin(self, trial):
        self._trial_started = time.monotonic()
        self.hypermodel.last_timing = None
        super().on_trial_begin(trial)

    def on_trial_end(self, trial):
        seconds = time.monotonic() - getattr(self, "_trial_started", time.monotonic())
        timing = getattr(self.hypermodel, "last_timing", None)
        super().on_trial_end(trial)
        values = trial.hyperparameters.values
        steps, micro = values.get(HP_ACCUMULATION_STEPS), values.get(HP_MICRO_BATCH_SIZE)
        lr = values.get(HP_LEARNING_RATE)
        effective = steps * micro if steps and micro else "?"
        score = f"{OBJECTIVE}={trial.score:.4f}" if trial.score is not None else "no score"
        message = ""
        if trial.status != "COMPLETED" and trial.message:
            message = " - " + trial.message.strip().splitlines()[-1][:160]
        console.say(
            f"[tuner] trial {trial.trial_id}: accumulation_steps={steps} micro_batch={micro} "
            f"lr={lr:.2e} (effective batch {effective}) -> {score} [{trial.status}] "
            f"{seconds:.1f} s{timing.describe() if timing else ''}{message}"
        )

    def search(self, *args, **kwargs):
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


class RandomSearch(_ReportingMixin, NoSessionResetMixin, keras_tuner.RandomSearch):
    pass


class BayesianOptimization(_ReportingMixin, NoSessionResetMixin, keras_tuner.BayesianOptimization):
    pass


class Hyperband(_ReportingMixin, NoSessionResetMixin, keras_tuner.Hyperband):
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
    common: dict[str, Any] = dict(
        hypermodel=hypermodel,
        objective=keras_tuner.Objective(OBJECTIVE, direction="max"),
        directory=directory,
        project_name="tfx_accum",
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


def tuner_fn(fn_args: tfx.components.FnArgs) -> tfx.components.TunerFnResult:
    """TFX entry point: returns the tuner and the arguments of ``tuner.search``."""
    logging.getLogger("keras_tuner").setLevel(logging.WARNING)
    settings = ModelSettings.from_custom_config(fn_args.custom_config)
    space = SearchSpace.from_config((fn_args.custom_config or {}).get("search_space"))
    strategy = choose_strategy()
    splits = load_splits(fn_args, settings.label_key)
    console.say(
        f"[tuner] {space.algorithm} search over accumulation steps "
        f"{list(space.accumulation_steps_choices)}, "
        f"micro-batch {list(space.micro_batch_choices)}, learning rate "
        f"[{space.learning_rate_min:g}, {space.learning_rate_max:g}] (log); "
        f"budget {space.tuning_epochs} x "
        f"{space.examples_per_epoch or splits.train_size} examples per trial"
    )
    hypermodel = AccumulationHyperModel(
        space, splits, settings.model, settings.num_classes, strategy.num_replicas_in_sync
    )
    directory = search_location(fn_args, space, settings)
    tuner = make_tuner(
        space,
        hypermodel,
        directory or fn_args.working_dir,
        strategy if strategy.num_replicas_in_sync > 1 else None,
        resume=directory is not None,
    )
    done = [t for t in tuner.oracle.trials.values() if t.status == "COMPLETED"]
    if done:
        console.say(
            f"[tuner] resuming the search in {directory}: {len(done)} trial(s) already "
            "finished are not run again"
        )
    return tfx.components.TunerFnResult(tuner=tuner, fit_kwargs={"epochs": space.tuning_epochs})
