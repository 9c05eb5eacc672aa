"""The data as the Tuner and Trainer see it: features, task, statistics, splits, ExampleGen.

The data room, above config: owns the data description from TFX's artifacts (schema,
statistics, Transform's output), the streaming CSV ExampleGen executor, the examples'
fingerprint and the inputs tfx-accum's Tuner and Trainer components add to TFX's.
"""

from __future__ import annotations

__all__ = ["DataDescription", "describe"]


def __getattr__(name: str):
    # Imported on first use: the description needs TensorFlow.
    if name in __all__:
        from tfx_accum.components.data import features

        return getattr(features, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
