"""TFX Transform's output, as the Tuner and Trainer use it (``fn_args.transform_graph_path``).

With a ``transform_graph`` input, TFX's Tuner and Trainer hand the module the transform
graph's location, and the ``examples`` are Transform's ``transformed_examples``. The
modules then:

- parse the examples by the *transformed* schema (``transformed_metadata.schema``): the
  features and the label the model sees are the transformed ones (``species_xf``);
- export TFX's convention (``tfx/examples/penguin/penguin_utils_base.py``): a
  ``serving_default`` that takes raw serialized ``tf.Example``s, parses the raw features the
  model's inputs are computed from, applies the transform graph and then the model; and a
  ``transform_features`` signature (raw examples to every transformed feature, the label's
  too) for TFMA's ``preprocessing_function_names``.

Which raw features the serving signature parses is measured, not guessed: a raw feature is
parsed when leaving it out would drop one of the model's transformed inputs (TFT's layer
drops the outputs whose inputs are missing). The label's raw feature is thus left out, and
a served example that lacks a feature the model needs fails to parse instead of being
answered from a default.
"""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

TRANSFORM_FEATURES_SIGNATURE = "transform_features"  # TFX's and TFMA's name


def transform_output_path(fn_args) -> str | None:
    """The transform graph's location when the component has a ``transform_graph`` input
    (TFX 1.16 sets ``transform_graph_path``; ``transform_output`` is its deprecated name)."""
    return (
        getattr(fn_args, "transform_graph_path", None)
        or getattr(fn_args, "transform_output", None)
        or None
    )


@functools.lru_cache(maxsize=4)
def load(path: str):
    """``tft.TFTransformOutput`` of ``path`` (loaded once per process and path)."""
    import tensorflow_transform as tft

    return tft.TFTransformOutput(path)


def transformed_schema(path: str):
    """The schema of Transform's transformed examples."""
    return load(path).transformed_metadata.schema


def serving_raw_spec(path: str, model_inputs: set[str]) -> dict[str, Any]:
    """The raw feature spec the serving signature parses: the raw features that some
    transformed model input is computed from (see the module's docstring)."""
    output = load(path)
    raw_spec = output.raw_feature_spec()
    layer = output.transform_features_layer()
    examples = tf.TensorSpec([None], tf.string)

    def outputs_without(name: str | None) -> set[str]:
        spec = {k: v for k, v in raw_spec.items() if k != name}
        traced = tf.function(lambda s: layer(tf.io.parse_example(s, spec)))
        return set(traced.get_concrete_function(examples).structured_outputs)

    available = outputs_without(None)
    missing = model_inputs - available
    if missing:
        raise ValueError(
            f"The transform graph at {path} computes no {', '.join(sorted(missing))} from raw "
            "examples: the model's inputs must be outputs of the preprocessing_fn."
        )
    return {
        name: spec for name, spec in raw_spec.items() if not model_inputs <= outputs_without(name)
    }
