"""Imported first by each module of tfx-accum's TFX parts: :func:`tfx_accum.extras.require_tfx`.

An import with a side effect on purpose, so that the check comes before the module's own
imports of TFX, Beam or Keras Tuner (``# isort: split`` keeps it first).
"""

from tfx_accum.extras import require_tfx

require_tfx()
