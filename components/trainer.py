"""TFX Trainer module: trains the GA model with the tuned (or fixed) hyperparameters.

Referenced from the pipeline as ``run_fn="tfx_accum.components.trainer.run_fn"``.

- Hyperparameters: the Tuner's best ones (``fn_args.hyperparameters``), or
  ``custom_config["hyperparameters"]`` when tuning is switched off (see
  :class:`~tfx_accum.components.settings.Hyperparameters`). It does not depend on the
  Tuner module.
- ``train_steps`` counts **optimizer updates** (each one is a whole effective batch of
  ``k * m`` examples), not micro-batches.
- The strategy follows the devices present (TPU, several GPUs, else default) and the batch
  is shared among replicas as in :mod:`components.strategy`.
- TensorBoard logs go to ``fn_args.model_run_dir``; the serving SavedModel to
  ``fn_args.serving_model_dir``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time

import keras
import tensorflow as tf
from tfx import v1 as tfx

from tfx_accum import console
from tfx_accum.components.data import (
    batched,
    load_splits,
    location_for_inputs,
)
from tfx_accum.components.export import export_serving_model
from tfx_accum.components.models import build_model
from tfx_accum.components.settings import (
    EVAL_BATCH,
    RESPLIT_FROM_SPLIT,
    RESPLIT_FROM_TRIAL,
    RESPLIT_SPEEDUP,
    Hyperparameters,
    ModelSettings,
)
from tfx_accum.components.strategy import choose_strategy, replica_plan
from tfx_accum.components.training_backup import TrainingBackup

TRAINING_SEED = 0


def resolve_hyperparameters(fn_args) -> Hyperparameters:
    """The Tuner's best values if there are any, else ``custom_config["hyperparameters"]``."""
    if fn_args.hyperparameters:
        config = fn_args.hyperparameters
        values = config.get("values", config)
        hp, source = Hyperparameters.from_values(values), "Tuner"
        if RESPLIT_FROM_TRIAL in values:
            source = (
                f"Tuner; trial {values[RESPLIT_FROM_TRIAL]} ran this effective batch as "
                f"{values[RESPLIT_FROM_SPLIT]}, this split ran "
                f"{values.get(RESPLIT_SPEEDUP, 0):.2f}x faster in the search and trains the "
                "same model, as accumulation is exact"
            )
    else:
        fixed = (fn_args.custom_config or {}).get("hyperparameters") or {}
        hp, source = Hyperparameters(**fixed), "fixed (tuning off)"
    console.say(f"[trainer] hyperparameters ({source}): {hp.describe()}")
    return hp


def keras_tuner_values(fn_args):
    """The Tuner's best values as ``keras_tuner.HyperParameters``, for a model function
    that declared hyperparameters of its own (empty with tuning off: its defaults)."""
    import keras_tuner

    hp = keras_tuner.HyperParameters()
    config = fn_args.hyperparameters or {}
    if "space" in config:
        hp = keras_tuner.HyperParameters.from_config(config)
    hp.values.update(config.get("values", {}))
    return hp


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
        self.done = self._last_done = int(self.model.optimizer.iterations)
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


