"""TFX Tuner module: Keras Tuner searches accumulation steps, micro-batch and learning rate.

Referenced from the pipeline as ``tuner_fn="tfx_accum.components.search.tuner_module.tuner_fn"``.

The three hyperparameters are searched jointly: ``accumulation_steps`` (k),
``micro_batch_size`` (m) and ``learning_rate``; a trial's effective batch is ``k * m``.
This module only wires TFX's ``fn_args`` to the pieces, each in a module of its own:

- ``tfx_accum.components.search.hypermodel``: the HyperModel (a trial's model, its fit and budget);
- ``tfx_accum.components.search.search_tuners``: the oracle and tuner classes (Keras Tuner
extended);
- ``tfx_accum.components.search.search_policy``: what exact accumulation lets the search decide
  (duplicates, the Trainer's split, the effective-batch limit);
- ``tfx_accum.components.search.parallel_search``: trials in worker processes;
- ``tfx_accum.components.search.micro_batch_probe``: micro-batch choices that fit the device.

A trial that fails (out of memory) is recorded as failed and the search goes on; the Tuner
fails only if every trial fails.
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
import json
import logging

import keras_tuner

from tfx_accum import console
from tfx_accum.components.accumulation.strategy import check_node_pool, choose_strategy, tpu_present
from tfx_accum.components.config.custom_config import ModuleConfig
from tfx_accum.components.config.model_code import model_key
from tfx_accum.components.config.search_space import SearchSpace
from tfx_accum.components.config.settings import ModelSettings
from tfx_accum.components.data.datasets import (
    read_splits,
    training_examples,
    validation_examples,
)
from tfx_accum.components.data.input_keys import location_for_inputs
from tfx_accum.components.models.custom_model import model_data
from tfx_accum.components.models.models import describe_precision
from tfx_accum.components.search import parallel_search
from tfx_accum.components.search.hypermodel import AccumulationHyperModel
from tfx_accum.components.search.micro_batch_probe import (
    gpu_present,
    probe_in_subprocess,
    say_dropped,
)
from tfx_accum.components.search.search_tuners import make_tuner

__all__ = ["make_tuner", "tuner_fn", "worker_tuner"]


def search_location(
    fn_args, space: SearchSpace, settings: ModelSettings, root: str | None
) -> str | None:
    """A directory for the search that is the same whenever its inputs are the same.

    TFX gives every execution a new working directory, so a Tuner killed mid-search (a
    preempted pod, Ctrl-C) would start over. Under ``root`` (``custom_config["search_root"]``,
    ``<pipeline_root>/_search`` from create_pipeline) the search lives in a folder named
    by a hash of the examples' and schema's content, the search space and the model
    settings (a model function's code with them: tfx_accum.components.config.model_code), and a
    rerun with the same inputs continues it (on Kubeflow too, where every
    run's examples have a new path). ``max_trials`` is left out: more trials continue the
    same search, fewer reuse it. ``None`` without a search root.
    """
    if not root:
        return None
    key = {name: value for name, value in space.to_config().items() if name != "max_trials"}
    return location_for_inputs(root, "search", fn_args, space=key, model=model_key(settings))


def tuner_fn(fn_args):
    """TFX entry point: returns the tuner and the arguments of ``tuner.search``.

    With ``custom_config["parallel_trials"]`` > 1 this process is the chief of a parallel
    search (``tfx_accum.components.search.parallel_search``): it trains nothing and loads no data;
    the workers do both.
    """
    logging.getLogger("keras_tuner").setLevel(logging.WARNING)
    config = ModuleConfig.from_custom_config(fn_args.custom_config)
    settings, space, workers = config.model_settings, config.space, config.parallel_trials
    directory = search_location(fn_args, space, settings, config.search_root)
    data = model_data(fn_args, config, "tuner")
    if workers > 1:
        check_node_pool()
        if tpu_present():
            raise ValueError(
                f"parallel_trials={workers} needs GPUs or CPUs: a TPU host serves one "
                "process. Set parallel_trials to 1 for TPU node pools."
            )
        parallel_search.share_gpus()  # the probe and the workers grow their GPU memory
        if gpu_present():
            spec = parallel_search.worker_spec(
                fn_args, directory or fn_args.working_dir, space.to_config()
            )
            kept = probe_in_subprocess(spec)
            say_dropped([m for m in space.micro_batch_choices if m not in kept])
            space = space.with_micro_batches(kept)
        hypermodel = AccumulationHyperModel(
            space,
            None,
            settings.model,
            data=data,
            precision=settings.precision,
            model_hyperparameters=settings.model_hyperparameters,
        )
    else:
        hypermodel, strategy = _local_hypermodel(fn_args, data, space, settings)
        if gpu_present():
            say_dropped(hypermodel.probe_micro_batches())
            space = hypermodel.space
    budget = space.trial_budget(training_examples(data), validation_examples(data))
    if line := describe_precision(settings.precision, "tuner"):
        console.say(line)
    console.say(
        f"[tuner] {space.algorithm} search over accumulation steps "
        f"{list(space.accumulation_steps_choices)}, "
        f"micro-batch {list(space.micro_batch_choices)}, learning rate "
        f"[{space.learning_rate_min:g}, {space.learning_rate_max:g}] (log"
        + (f", x{space.learning_rate_step:.3g} steps" if space.learning_rate_step else "")
        + f"); budget {budget.epochs} x {budget.examples_per_epoch:,} examples per trial, "
        "ranked by "
        f"{hypermodel.objective} on "
        f"{budget.ranking_examples or validation_examples(data):,} examples held out of the "
        "training split" + (f"; {workers} trials at a time" if workers > 1 else "")
    )
    if line := budget.describe_cap():
        console.say(line)
    tuner = make_tuner(
        space,
        hypermodel,
        directory or fn_args.working_dir,
        strategy if workers == 1 and strategy.num_replicas_in_sync > 1 else None,
        resume=directory is not None,
        parallel_trials=workers,
        worker_spec=(
            parallel_search.worker_spec(
                fn_args, directory or fn_args.working_dir, space.to_config()
            )
            if workers > 1
            else None
        ),
    )
    done = [t for t in tuner.oracle.trials.values() if t.status == "COMPLETED"]
    if done:
        console.say(
            f"[tuner] resuming the search in {directory}: {len(done)} trial(s) already "
            "finished are not run again"
        )
    from tfx.components.tuner.component import TunerFnResult  # TFX is loaded: its executor runs

    return TunerFnResult(tuner=tuner, fit_kwargs={"epochs": space.tuning_epochs})


def _local_hypermodel(
    fn_args, data, space: SearchSpace, settings
) -> tuple[AccumulationHyperModel, object]:
    """The HyperModel whose trials train on this process's devices, and their strategy."""
    strategy = choose_strategy()
    hypermodel = AccumulationHyperModel(
        space,
        read_splits(fn_args, data),
        settings.model,
        strategy.num_replicas_in_sync,
        precision=settings.precision,
        model_hyperparameters=settings.model_hyperparameters,
    )
    return hypermodel, strategy


def worker_tuner(fn_args, spec: dict) -> tuple[keras_tuner.Tuner, dict]:
    """The tuner of a parallel-search worker (``tfx_accum.components.search.tuner_worker``)."""
    config = ModuleConfig.from_custom_config(fn_args.custom_config)
    settings = config.model_settings
    space = SearchSpace.from_config(spec["search_space"])  # as the chief probed it
    data = model_data(fn_args, config, "tuner")
    if spec.get("probe"):
        # Only the memory probe, for a chief that must not touch the GPU itself.
        splits = read_splits(fn_args, data)
        hypermodel = AccumulationHyperModel(
            space,
            splits,
            settings.model,
            precision=settings.precision,
            model_hyperparameters=settings.model_hyperparameters,
        )
        hypermodel.probe_micro_batches()
        print(json.dumps({"micro_batch_choices": list(hypermodel.space.micro_batch_choices)}))
        return None, {}
    hypermodel, _ = _local_hypermodel(fn_args, data, space, settings)
    tuner = make_tuner(space, hypermodel, spec["directory"], None, resume=True)
    return tuner, {"epochs": space.tuning_epochs}
