"""Names, defaults and validation of every setting, in one place.

The command line, the pipeline's ``custom_config``, the Tuner and Trainer modules and
the model all read their defaults and checks from here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["validate_positive_int"]


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
