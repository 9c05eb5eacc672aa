"""Training and export: the TFX Trainer module, the Pusher and the Evaluator's metrics.

The training room, a sibling of search above models: owns
``training.trainer_module.run_fn`` and the Trainer's component and budget, the serving
export, the backups, the atomic Pusher and the Vertex AI Trainer; it never imports the
search room.
"""

from __future__ import annotations

__all__ = ["run_fn"]


def __getattr__(name: str):
    # Imported on first use: the Trainer module needs TFX.
    if name == "run_fn":
        from tfx_accum.components.training.trainer_module import run_fn

        return run_fn
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
