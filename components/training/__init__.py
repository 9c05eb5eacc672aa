"""Training and export: the TFX Trainer module, the models, the Pusher and the Evaluator's metrics.

Owns ``training.trainer_module.run_fn``, the built-in and custom models, the serving export, the
backups, the atomic Pusher, TFX's Tuner and Trainer components and the Vertex AI Trainer.
"""

from __future__ import annotations

__all__ = ["run_fn"]


def __getattr__(name: str):
    # Imported on first use: the Trainer module needs TFX.
    if name == "run_fn":
        from tfx_accum.components.training.trainer_module import run_fn

        return run_fn
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
