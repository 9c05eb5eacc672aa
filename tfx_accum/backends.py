"""The Keras backends and the extras that install them; the one line when a backend is missing.

tfx-accum's core depends on Keras and numpy only, as Keras itself does: the backend comes from
the user or from the extra named after it (``pip install 'tfx-accum[jax]'``, pyproject.toml's
``[project.optional-dependencies]``). ``import keras`` imports the configured backend at once
(``KERAS_BACKEND``, else ``~/.keras/keras.json``, else TensorFlow), so a missing backend
surfaces as Keras's ``ModuleNotFoundError`` for it. :func:`missing_backend` turns that error
into :class:`MissingBackend`, one line naming the extra to install and the backends that are
installed; ``tfx_accum.keras_registration`` raises it when Keras is first imported after
``import tfx_accum`` (which every import of the model is). A Keras imported before
``tfx_accum`` fails with Keras's own error.
"""

from __future__ import annotations

from importlib.util import find_spec

# Keras backend -> the top-level modules whose absence means the backend is not installed
# (jax raises its own ModuleNotFoundError, chained to jaxlib's, when jaxlib is missing).
MODULES = {"tensorflow": ("tensorflow",), "jax": ("jax", "jaxlib"), "torch": ("torch",)}


class MissingBackend(ModuleNotFoundError):
    """Keras's configured backend is not installed; the message names the extra for it."""


def install_line(backend: str) -> str:
    """The command that installs tfx-accum with ``backend`` (its extra has the same name)."""
    return f"pip install 'tfx-accum[{backend}]'"


def installed() -> list[str]:
    """The backends whose modules are installed here (found, not imported)."""
    return [name for name, modules in MODULES.items() if all(_found(m) for m in modules)]


def missing_backend(error: BaseException) -> MissingBackend | None:
    """The one-line error for ``error`` when it says a backend's module is missing, else None.

    ``error`` is what ``import keras`` raised; its chain is searched, since a backend can
    wrap the error of a module it needs (jax for jaxlib). A backend that is installed but
    fails to import is not reported as missing: its own error stands.
    """
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, ModuleNotFoundError) and not _found(error.name or ""):
            for backend, modules in MODULES.items():
                if error.name in modules:
                    return MissingBackend(_message(backend), name=error.name)
        error = error.__cause__ or error.__context__
    return None


def _message(backend: str) -> str:
    others = [name for name in installed() if name != backend]
    instead = (
        f", or set KERAS_BACKEND to one installed here ({', '.join(others)})" if others else ""
    )
    return (
        f"tfx-accum: Keras's backend is {backend!r} (KERAS_BACKEND or keras.json; tensorflow "
        f"by default) and it is not installed: {install_line(backend)}{instead}."
    )


def _found(module: str) -> bool:
    if not module:
        return False
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses the name, a broken install
        return False
