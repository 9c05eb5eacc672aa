"""TFX Trainer module: trains the GA model with the tuned (or fixed) hyperparameters.

Referenced from the pipeline as ``run_fn="tfx_accum.components.training.trainer_module.run_fn"``.

- Hyperparameters: the Tuner's best ones (``fn_args.hyperparameters``), or
  ``custom_config["hyperparameters"]`` when tuning is switched off (see
  :class:`~tfx_accum.components.config.hyperparameters.Hyperparameters`). It does not depend on the
  Tuner module.
- ``train_steps`` counts **optimizer updates** (each one is a whole effective batch of
  ``k * m`` examples), not micro-batches.
- The strategy follows the devices present (TPU, several GPUs, else default), or
  ``TF_CONFIG`` naming several workers (``MultiWorkerMirroredStrategy``), and the batch is
  shared among all replicas as in ``tfx_accum.components.accumulation.strategy``. With several
  workers the chief alone writes the model, logs and backups; the others write to temporary
  folders of their own (``tfx_accum.components.accumulation.multi_worker``).
- TensorBoard logs go to ``fn_args.model_run_dir``; the serving SavedModel to
  ``fn_args.serving_model_dir``.
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
import json
import logging
import math
import os
import time
from typing import TYPE_CHECKING

import keras
import tensorflow as tf

from tfx_accum import console
from tfx_accum.components.accumulation import distributed_input
from tfx_accum.components.accumulation.multi_worker import Cluster
from tfx_accum.components.accumulation.strategy import choose_strategy, replica_plan
from tfx_accum.components.config.custom_config import BEST_TRIAL_BUDGET, ModuleConfig
from tfx_accum.components.config.hyperparameters import Hyperparameters
from tfx_accum.components.config.model_code import model_key
from tfx_accum.components.config.settings import EVAL_BATCH
from tfx_accum.components.config.tasks import OBJECTIVES
from tfx_accum.components.config.trial_records import TunerDecision
from tfx_accum.components.data.datasets import (
    batched,
    read_splits,
)
from tfx_accum.components.data.input_keys import location_for_inputs
from tfx_accum.components.data.transform import transform_output_path
from tfx_accum.components.models.custom_model import model_data
from tfx_accum.components.models.models import build_model, describe_precision, ready_to_trace
from tfx_accum.components.models.non_finite import StopOnNonFiniteLoss
from tfx_accum.components.training.budget import trainer_budget
from tfx_accum.components.training.export import export_serving_model
from tfx_accum.components.training.training_backup import TrainingBackup

# importing tfx.v1 loads its Google Cloud extensions, a slow start-up in every Trainer
if TYPE_CHECKING:
    from tfx.components.trainer.fn_args_utils import FnArgs


def resolve_hyperparameters(
    fn_args, config: ModuleConfig
) -> tuple[Hyperparameters, object, TunerDecision | None]:
    """``(hyperparameters, keras_tuner.HyperParameters, the Tuner's decision)``.

    The Tuner's decision (``fn_args.hyperparameters``, parsed once by
    :class:`~tfx_accum.components.config.trial_records.TunerDecision`) if there is one, else
    ``custom_config["hyperparameters"]`` (``config.hyperparameters``). The second value
    holds every value, for a model function that declared hyperparameters of its own
    (empty with tuning off: its defaults).
    """
    import keras_tuner

    values = keras_tuner.HyperParameters()
    decision = None
    if fn_args.hyperparameters:
        config = fn_args.hyperparameters
        decision = TunerDecision.from_config(config)
        hp, source = decision.hyperparameters, decision.describe_source()
        if "space" in config:
            values = keras_tuner.HyperParameters.from_config(config)
        values.values.update(decision.values)
    else:
        hp, source = config.hyperparameters or Hyperparameters(), "fixed (tuning off)"
    console.say(f"[trainer] hyperparameters ({source}): {hp.describe()}")
    return hp, values, decision


class ProgressLine(keras.callbacks.Callback):
    """A progress line every ``every`` optimizer updates, with examples per second."""

    def __init__(self, total_updates: int, batch: int, lines: int = 4):
        super().__init__()
        self.total, self.batch = total_updates, batch
        self.every = max(1, math.ceil(total_updates / lines))
        self.done = 0
        self._start = self._last = 0.0
        self._last_done = 0

    def on_train_begin(self, logs=None):
        # After TrainingBackup (earlier in the list): a resumed run counts on from there.
        self.done = self._last_done = updates_done(self.model)
        self._start = self._last = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        self.done += 1
        if self.done % self.every and self.done != self.total:
            return
        now = time.monotonic()
        rate = (self.done - self._last_done) * self.batch / max(now - self._last, 1e-9)
        self._last, self._last_done = now, self.done
        loss = (logs or {}).get("loss")
        loss_text = f", loss {float(loss):.4f}" if loss is not None else ""
        console.say(
            f"[trainer] {self.done}/{self.total} updates ({100 * self.done // self.total}%)"
            f"{loss_text}, {rate:,.0f} examples/s"
        )


def run_fn(fn_args: FnArgs) -> None:
    """TFX entry point: train, log to TensorBoard, export the serving model."""
    config = ModuleConfig.from_custom_config(fn_args.custom_config)
    settings = config.model_settings
    hp, values, decision = resolve_hyperparameters(fn_args, config)
    strategy = choose_strategy()
    cluster = Cluster.from_env()
    plan = replica_plan(hp.accumulation_steps, hp.micro_batch_size, strategy.num_replicas_in_sync)
    if plan.global_batch != hp.effective_batch:
        logging.warning(
            "With %d replicas the global batch is %d (not %d x %d).",
            plan.replicas,
            plan.global_batch,
            hp.accumulation_steps,
            hp.micro_batch_size,
        )
    data = model_data(fn_args, config, "trainer")
    splits = read_splits(fn_args, data)
    # The search's seed: the best trial's initial weights and data order, so that the best
    # configuration trained for the best trial's budget is the best trial's model.
    seed = config.training_seed
    # TPUs need static shapes: whole batches only (the GA model then slices statically).
    tpu = isinstance(strategy, tf.distribute.TPUStrategy)
    budget = trainer_budget(
        fn_args.train_steps,
        decision.examples if decision else None,
        plan.global_batch,
        config.train_budget == BEST_TRIAL_BUDGET,
    )
    scored = validated_examples(decision, budget, splits.validation_size)
    validation = splits.validation.take(scored).batch(EVAL_BATCH, drop_remainder=tpu)
    if cluster.multi_worker:  # the global batches of one device, split among the workers
        validation = distributed_input.shard_like_one_device(validation)
    keras.utils.set_random_seed(seed)
    with strategy.scope():
        model = build_model(
            settings.model,
            splits.data,
            plan.steps_per_replica,
            hp.learning_rate,
            hp=values,
            precision=settings.precision,
            model_hyperparameters=settings.model_hyperparameters,
        )
        # One whole validation batch, split among the workers as validation will be: a
        # batch of one example would leave a worker without rows (a collective's shapes
        # then differ between workers).
        ready_to_trace(model, validation.take(1))
    if line := describe_precision(settings.precision, "trainer"):
        console.say(line)
    objective, direction = OBJECTIVES[data.task]
    updates = budget.updates
    if getattr(fn_args, "eval_steps", None):  # TFX's EvalArgs: said, not silently dropped
        console.say(
            f"[trainer] EvalArgs.num_steps={fn_args.eval_steps} is not used: validation runs "
            f"on {scored:,} examples held out of the training split, and "
            "the Evaluator scores the eval split"
        )
    steps_per_epoch = max(1, min(math.ceil(splits.train_size / plan.global_batch), updates))
    epochs = math.ceil(updates / steps_per_epoch)  # the last one stops at `updates`
    # The chief's backup; another worker's private copy of it
    # (tfx_accum.components.accumulation.multi_worker).
    backup_dir = cluster.own_backup(backup_location(fn_args, hp, config, updates))
    # A resumed run starts at the same place of the same shuffled stream (the stream is a
    # function of the seed only), so it ends with the weights of an uninterrupted run.
    backup = TrainingBackup(backup_dir)  # complete or absent, never a stuck directory
    resumed_epoch = backup.restore_point()
    train = batched(splits.train, plan.global_batch, shuffle_seed=seed, drop_remainder=tpu)
    if resumed_epoch:
        train = train.skip(resumed_epoch * steps_per_epoch)
    if cluster.multi_worker:  # the global batches of one device, split among the workers
        train = distributed_input.shard_like_one_device(train)
    model_run_dir = cluster.own_dir(fn_args.model_run_dir)
    progress = ProgressLine(updates, plan.global_batch)
    callbacks = [
        # Restores weights, optimizer state and the epoch after an interruption (a killed
        # process, a preempted Kubeflow pod that is retried); saved at every epoch's end.
        backup,
        keras.callbacks.TensorBoard(log_dir=model_run_dir, update_freq="epoch"),
        StopAfterUpdates(updates),
        StopOnNonFiniteLoss("the Trainer"),
        progress,
    ]
    best_epoch = RestoreBestEpoch(objective, direction, backup_dir)
    callbacks.append(best_epoch)
    if budget.early_stopping:
        # After a quarter of the budget without improvement (at least PATIENCE epochs); the
        # best epoch's weights are restored by best_epoch.
        callbacks.append(
            keras.callbacks.EarlyStopping(
                monitor=objective, mode=direction, patience=max(PATIENCE, epochs // 4)
            )
        )
    console.say(
        f"[trainer] {updates} optimizer updates at global batch {plan.global_batch} = "
        f"{updates * plan.global_batch:,} examples ({budget.reason}; {epochs} epochs of "
        f"{splits.train_size:,}, validation on {_held_out(scored, splits.validation_size)}; "
        f"{strategy.num_replicas_in_sync} replica(s)"
        + (f" on {cluster.workers} workers" if cluster.multi_worker else "")
        + ")"
        + (f"; resuming after epoch {resumed_epoch} from {backup_dir}" if resumed_epoch else "")
    )
    # One fit call, so that one shuffled input stream runs through every epoch; the last
    # epoch stops after exactly train_steps updates.
    history = model.fit(
        train,
        steps_per_epoch=steps_per_epoch,
        epochs=epochs,
        initial_epoch=resumed_epoch,
        validation_data=validation,
        callbacks=callbacks,
        verbose=0,
    ).history
    done = progress.done  # the optimizer's count is the kept epoch's now
    if history and best_epoch.best is not None:
        console.say(
            f"[trainer] done after {done} updates: {objective} {best_epoch.best:.4f} at epoch "
            f"{best_epoch.best_epoch + 1} of {epochs} (the model keeps that "
            "epoch's weights)" + _label_units(data, history, best_epoch.best_epoch)
        )
    write_budget(model_run_dir, done, plan.global_batch, best_epoch.best, best_epoch.best_epoch + 1)
    with tf.io.gfile.GFile(os.path.join(model_run_dir, DESCRIPTION_FILE), "w") as handle:
        json.dump(splits.data.to_json(), handle, indent=1)
    # Every worker exports (a save may take part in collective operations); only the
    # chief's export is the Trainer's output.
    export_serving_model(
        model,
        splits.data,
        splits.preprocessor,
        cluster.own_dir(fn_args.serving_model_dir),
        transform_output_path(fn_args),
    )
    if cluster.is_chief:
        backup.delete()  # finished: a later run with these inputs starts afresh
    cluster.clean_up()


def validated_examples(decision, budget, validation_size: int) -> int:
    """The held-out examples the Trainer validates on: those the best trial was scored
    on when it trains the best trial's model (its budget), so that it reports the trial's
    score on the same examples; every held-out example otherwise.

    A search on a large split scores its trials on the first of them (``SearchSpace``'s
    ``max_trial_examples``): validating on every one would read the whole training split
    again, most of the Trainer's time at 2M rows.
    """
    if decision is not None and decision.scored_examples and not budget.early_stopping:
        return min(decision.scored_examples, validation_size)
    return validation_size


def _held_out(scored: int, validation_size: int) -> str:
    if scored < validation_size:
        return f"the first {scored:,} of {validation_size:,} held out, as the best trial was"
    return f"{validation_size:,} held out"


PATIENCE = 5  # epochs without improvement before early stopping (not the best trial's budget)


def _label_units(data, history, epoch: int) -> str:
    """A regression's validation error in the label's own units."""
    if data.classification or "val_mae" not in history:
        return ""
    return f" (validation MAE {history['val_mae'][epoch] * math.sqrt(data.label_variance):.4g})"


class RestoreBestEpoch(keras.callbacks.Callback):
    """Ends training with the weights of the epoch with the best validation ``monitor``.

    A Keras Tuner trial's score is its best epoch's (``MetricHistory.get_best_value``, the
    first of equal values), so the Trainer, training the best trial's configuration for its
    budget on the same examples, keeps that epoch's model: the one the score was for.
    The best epoch's weights and score are kept in ``directory`` (the Trainer's backup
    folder, written beside and renamed into place), so a resumed run knows them too.
    """

    def __init__(self, monitor: str, mode: str, directory: str):
        super().__init__()
        self.monitor, self.mode = monitor, mode
        self.weights_path = os.path.join(directory, "best_epoch.weights.h5")
        self.state_path = os.path.join(directory, "best_epoch.json")
        self.best: float | None = None
        self.best_epoch = 0

    def on_train_begin(self, logs=None):
        if tf.io.gfile.exists(self.state_path) and tf.io.gfile.exists(self.weights_path):
            with tf.io.gfile.GFile(self.state_path) as handle:
                state = json.load(handle)
            self.best, self.best_epoch = state["best"], state["epoch"]

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None:
            return
        if self.best is None or (value > self.best if self.mode == "max" else value < self.best):
            self.best, self.best_epoch = float(value), epoch
            tf.io.gfile.makedirs(os.path.dirname(self.weights_path))
            fresh = self.weights_path + ".new.weights.h5"
            self.model.save_weights(fresh)
            tf.io.gfile.rename(fresh, self.weights_path, overwrite=True)
            with tf.io.gfile.GFile(self.state_path + ".new", "w") as handle:
                json.dump({"best": self.best, "epoch": epoch}, handle)
            tf.io.gfile.rename(self.state_path + ".new", self.state_path, overwrite=True)

    def on_train_end(self, logs=None):
        if self.best is not None and tf.io.gfile.exists(self.weights_path):
            self.model.load_weights(self.weights_path)


BUDGET_FILE = "budget.json"  # in the ModelRun artifact; the run summary reads it
DESCRIPTION_FILE = "data_description.json"  # in the ModelRun artifact: what the model got


def write_budget(
    model_run_dir: str,
    updates: int,
    global_batch: int,
    validation: float | None = None,
    best_epoch: int | None = None,
) -> None:
    """Records the Trainer's budget in the unit of the trials' budget (examples), and the
    kept epoch's validation score (the best trial's, with the best trial's budget)."""
    tf.io.gfile.makedirs(model_run_dir)
    with tf.io.gfile.GFile(os.path.join(model_run_dir, BUDGET_FILE), "w") as handle:
        handle.write(
            json.dumps(
                {
                    "updates": updates,
                    "global_batch": global_batch,
                    "examples": updates * global_batch,
                    "validation_score": validation,
                    "best_epoch": best_epoch,
                }
            )
        )


