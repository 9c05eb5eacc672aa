"""``import tfx_accum`` registers :class:`GradientAccumulationModel` with Keras, lazily.

``keras.saving.load_model`` finds a custom class only if the module that defines it was
imported (Keras imports modules on its own for Keras's packages only). ``import tfx_accum``
must therefore make the class known, yet stay cheap: the ``tfx-accum`` command imports this
package for ``--help`` and for its input checks, before any TensorFlow is needed. The
registering itself is Keras's public mechanism, ``keras.saving.register_keras_serializable``
on the class, run when its module is imported; Keras has no hook that imports a third-party
module at load time (``custom_objects`` and ``custom_object_scope`` also need the class
imported), so only the moment of that import is chosen here.

So the class is registered as soon as Keras is there: at once if TensorFlow or Keras is
already imported, else right after the first of them finishes importing (a finder on
``sys.meta_path`` that removes itself once that import has run). ``import tensorflow`` imports Keras
itself, so whichever comes first, both are complete when the model's module is imported.
Registration never breaks the user's import: on another Keras backend (the model supports
those of ``backends.MODULES``: TensorFlow, JAX, PyTorch) nothing is registered, and a failure
is one warning naming the way out.
A Keras that fails to import because its backend is not installed fails with
:class:`tfx_accum.backends.MissingBackend` instead, one line naming the extra to install
(and the finder stays for the next attempt).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

from tfx_accum import backends

_TRIGGERS = ("tensorflow", "keras")


def register() -> None:
    """Imports the model's module, whose decorator registers the class (on its backends)."""
    import keras

    if keras.backend.backend() not in backends.MODULES:
        return
    import tfx_accum.components.accumulation.model  # noqa: F401 - registers on import


def _register_quietly() -> None:
    try:
        register()
    except Exception as error:  # noqa: BLE001 - never break the user's `import keras`
        warnings.warn(
            f"tfx-accum: GradientAccumulationModel was not registered with Keras "
            f"({type(error).__name__}: {error}); import tfx_accum.components.accumulation.model "
            "before keras.saving.load_model.",
            stacklevel=2,
        )


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of the first of ``_TRIGGERS`` imported.

    It stays on ``sys.meta_path`` until that import has run: a ``find_spec`` alone (another
    library asking ``importlib.util.find_spec("keras")`` whether Keras is installed) finds a
    spec whose loader never runs, and the import that follows is hooked all the same.
    """

    def __init__(self) -> None:
        self._finding = False  # inside our own find_spec: let the other finders answer
        self._running = False  # a trigger's import runs (TensorFlow's imports Keras): wait

    def find_spec(self, name, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        if name not in _TRIGGERS or self._finding or self._running:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._finding = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, original = spec.loader, spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            self._running = True
            try:
                original(module)
            except ImportError as error:
                del loader.exec_module
                missing = backends.missing_backend(error)  # the next attempt is hooked too
                if missing is None:
                    raise
                raise missing from error
            finally:
                self._running = False
            del loader.exec_module  # the loader's own method again
            _remove_finders()
            _register_quietly()

        loader.exec_module = exec_module  # this spec's loader instance only
        return spec


def _remove_finders() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _RegisterAfterImport)]


def register_with_keras() -> None:
    """Registers now if TensorFlow or Keras is imported, else after the first one is."""
    if any(name in sys.modules for name in _TRIGGERS):
        if not any(_importing(name) for name in _TRIGGERS):
            _register_quietly()
        return  # (imported from inside TensorFlow's own import: nothing to hook any more)
    if not any(isinstance(finder, _RegisterAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())


def _importing(name: str) -> bool:
    spec = getattr(sys.modules.get(name), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))
