"""Which built-in model suits which data: the rules, once (no TensorFlow).

The command line applies them before anything runs (exit 2 with the message), and
``build_model`` applies them again where it builds (tfx_accum.components.models.models),
so a Kubeflow run that no check saw fails with the same one line.

- the default: ``cnn`` for an image feature, or for the embedded 8x8 digits (a square
  pixel grid); ``mlp`` for other tables. Never a silent reshaping of arbitrary columns;
- ``mlp`` takes numbers, text and categories, not images;
- ``cnn`` and ``densenet121`` read one image feature, or the numeric columns as a square
  pixel grid of at least 3x3 when asked (never with text or category columns).

Example:

```python
check_model_suits("cnn", {"pixel_00": "numeric", ...})  # raises ModelChoiceError if not
```
"""

from __future__ import annotations

from tfx_accum.components.config.setting_words import CUSTOM_CONFIG, SettingWords
from tfx_accum.components.config.settings import DEFAULT_MODEL, IMAGE_MODELS, image_side
from tfx_accum.components.data.feature_kinds import IMAGE, NUMERIC

_WORDS = {"string": "text", "categorical": "category"}


class ModelChoiceError(ValueError):
    """A built-in model that cannot read the data; the message says what to use."""


def default_model(kinds: dict[str, str], embedded_grid: bool) -> str:
    """The built-in model for features of these kinds (``embedded_grid``: the digits)."""
    return "cnn" if IMAGE in kinds.values() or embedded_grid else DEFAULT_MODEL


def check_model_suits(
    model: str, kinds: dict[str, str], words: SettingWords = CUSTOM_CONFIG
) -> None:
    """Raises :class:`ModelChoiceError` when built-in ``model`` cannot read ``kinds``
    (``{feature: kind}``, the label excluded); ``words`` name the ``model`` setting."""
    images = [name for name, kind in kinds.items() if kind == IMAGE]
    if model == "mlp" and images:
        raise ModelChoiceError(
            f"Model 'mlp' takes numeric and string features; {images[0]!r} is an image. "
            f"Use {words.setting('model', 'cnn')} or 'densenet121'."
        )
    if model not in IMAGE_MODELS:
        return
    if len(images) > 1:
        raise ModelChoiceError(
            f"Model {model!r} reads one image feature; the data has {len(images)} "
            f"({', '.join(images)}). Write a model function "
            f"({words.setting('model', 'package.module:function')})."
        )
    if images:
        return
    others = [name for name, kind in kinds.items() if kind != NUMERIC]
    if others:
        raise ModelChoiceError(
            f"Model {model!r} reads the numeric columns as a square image, but "
            f"{others[0]!r} is a {_WORDS.get(kinds[others[0]], kinds[others[0]])} column. "
            f"Use {words.setting('model', 'mlp')}."
        )
    try:
        image_side(len(kinds), model, words)
    except ValueError as error:
        raise ModelChoiceError(str(error)) from None
