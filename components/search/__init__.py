"""The joint search of accumulation steps, micro-batch size and learning rate (Keras Tuner).

The search room, a sibling of training above models: owns the TFX Tuner module
(``search.tuner_module.tuner_fn``) and component, the search policy, the oracle and tuner
mixins, parallel trials and the search state; it never imports the training room.
"""

from __future__ import annotations

__all__ = ["SearchSpace", "tuner_fn"]


def __getattr__(name: str):
    # Imported on first use: ``search_space`` is light, the Tuner module needs TFX.
    if name == "SearchSpace":
        from tfx_accum.components.config.search_space import SearchSpace

        return SearchSpace
    if name == "tuner_fn":
        from tfx_accum.components.search.tuner_module import tuner_fn

        return tuner_fn
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
