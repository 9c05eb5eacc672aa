"""Which model the run trains: ``--model``, or the default that suits the data, checked
against the data before anything runs (the rules: tfx_accum.components.models.model_rules; a model
function is built once here to check it, tfx_accum.components.models.custom_model)."""

from __future__ import annotations

import argparse
import os

from tfx_accum import console
from tfx_accum.components.config import settings
from tfx_accum.pipeline.config import CLI_WORDS
from tfx_accum.pipeline.errors import InputError


def check_model_name(model: str | None) -> None:
    if model is not None and model not in settings.MODEL_NAMES:
        if not settings.is_model_function(model):
            raise InputError(
                f"--model {model!r}: use one of {', '.join(settings.MODEL_NAMES)}, or your own "
                "model function as package.module:function."
            )


def model_for(args: argparse.Namespace, summary, requested) -> str:
    """--model, or the default that fits the data (``summary``:
    tfx_accum.pipeline.checks.data.DataSummary,
    ``requested``: the run's ``ModelSettings``, for the columns the model gets).

    Images get ``cnn``, as do the embedded digits (a square pixel grid); tabular data gets
    ``mlp``. An image model on numeric columns needs a square grid; a model function's
    model must take the data's features (it is built once here to check), and the
    features it leaves out are named.
    """
    from tfx_accum.components.data.feature_kinds import CATEGORICAL
    from tfx_accum.components.models.model_rules import (
        ModelChoiceError,
        check_model_suits,
        default_model,
    )
    from tfx_accum.pipeline.checks.data import chosen_features

    model = args.model
    check_model_name(model)
    all_kinds = dict(summary.kinds)
    chosen = chosen_features(list(all_kinds), requested)
    kinds = {
        name: CATEGORICAL if name in requested.categorical_features else all_kinds[name]
        for name in chosen
    }
    if model is None:
        model = default_model(kinds, embedded_grid=args.data_root is None)
    if settings.is_model_function(model):
        from tfx_accum.pipeline.checks.model_path import add_current_directory

        if added := add_current_directory(model):
            console.say(added)
        # TensorFlow's start-up lines are not the run's: the console stays clean.
        with console.capture(os.devnull, verbose=args.verbose):
            import keras_tuner

            from tfx_accum.components.models.custom_model import (
                ModelFunctionError,
                call_model_function,
                declared_inputs,
            )

            description = summary.description(requested)
            try:
                built = call_model_function(
                    model, description, keras_tuner.HyperParameters(), words=CLI_WORDS
                )
            except ModelFunctionError as error:
                problem, declared = str(error), []
            else:
                problem, declared = None, declared_inputs(built)
        if problem:
            raise InputError(problem)
        left_out = [f.name for f in description.features if f.input_name not in declared]
        if left_out:
            shown = ", ".join(map(repr, left_out[:8])) + (", ..." if len(left_out) > 8 else "")
            console.say(
                f"[data] the model function declares {len(declared)} of "
                f"{len(description.features)} features; not used (not read, not served): {shown}"
            )
        return model
    try:
        check_model_suits(model, kinds, CLI_WORDS)
    except ModelChoiceError as error:
        raise InputError(str(error)) from None
    return model