def backup_location(
    fn_args, hp: Hyperparameters, config: ModuleConfig, updates: int | None = None
) -> str:
    """Where the training state is backed up: the same for a retry of the same inputs.

    TFX gives every execution a new directory, so the backup lives under
    ``custom_config["backup_root"]`` (``<pipeline_root>/_backup`` from create_pipeline) in
    a folder named by a hash of everything that determines the training: the examples and
    schema, the hyperparameters, the number of updates and the model settings (a model
    function's code with them: tfx_accum.components.config.model_code).
    """
    if not config.backup_root:
        return os.path.join(fn_args.model_run_dir, "backup")
    return location_for_inputs(
        config.backup_root,
        "trainer",
        fn_args,
        hyperparameters=hp.to_values(),
        train_steps=fn_args.train_steps,
        updates=updates,
        model=model_key(config.model_settings),
    )


def updates_done(model: keras.Model) -> int:
    """The optimizer's update count. Under a strategy it is a distributed variable, which
    ``int()`` refuses (``MirroredVariable``); its NumPy value is the count."""
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


class StopAfterUpdates(keras.callbacks.Callback):
    """Stops training once the optimizer has made ``updates`` updates (also after a resume)."""

    def __init__(self, updates: int):
        super().__init__()
        self.updates = updates

    def on_train_batch_end(self, batch, logs=None):
        if updates_done(self.model) >= self.updates:
            self.model.stop_training = True
