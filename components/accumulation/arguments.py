"""The accumulation room's argument checks, shared by every layer above it.

``GradientAccumulationModel`` and the strategies check their counts here; the settings, the
search space and the module configuration reuse the same checks, so an argument is refused
with the same words wherever it is given.
"""

from __future__ import annotations

import math
from typing import Any


def validate_positive_int(name: str, value: Any, hint: str | None = None) -> int:
    """Returns ``value`` as an int >= 1, or raises naming ``name`` and the value.

    numpy integers are accepted; floats, strings, bools and None are not (``TypeError``);
    an int below 1 raises ``ValueError``.
    """
    suffix = f" ({hint})" if hint else ""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(
            f"`{name}` must be an int >= 1{suffix}. "
            f"Received: {name}={value!r} of type {type(value).__name__}."
        )
    value = int(value)
    if value < 1:
        raise ValueError(f"`{name}` must be an int >= 1{suffix}. Received: {name}={value}.")
    return value


def validate_positive_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"`{name}` must be a positive number. Received: {name}={value!r}.")
    if value <= 0:
        raise ValueError(f"`{name}` must be a positive number. Received: {name}={value!r}.")
    return float(value)
