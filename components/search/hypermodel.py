"""The Keras Tuner HyperModel: a trial's GA model, trained at the trial's effective batch.

TFX batches its datasets once, so :class:`AccumulationHyperModel` batches the data itself
in ``fit`` (https://github.com/tensorflow/tfx/issues/3591). Budget rule
(``search_policy.steps_per_epoch``): every trial sees the same number of training *examples*
(``tuning_epochs * examples_per_epoch``), not the same number of steps; a trial with a larger
effective batch makes fewer optimizer updates, which is the trade-off being tuned.

Example:

```python
hypermodel = AccumulationHyperModel(space, splits, "mlp")
model = hypermodel.build(hp)          # cached per model, reset to the seeded start
history = hypermodel.fit(hp, model)   # one trial
```
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
import time

import keras
import keras_tuner
import tensorflow as tf

from tfx_accum import console
from tfx_accum.components.accumulation.strategy import ReplicaPlan, replica_plan
from tfx_accum.components.config.hyperparameters import (
    HP_ACCUMULATION_STEPS,
    HP_LEARNING_RATE,
    HP_MICRO_BATCH_SIZE,
)
from tfx_accum.components.config.search_space import SearchSpace, exceeds_effective_batch_limit
from tfx_accum.components.config.settings import DEFAULT_PRECISION, EVAL_BATCH
from tfx_accum.components.config.tasks import OBJECTIVES
from tfx_accum.components.config.trial_records import (
    TRIAL_EXAMPLES,
    TRIAL_PEAK_MEMORY,
    TRIAL_SCORED_ON,
    TRIAL_SPEED,
)
from tfx_accum.components.data.datasets import (
    HeldInMemory,
    Splits,
    batched,
    fits_in_memory,
    held_parts,
    stream_reads,
)
from tfx_accum.components.data.features import DataDescription
from tfx_accum.components.models.models import build_model, ready_to_trace
from tfx_accum.components.models.non_finite import StopOnNonFiniteLoss
from tfx_accum.components.search.micro_batch_probe import fitting_micro_batches
from tfx_accum.components.search.peak_memory import PeakMemory
from tfx_accum.components.search.search_policy import steps_per_epoch
from tfx_accum.components.search.trial_timing import EpochTimes

_OURS = (HP_ACCUMULATION_STEPS, HP_MICRO_BATCH_SIZE, HP_LEARNING_RATE)


def _own_values(hp: keras_tuner.HyperParameters) -> tuple:
    """A model function's own hyperparameter values: they shape the model."""
    return tuple(
        sorted(
            (n, v) for n, v in hp.values.items() if n not in _OURS and not n.startswith("tuner/")
        )
    )


