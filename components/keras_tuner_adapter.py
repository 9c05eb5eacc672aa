"""The one use of Keras Tuner internals: building a trial's model without a session reset.

Keras Tuner's ``Tuner._try_build`` calls ``keras.backend.clear_session()`` and
``gc.collect()`` before every trial, to free the previous trial's model. The
``AccumulationHyperModel`` keeps one model per accumulation step count and reuses it, so
there is nothing to free, and the two calls cost about 1.1 s of a 3-4 s trial on the
digits (measured: 8 trials in 31.7 s with them, 23.2 s without). The override below is
``_try_build`` of keras-tuner 1.4.8 without them (its ``max_model_size`` check is not used
here). Tested on the pinned keras-tuner (``constraints.txt``) by ``tests/test_components.py``.
"""

from __future__ import annotations

import keras
import keras_tuner


class NoSessionResetMixin:
    """Mixed into a ``keras_tuner.Tuner`` subclass whose hypermodel reuses its models."""

    def _try_build(self, hp):
        model = self._build_hypermodel(hp)  # keras-tuner's: build under the strategy
        if not isinstance(model, keras.Model):
            raise keras_tuner.errors.FatalTypeError(
                "HyperModel.build() must return a keras.Model. "
                f"Received: {model!r} of type {type(model).__name__}."
            )
        return model
