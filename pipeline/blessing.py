"""The blessing rule: which evaluation metric must reach which value for Pusher to push.

The Evaluator (TFMA) blesses the model when the metric on the eval split reaches the
threshold. There is no baseline model (self-hosted Kubeflow Pipelines cannot run the
Resolver that finds one), so the rule is absolute. The threshold is a run-time parameter of
a compiled pipeline (:data:`THRESHOLD_PARAMETER`): :func:`eval_config` writes it at compile
time, :func:`with_threshold` sets a run's value in the Evaluator's executor
(:mod:`tfx_accum.pipeline.parameterized`). Changing the rule (another metric, another name)
is a change of this module only.

Example::

    config = eval_config("label", 0.95)
    with_threshold(config, 0.9)  # what a run with accuracy_threshold=0.9 evaluates
"""

from __future__ import annotations

import tensorflow_model_analysis as tfma

from tfx_accum.components.export import LABELS_SIGNATURE, OUTPUT_KEY, SERVING_SIGNATURE

# The run-time parameter (and CLI option, --accuracy-threshold) that holds the threshold.
THRESHOLD_PARAMETER = "accuracy_threshold"
# The TFMA metric the threshold applies to (the label is a class index: see export.py).
METRIC = "SparseCategoricalAccuracy"


def check_threshold(value: float) -> float:
    """``value`` if it can be the metric's lower bound (an accuracy: 0 to 1), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{THRESHOLD_PARAMETER} must be a number in [0, 1], got {value!r}.")
    return float(value)


def eval_config(label_key: str, threshold: float) -> tfma.EvalConfig:
    """The Evaluator's config: :data:`METRIC` on the eval split must reach ``threshold``."""
    config = tfma.EvalConfig(
        model_specs=[
            tfma.ModelSpec(
                label_key=label_key,
                signature_name=SERVING_SIGNATURE,
                prediction_key=OUTPUT_KEY,
                # The label as a class index, from the model's own label vocabulary (string
                # labels) or range check (components/export.py).
                preprocessing_function_names=[LABELS_SIGNATURE],
            )
        ],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[
            tfma.MetricsSpec(
                metrics=[
                    tfma.MetricConfig(class_name=METRIC),
                    tfma.MetricConfig(class_name="ExampleCount"),
                ]
            )
        ],
    )
    return with_threshold(config, threshold)


def with_threshold(config: tfma.EvalConfig, threshold: float) -> tfma.EvalConfig:
    """``config`` (changed in place) with :data:`METRIC`'s lower bound set to ``threshold``."""
    threshold = check_threshold(threshold)
    found = False
    for spec in config.metrics_specs:
        for metric in spec.metrics:
            if metric.class_name == METRIC:
                metric.threshold.value_threshold.lower_bound.value = threshold
                found = True
    if not found:
        raise ValueError(f"The eval config has no {METRIC} metric to set a threshold on.")
    return config
