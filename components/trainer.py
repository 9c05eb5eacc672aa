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

import logging
import math
import time

import keras
import tensorflow as tf
from tfx import v1 as tfx

from tfx_accum import console
from tfx_accum.components.data import batched, feature_spec, load_schema, load_splits
from tfx_accum.components.export import export_serving_model
from tfx_accum.components.models import build_model
from tfx_accum.components.settings import EVAL_BATCH, Hyperparameters, ModelSettings
from tfx_accum.components.strategy import choose_strategy, replica_plan


def resolve_hyperparameters(fn_args) -> Hyperparameters:
    """The Tuner's best values if there are any, else ``custom_config["hyperparameters"]``."""
    if fn_args.hyperparameters:
        config = fn_args.hyperparameters
        hp, source = Hyperparameters.from_values(config.get("values", config)), "Tuner"
    else:
        fixed = (fn_args.custom_config or {}).get("hyperparameters") or {}
        hp, source = Hyperparameters(**fixed), "fixed (tuning off)"
    console.say(f"[trainer] hyperparameters ({source}): {hp.describe()}")
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
        if not self._start:
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


def epoch_plan(train_steps: int, steps_per_epoch: int) -> list[int]:
    """Splits ``train_steps`` updates into epochs of ``steps_per_epoch`` (last one shorter)."""
    if train_steps < 1:
        raise ValueError(f"`train_steps` must be >= 1, got {train_steps}.")
    steps_per_epoch = max(1, min(steps_per_epoch, train_steps))
    full, rest = divmod(train_steps, steps_per_epoch)
    return [steps_per_epoch] * full + ([rest] if rest else [])


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
    splits = load_splits(fn_args, settings.label_key)
    with strategy.scope():
        model = build_model(
            settings.model,
            splits.keys,
            settings.num_classes,
            plan.steps_per_replica,
            hp.learning_rate,
            splits.mean,
            splits.variance,
        )
    # TPUs need static shapes: whole batches only (the GA model then slices statically).
    tpu = isinstance(strategy, tf.distribute.TPUStrategy)
    train = batched(splits.train, plan.global_batch, shuffle_seed=0, drop_remainder=tpu)
    validation = splits.eval.batch(EVAL_BATCH, drop_remainder=tpu)
    nominal_epoch = max(1, math.ceil(splits.train_size / plan.global_batch))
    epochs = epoch_plan(fn_args.train_steps, nominal_epoch)
    callbacks = [
        keras.callbacks.TensorBoard(log_dir=fn_args.model_run_dir, update_freq="epoch"),
        ProgressLine(fn_args.train_steps, plan.global_batch),
    ]
    console.say(
        f"[trainer] {fn_args.train_steps} optimizer updates at global batch "
        f"{plan.global_batch} ({len(epochs)} epochs, {strategy.num_replicas_in_sync} "
        f"replica(s))"
    )
    history: dict[str, list[float]] = {}
    # Whole epochs in one fit call, so that one shuffled input stream runs through them; a
    # shorter last epoch, if any, in a second call.
    full = len(epochs) if epochs[-1] == epochs[0] else len(epochs) - 1
    calls = [(0, full, epochs[0])] if full else []
    if full < len(epochs):
        calls.append((full, full + 1, epochs[-1]))
    for initial_epoch, last_epoch, steps in calls:
        result = model.fit(
            train,
            steps_per_epoch=steps,
            initial_epoch=initial_epoch,
            epochs=last_epoch,
            validation_data=validation,
            callbacks=callbacks,
            verbose=0,
        )
        for key, values in result.history.items():
            history.setdefault(key, []).extend(values)
    console.say(
        f"[trainer] done: loss {history['loss'][-1]:.4f}, val_accuracy "
        f"{history['val_accuracy'][-1]:.4f} after {int(model.optimizer.iterations)} updates"
    )
    schema = load_schema(fn_args.schema_path)
    export_serving_model(model, feature_spec(schema, splits.keys), fn_args.serving_model_dir)