class AccumulationHyperModel(keras_tuner.HyperModel):
    """Builds the GA model for a trial and trains it at the trial's effective batch.

    ``splits`` is None in a parallel search's chief, which trains nothing and loads no data:
    there :meth:`build` only declares the search space, and ``data`` (the description)
    says what the objective is. The objective follows the task (``tasks.OBJECTIVES``).
    ``precision``: the Keras dtype policy of the trials' models (and of the memory probe's,
    which trains them).
    """

    def __init__(
        self,
        space: SearchSpace,
        splits: Splits | None,
        model_name: str,
        replicas: int = 1,
        data: DataDescription | None = None,
        precision: str = DEFAULT_PRECISION,
        model_hyperparameters: str | None = None,
    ):
        super().__init__(name="gradient_accumulation")
        self.space = space
        self.splits = splits
        self.data = data if data is not None else splits.data
        self.objective, self.direction = OBJECTIVES[self.data.task]
        self.model_name = model_name
        self.replicas = replicas
        self.precision = precision  # the Keras dtype policy every trial's model is built under
        # custom_config['model_hyperparameters']: the model function's own, declared elsewhere
        self.model_hyperparameters = model_hyperparameters
        self.last_timing: EpochTimes | None = None  # of the latest fit, for the trial line
        self._models: dict[tuple, tuple[keras.Model, list]] = {}  # own values -> model, state
        self._held: tuple[HeldInMemory | None, HeldInMemory | None] | None = None

    def declare_hyperparameters(self, hp: keras_tuner.HyperParameters) -> None:
        """Keras Tuner's hook for the space: ours (a model function declares its own as it
        builds; Keras Tuner builds once after this to find them), and those
        ``custom_config['model_hyperparameters']`` declares."""
        self.space.declare(hp)
        if self.model_hyperparameters:
            from tfx_accum.components.models.model_function import (
                ModelFunction,
                declare_model_hyperparameters,
            )

            model = ModelFunction.load(
                self.model_name, model_hyperparameters=self.model_hyperparameters
            )
            declare_model_hyperparameters(hp, model)

    def plan(self, hp: keras_tuner.HyperParameters) -> ReplicaPlan:
        """The trial's ``k`` and ``m`` shared among this process's replicas."""
        return replica_plan(
            hp.get(HP_ACCUMULATION_STEPS), hp.get(HP_MICRO_BATCH_SIZE), self.replicas
        )

    def build(self, hp: keras_tuner.HyperParameters):
        """The trial's model: built, compiled and traced once, then reset for every trial.

        Every trial starts from the same initial weights (seeded) and a fresh optimizer
        state. Accumulation is exact whatever ``k``, so ``k`` is a setting of the one
        model (``gradient_accumulation_steps``, read by the traced step from a variable:
        no retrace), the micro-batch only changes the batch size (the batch dimension of
        the traced step is unknown), and the learning rate is a variable: one traced
        training step serves the whole search (``trace_count``). Under XLA, where ``k``
        fixes the compiled shapes, each new ``k`` compiles the step again. A model
        function's own hyperparameters shape the model: one model per their values.
        Returns None without data (a parallel search's chief: the space is declared, no
        model is put on a device).
        """
        _, _, lr = self.space.declare(hp)
        if self.splits is None:
            return None
        k = self.plan(hp).steps_per_replica
        key = _own_values(hp)
        if key not in self._models:
            keras.utils.set_random_seed(self.space.seed)
            model = build_model(
                self.model_name,
                self.splits.data,
                k,
                lr,
                hp=hp,
                precision=self.precision,
                model_hyperparameters=self.model_hyperparameters,
            )
            ready_to_trace(model, self.splits.validation.take(1).batch(EVAL_BATCH))
            state = [v.numpy() for v in (*model.variables, *model.optimizer.variables)]
            self._models[key] = (model, state)
            # A model function declares its own hyperparameters as it builds: the same
            # model is then found under their values too.
            self._models[_own_values(hp)] = self._models[key]
        model, state = self._models[key]
        for variable, value in zip((*model.variables, *model.optimizer.variables), state):
            variable.assign(value)
        model.optimizer.learning_rate.assign(lr)
        model.gradient_accumulation_steps = k
        return model

    @property
    def trace_count(self) -> int:
        """How many times the training step of this search's models has been traced."""
        models = {id(model): model for model, _ in self._models.values()}
        return sum(model.train_step_trace_count for model in models.values())

    def fit(self, hp: keras_tuner.HyperParameters, model, *args, **kwargs):
        plan = self.plan(hp)
        k, m = hp.get(HP_ACCUMULATION_STEPS), hp.get(HP_MICRO_BATCH_SIZE)
        if exceeds_effective_batch_limit(k, m, self.space.max_effective_batch):
            # The oracle never proposes it (search_tuners); a guard for hand-made values.
            raise keras_tuner.errors.FailedTrialError(
                f"effective batch {k} x {m} = {k * m} exceeds "
                f"max_effective_batch={self.space.max_effective_batch}"
            )
        budget = self.space.trial_budget(self.splits.train_size, self.splits.validation_size)
        examples = budget.examples_per_epoch
        epochs = kwargs.pop("epochs", self.space.tuning_epochs)
        kwargs.pop("x", None)
        kwargs.pop("validation_data", None)
        steps = steps_per_epoch(examples, plan.global_batch)
        train, validation = self.trial_data(budget, epochs * steps * plan.global_batch)
        train = batched(train, plan.global_batch, shuffle_seed=self.space.seed)
        validation = validation.batch(EVAL_BATCH)
        timing = EpochTimes(plan.global_batch)
        lr = hp.get(HP_LEARNING_RATE)
        trial = f"the trial with accumulation_steps={k} micro_batch={m} lr={lr:.3g}"
        kwargs["callbacks"] = [*kwargs.get("callbacks", []), timing, StopOnNonFiniteLoss(trial)]
        memory = PeakMemory()
        memory.reset()
        try:
            history = model.fit(
                train,
                steps_per_epoch=steps,
                epochs=epochs,
                validation_data=validation,
                verbose=0,
                **kwargs,
            )
        except tf.errors.ResourceExhaustedError as error:
            raise keras_tuner.errors.FailedTrialError(
                f"out of memory with micro-batch {m} (x{k} steps): {error.message[:200]}"
            ) from error
        self.last_timing = timing
        # Speed and memory ride along as metrics: Keras Tuner keeps them with the trial
        # (trial.json, and over gRPC from a parallel worker to the chief's oracle).
        done = len(history.history.get("val_loss", []))
        extra = {
            TRIAL_SPEED: timing.examples_per_second(),
            TRIAL_PEAK_MEMORY: memory.peak_mb(),
            # The budget the trial's model has seen in all (Hyperband: from its first
            # epoch on); the Trainer trains the best trial's configuration for as many.
            TRIAL_EXAMPLES: float(epochs * steps * plan.global_batch),
            # The held-out examples the score is on: the Trainer validates on the same.
            TRIAL_SCORED_ON: float(budget.ranking_examples or self.splits.validation_size) or None,
        }
        for name, value in extra.items():
            if value is not None:
                history.history[name] = [value] * done
        return history

    def trial_data(self, budget, examples: int) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """A trial's unbatched training examples (of which its stream yields ``examples``)
        and the held-out examples that score it: the same every trial, so read once.

        The first trial holds in memory what the trials read of the training stream (the
        largest trial's examples and the shuffle buffer, or the whole split where that is
        less) and the held-out examples, where each fits ``datasets.MEMORY_BYTES``; later
        trials read those. The examples and their order are the streamed ones; a trial that
        would read past what is held (a larger budget) streams from the files.
        """
        splits = self.splits
        if self._held is None:
            largest = self.space.tuning_epochs * (
                budget.examples_per_epoch + self.space.largest_effective_batch * self.replicas
            )
            reads = min(stream_reads(largest), splits.train_size)
            scored = budget.ranking_examples or splits.validation_size
            start = time.monotonic()
            hold_train = 0 < reads and fits_in_memory(reads, splits.data)
            hold_scored = 0 < scored and fits_in_memory(scored, splits.data)
            if hold_train and hold_scored and splits.blocks is not None:
                self._held = held_parts(splits, reads, scored)  # one pass reads both
            else:
                held_out = splits.validation
                if budget.ranking_examples is not None:
                    held_out = held_out.take(budget.ranking_examples)
                self._held = (
                    HeldInMemory.first(splits.train, reads, "training") if hold_train else None,
                    HeldInMemory.first(held_out, scored, "held-out") if hold_scored else None,
                )
            kept = [h for h in self._held if h is not None]
            if kept:
                console.say(
                    "[tuner] held in memory for every trial: "
                    + " and ".join(
                        f"{h.count:,} {what} examples"
                        for h, what in zip(self._held, ("training", "held-out"))
                        if h is not None
                    )
                    + f" ({sum(h.nbytes for h in kept) / 2**20:.0f} MiB, read in "
                    f"{time.monotonic() - start:.1f} s)"
                )
        train_held, validation_held = self._held
        whole = train_held is not None and train_held.count == splits.train_size
        if train_held is not None and (whole or stream_reads(examples) <= train_held.count):
            train = train_held.dataset
        else:
            train = splits.train
        if validation_held is not None:
            return train, validation_held.dataset
        validation = splits.validation
        if budget.ranking_examples is not None:  # the same first held-out examples
            validation = validation.take(budget.ranking_examples)
        return train, validation

    def measure_speed(self, hp: keras_tuner.HyperParameters, model, updates: int = 10) -> dict:
        """Throughput and peak memory of ``hp``'s split over a few updates, without scoring.

        For an exact duplicate (``search_policy.duplicate_key``): its score is known, its
        speed and memory at this split are not. Timed as a trial's steps are.
        """
        plan = self.plan(hp)
        held = self._held[0] if self._held else None  # timed on what the trials read
        source = held.dataset if held is not None else self.splits.train
        train = batched(source, plan.global_batch, shuffle_seed=self.space.seed)
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
        measured = {TRIAL_SPEED: timing.examples_per_second(), TRIAL_PEAK_MEMORY: memory.peak_mb()}
        return {name: value for name, value in measured.items() if value is not None}

    def probe_micro_batches(self, try_step=None) -> tuple[int, ...]:
        """Drops micro-batch choices that do not fit the device; returns the dropped ones.

        ``try_step(m)`` defaults to one training step of the model at micro-batch ``m``
        with the largest accumulation step count (the accumulators take memory too).
        """
        kept, dropped = fitting_micro_batches(
            self.space.micro_batch_choices, try_step or self._one_step
        )
        if dropped:
            self.space = self.space.with_micro_batches(kept)
            self._models.clear()
        return dropped

    def _one_step(self, micro: int) -> None:
        hp = keras_tuner.HyperParameters()
        hp.values = {
            HP_ACCUMULATION_STEPS: max(self.space.accumulation_steps_choices),
            HP_MICRO_BATCH_SIZE: micro,
            HP_LEARNING_RATE: self.space.learning_rate_min,
        }
        model = self.build(hp)
        x, y = next(iter(self.splits.train.repeat().batch(self.plan(hp).global_batch)))
        model.train_on_batch(x, y)
