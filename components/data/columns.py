"""Which columns the model gets, and the names its inputs have: one set of rules.

Shared by the command line's data check and the Tuner and Trainer (no TensorFlow):

- :func:`select_features`: ``features`` (only these) and ``exclude_features``; a
  name that is not in the data is an error naming the columns there are, closest first;
- :func:`input_names`: a valid Keras/TensorFlow name for every feature. The data's own
  name is kept where it is one (``pixel_00``); otherwise (``sepal length (cm)``,
  ``od280/od315_of_diluted_wines``) characters outside ``[A-Za-z0-9_.-]`` become ``_``,
  and a clash gets a number. The names stay inside the model: the served signature reads
  the data's own names from the ``tf.Example``s.

Example:

```python
input_names(["sepal length (cm)", "a/b", "a_b"])
# {'sepal length (cm)': 'sepal_length_cm', 'a/b': 'a_b_2', 'a_b': 'a_b'}
```
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from tfx_accum.components.setting_words import CUSTOM_CONFIG, SettingWords, by_closeness

# TensorFlow's root name-scope pattern, which every Keras layer name must match.
_VALID = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-]*$")


class ColumnError(ValueError):
    """A column setting names what the data does not have."""


def select_features(
    names: Sequence[str],
    label_key: str,
    features: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    words: SettingWords = CUSTOM_CONFIG,
) -> list[str]:
    """The features the model gets, in the data's order: ``names`` without the label,
    only ``features`` when given, without ``exclude``. ``words``: how the messages name
    the two settings (``custom_config``'s keys, or the command line's flags)."""
    available = [n for n in names if n != label_key]
    features, exclude = (list(features) if features else None), list(exclude or ())
    for key, chosen in (("features", features or []), ("exclude_features", exclude)):
        setting = words.name(key)
        unknown = [n for n in chosen if n not in available]
        if label_key in unknown:
            raise ColumnError(f"{setting} names the label {label_key!r}, which is never a feature.")
        if unknown:
            raise ColumnError(
                f"{setting} names {', '.join(map(repr, unknown))}, not a feature of the data "
                f"(features, closest first: {_shown(by_closeness(unknown[0], available))})."
            )
    kept = [n for n in available if (features is None or n in features) and n not in exclude]
    if not kept:
        raise ColumnError(
            f"No feature is left for the model after {words.name('features')}/"
            f"{words.name('exclude_features')} (features: {_shown(available)})."
        )
    return kept


def input_names(names: Iterable[str]) -> dict[str, str]:
    """A valid, unique Keras input name for each feature name (itself where it is one)."""
    names = list(names)
    taken = {n for n in names if _VALID.match(n)}
    result: dict[str, str] = {}
    for name in names:
        if _VALID.match(name):
            result[name] = name
            continue
        base = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_.\-]", "_", name)).strip("_")
        base = base if base and _VALID.match(base) else f"feature_{base}".rstrip("_")
        candidate, number = base, 2
        while candidate in taken:
            candidate, number = f"{base}_{number}", number + 1
        taken.add(candidate)
        result[name] = candidate
    return result


def _shown(names: Sequence[str], limit: int = 8) -> str:
    return ", ".join(names[:limit]) + (", ..." if len(names) > limit else "")
