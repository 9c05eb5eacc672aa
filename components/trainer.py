"""TFX Trainer module: trains the GA model with the tuned (or fixed) hyperparameters.

Referenced from the pipeline as ``run_fn="components.trainer.run_fn"``.

- Hyperparameters: the Tuner's best ones (``fn_args.hyperparameters``), or
  ``custom_config["hyperparameters"]`` when tuning is switched off.
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
from typing import Any

import keras
import tensorflow as tf
from tfx import v1 as tfx

from components.data import batched, feature_spec, load_schema, load_splits
from components.export import export_serving_model
from components.models import build_model
from components.strategy import choose_strategy, replica_plan
from components.tuner import EVAL_BATCH, HP_LR, HP_MICRO, HP_STEPS, settings_from_custom_config

DEFAULT_HYPERPARAMETERS = {HP_STEPS: 4, HP_MICRO: 32, HP_LR: 1e-3}


def resolve_hyperparameters(fn_args) -> dict[str, Any]:
    """Best Tuner values if present, else custom_config's fixed ones, else the defaults."""
    values = dict(DEFAULT_HYPERPARAMETERS)
    if fn_args.hyperparameters:
        config = fn_args.hyperparameters
        values.update(config.get("values", config))
        source = "Tuner"
    else:
        values.update((fn_args.custom_config or {}).get("hyperparameters") or {})
        source = "fixed (tuning off)"
    steps, micro, lr = values[HP_STEPS], values[HP_MICRO], values[HP_LR]
    for name, value in ((HP_STEPS, steps), (HP_MICRO, micro)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"Hyperparameter `{name}` must be an int >= 1, got {value!r}.")
    if not isinstance(lr, int | float) or lr <= 0:
        raise ValueError(f"Hyperparameter `{HP_LR}` must be a positive number, got {lr!r}.")
    print(
        f"[trainer] hyperparameters ({source}): steps={steps} micro_batch={micro} "
        f"lr={lr:.3g} -> effective batch {steps * micro}",
        flush=True,
    )
    return {HP_STEPS: steps, HP_MICRO: micro, HP_LR: float(lr)}


def epoch_plan(train_steps: int, steps_per_epoch: int) -> list[int]:
    """Splits ``train_steps`` updates into epochs of ``steps_per_epoch`` (last one shorter)."""
    if train_steps < 1:
        raise ValueError(f"`train_steps` must be >= 1, got {train_steps}.")
    steps_per_epoch = max(1, min(steps_per_epoch, train_steps))
    full, rest = divmod(train_steps, steps_per_epoch)
    return [steps_per_epoch] * full + ([rest] if rest else [])


def run_fn(fn_args: tfx.components.FnArgs) -> None:
    """TFX entry point: train, log to TensorBoard, export the serving model."""
    settings = settings_from_custom_config(fn_args.custom_config)
    hp = resolve_hyperparameters(fn_args)
    strategy = choose_strategy()
    plan = replica_plan(hp[HP_STEPS], hp[HP_MICRO], strategy.num_replicas_in_sync)
    if plan.global_batch != hp[HP_STEPS] * hp[HP_MICRO]:
        logging.warning(
            "With %d replicas the global batch is %d (not %d x %d).",
            plan.replicas,
            plan.global_batch,
            hp[HP_STEPS],
            hp[HP_MICRO],
        )
    splits = load_splits(fn_args, settings["label_key"])
    with strategy.scope():
        model = build_model(
            settings["model"],
            splits.keys,
            settings["num_classes"],
            plan.steps_per_replica,
            hp[HP_LR],
            splits.mean,
            splits.variance,
        )
    # TPUs need static shapes: whole batches only (the GA model then slices statically).
    tpu = isinstance(strategy, tf.distribute.TPUStrategy)
    train = batched(splits.train, plan.global_batch, shuffle_seed=0, drop_remainder=tpu)
    validation = splits.eval.batch(EVAL_BATCH, drop_remainder=tpu)
    nominal_epoch = max(1, math.ceil(splits.train_size / plan.global_batch))
    callbacks = [keras.callbacks.TensorBoard(log_dir=fn_args.model_run_dir, update_freq="epoch")]
    epochs = epoch_plan(fn_args.train_steps, nominal_epoch)
    print(
        f"[trainer] {fn_args.train_steps} optimizer updates at global batch "
        f"{plan.global_batch} ({len(epochs)} epochs, {strategy.num_replicas_in_sync} "
        f"replica(s))",
        flush=True,
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
    print(
        f"[trainer] done: loss {history['loss'][-1]:.4f}, val_accuracy "
        f"{history['val_accuracy'][-1]:.4f} after {int(model.optimizer.iterations)} updates",
        flush=True,
    )
    schema = load_schema(fn_args.schema_path)
    export_serving_model(model, feature_spec(schema, splits.keys), fn_args.serving_model_dir)