def run_fn(fn_args: tfx.components.FnArgs) -> None:
    """TFX entry point: train, log to TensorBoard, export the serving model."""
    settings = ModelSettings.from_custom_config(fn_args.custom_config)
    hp = resolve_hyperparameters(fn_args)
    strategy = choose_strategy()
    plan = replica_plan(hp.accumulation_steps, hp.micro_batch_size, strategy.num_replicas_in_sync)
    if plan.global_batch != hp.effective_batch:
        logging.warning(
            "With %d replicas the global batch is %d (not %d x %d).",
            plan.replicas,
            plan.global_batch,
            hp.accumulation_steps,
            hp.micro_batch_size,
        )
    splits = load_splits(fn_args, settings.label_key, settings.num_classes)
    # Seeded: the same inputs train the same model (and a resumed run can equal it).
    keras.utils.set_random_seed(TRAINING_SEED)
    with strategy.scope():
        model = build_model(
            settings.model,
            splits.data,
            plan.steps_per_replica,
            hp.learning_rate,
            hp=keras_tuner_values(fn_args),
        )
    # TPUs need static shapes: whole batches only (the GA model then slices statically).
    tpu = isinstance(strategy, tf.distribute.TPUStrategy)
    updates = training_updates(fn_args, splits.train_size, plan.global_batch)
    steps_per_epoch = max(1, min(math.ceil(splits.train_size / plan.global_batch), updates))
    epochs = math.ceil(updates / steps_per_epoch)  # the last one stops at `updates`
    backup_dir = backup_location(fn_args, hp, settings)
    # A resumed run starts at the same place of the same shuffled stream (the stream is a
    # function of the seed only), so it ends with the weights of an uninterrupted run.
    backup = TrainingBackup(backup_dir)  # complete or absent, never a stuck directory
    resumed_epoch = backup.restore_point()
    train = batched(splits.train, plan.global_batch, shuffle_seed=0, drop_remainder=tpu)
    if resumed_epoch:
        train = train.skip(resumed_epoch * steps_per_epoch)
    validation = splits.eval.batch(EVAL_BATCH, drop_remainder=tpu)
    callbacks = [
        # Restores weights, optimizer state and the epoch after an interruption (a killed
        # process, a preempted Kubeflow pod that is retried); saved at every epoch's end.
        backup,
        keras.callbacks.TensorBoard(log_dir=fn_args.model_run_dir, update_freq="epoch"),
        StopAfterUpdates(updates),
        ProgressLine(updates, plan.global_batch),
    ]
    console.say(
        f"[trainer] {updates} optimizer updates at global batch {plan.global_batch} = "
        f"{updates * plan.global_batch:,} examples ({epochs} epochs, "
        f"{strategy.num_replicas_in_sync} replica(s))"
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
    if history:
        console.say(
            f"[trainer] done: loss {history['loss'][-1]:.4f}, val_accuracy "
            f"{history['val_accuracy'][-1]:.4f} after {int(model.optimizer.iterations)} updates"
        )
    write_budget(fn_args.model_run_dir, updates, plan.global_batch)
    export_serving_model(model, splits.data, splits.preprocessor, fn_args.serving_model_dir)
    backup.delete()  # finished: a later run with these inputs starts afresh


BUDGET_FILE = "budget.json"  # in the ModelRun artifact; the run summary reads it


def write_budget(model_run_dir: str, updates: int, global_batch: int) -> None:
    """Records the Trainer's budget in the unit of the trials' budget: examples."""
    tf.io.gfile.makedirs(model_run_dir)
    with tf.io.gfile.GFile(os.path.join(model_run_dir, BUDGET_FILE), "w") as handle:
        handle.write(
            json.dumps(
                {
                    "updates": updates,
                    "global_batch": global_batch,
                    "examples": updates * global_batch,
                }
            )
        )


def training_updates(fn_args, train_size: int, global_batch: int) -> int:
    """``train_steps``, raised (when asked) to cover the examples each tuning trial saw.

    A trial's budget is examples (``tuning_epochs`` passes); with a large effective batch the
    default number of updates could cover a fraction of it, and the final model would be
    worse than the best trial. ``custom_config["min_examples"]`` asks for at least as many.
    """
    minimum = (fn_args.custom_config or {}).get("min_examples")
    if not minimum:
        return fn_args.train_steps
    examples = minimum["epochs"] * (minimum.get("examples_per_epoch") or train_size)
    needed = math.ceil(examples / global_batch)
    if needed > fn_args.train_steps:
        console.say(
            f"[trainer] {fn_args.train_steps} updates would cover fewer examples than each "
            f"trial saw ({examples:,}); training {needed} updates instead"
        )
    return max(fn_args.train_steps, needed)


def backup_location(fn_args, hp: Hyperparameters, settings: ModelSettings) -> str:
    """Where the training state is backed up: the same for a retry of the same inputs.

    TFX gives every execution a new directory, so the backup lives under
    ``custom_config["backup_root"]`` (``<pipeline_root>/_backup`` from create_pipeline) in
    a folder named by a hash of everything that determines the training: the examples and
    schema, the hyperparameters, the number of updates and the model settings.
    """
    root = (fn_args.custom_config or {}).get("backup_root")
    if not root:
        return os.path.join(fn_args.model_run_dir, "backup")
    return location_for_inputs(
        root,
        "trainer",
        fn_args,
        hyperparameters=hp.to_values(),
        train_steps=fn_args.train_steps,
        model=settings.to_custom_config(),
    )


class StopAfterUpdates(keras.callbacks.Callback):
    """Stops training once the optimizer has made ``updates`` updates (also after a resume)."""

    def __init__(self, updates: int):
        super().__init__()
        self.updates = updates

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations) >= self.updates:
            self.model.stop_training = True
