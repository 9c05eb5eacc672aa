"""``tf.keras`` as Keras 3 while a model function runs, so TFX modules build models we can wrap.

TFX's example modules build their models with ``tf.keras`` (``import tensorflow as tf``,
``from tensorflow import keras``). What ``tf.keras`` is depends on the process: TensorFlow
resolves it once, on first use, to Keras 3, or to Keras 2 (the ``tf_keras`` package) when
``TF_USE_LEGACY_KERAS`` is set, which ``tensorflow_transform`` sets when it is imported
first (a unit test that imports the module file, whose own imports include
``tensorflow_transform``). A Keras 2 model cannot be wrapped for accumulation: Keras 3
refuses its tensors (``ValueError: All inputs values must be KerasTensors``).

:func:`keras_3_as_tf_keras` makes that harmless: while the function runs, ``tf.keras``
(TensorFlow's attribute, and the names of the function's module bound to it or to one of
its sub-modules) is Keras 3's own ``tf.keras`` namespace, then restored. In it,
``Model(inputs, outputs)`` keeps Keras 2's tolerance of inputs that no layer reads (TFX's
taxi example declares seven category inputs and encodes three; Keras 3 refuses such a
model): they are left out of the model, so they are neither read nor served.

A model that still comes back as Keras 2 (its layers made when the module was imported, or
``import tf_keras``) is refused in one line that says why (:func:`keras_2_message`).

Private internals, one place (tested with TensorFlow 2.16 and Keras 3.12): Keras 3's
``keras._tf_keras.keras`` (what TensorFlow's ``tf.keras`` is under Keras 3); a Keras
tensor's ``_keras_history`` and an operation's ``_outbound_nodes`` (the test Keras applies
itself, ``keras/src/ops/function.py``); TensorFlow's ``keras`` attribute (a
``KerasLazyLoader`` until first used, then the module).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import types
from collections.abc import Callable, Iterator
from typing import Any

import keras

_KERAS_3_TF_KERAS = "keras._tf_keras.keras"
# Module names ``tf.keras`` resolves to: Keras 2 (tf_keras), Keras 3, Keras 2 before tf_keras.
_TF_KERAS_MODULES = ("tf_keras.api._v2.keras", _KERAS_3_TF_KERAS, "keras.api._v2.keras")


def is_read(tensor: Any) -> bool:
    """Whether a layer reads ``tensor`` (Keras 3 refuses an input no layer reads)."""
    history = getattr(tensor, "_keras_history", None)
    operation = getattr(history, "operation", None)
    return operation is None or bool(getattr(operation, "_outbound_nodes", True))


class _Namespace:
    """Keras 3's ``tf.keras`` namespace, with :class:`Model` as Keras 2 built it."""

    def __init__(self) -> None:
        self.left_out: list[str] = []
        base = importlib.import_module(_KERAS_3_TF_KERAS)
        self.module = types.ModuleType("tfx_accum_keras_3_as_tf_keras")
        self.module.__dict__.update({k: v for k, v in vars(base).items() if not k.startswith("__")})
        self.module.Model = self._model_class()

    def _model_class(self) -> type:
        left_out = self.left_out

        class Model(keras.Model):
            """``keras.Model``; built from inputs and outputs, without the inputs no layer
            reads (Keras 2 kept them unused; Keras 3 refuses them)."""

            def __new__(cls, *args, **kwargs):
                functional = len(args) >= 2 or ("outputs" in kwargs and cls is Model)
                if cls is not Model or not functional:
                    return super().__new__(cls, *args, **kwargs)
                args = list(args)
                inputs = kwargs.pop("inputs") if "inputs" in kwargs else args.pop(0)
                outputs = kwargs.pop("outputs") if "outputs" in kwargs else args.pop(0)
                if isinstance(inputs, dict):
                    left_out.extend(k for k, t in inputs.items() if not is_read(t))
                    inputs = {k: t for k, t in inputs.items() if is_read(t)}
                elif isinstance(inputs, list | tuple):
                    left_out.extend(getattr(t, "name", "?") for t in inputs if not is_read(t))
                    inputs = [t for t in inputs if is_read(t)]
                return keras.Model(inputs, outputs, *args, **kwargs)

        return Model


def _counterpart(value: Any, namespace: types.ModuleType, tf_keras_attribute: Any) -> Any:
    """Keras 3's counterpart of a name bound to ``tf.keras`` or one of its modules, or None."""
    if value is tf_keras_attribute and value is not None:
        return namespace
    if not isinstance(value, types.ModuleType):
        return None
    name = getattr(value, "__name__", "") if "__name__" in vars(value) else ""
    for prefix in _TF_KERAS_MODULES:
        if name == prefix:
            return namespace
        if name.startswith(prefix + "."):
            try:
                return importlib.import_module(_KERAS_3_TF_KERAS + name[len(prefix) :])
            except ImportError:
                return None
    return None


@contextlib.contextmanager
def keras_3_as_tf_keras(function: Callable[..., Any]) -> Iterator[list[str]]:
    """While the block runs, ``tf.keras`` is Keras 3 for ``function`` (see the module's
    docstring); yields the names of the inputs that a ``Model`` built in it left out."""
    import tensorflow as tf

    namespace = _Namespace()
    attribute = vars(tf).get("keras")
    globals_ = getattr(function, "__globals__", None) or {}
    patches: list[tuple[dict, str, Any]] = [(vars(tf), "keras", namespace.module)]
    for name, value in list(globals_.items()):
        counterpart = _counterpart(value, namespace.module, attribute)
        if counterpart is not None:
            patches.append((globals_, name, counterpart))
    saved = [(where, name, where.get(name)) for where, name, _ in patches]
    try:
        for where, name, value in patches:
            where[name] = value
        yield namespace.left_out
    finally:
        for where, name, value in reversed(saved):
            where[name] = value


def is_keras_2(value: Any) -> bool:
    """Whether ``value`` is a Keras 2 (``tf_keras``) object."""
    return type(value).__module__.split(".")[0] == "tf_keras"


def keras_2_message(where: str) -> str:
    """One line: what a Keras 2 model or tensor means here, and the way out."""
    legacy = os.environ.get("TF_USE_LEGACY_KERAS")
    return (
        f"{where} built a Keras 2 (tf_keras) model, which tfx-accum cannot wrap (Keras 3 "
        f"only); TF_USE_LEGACY_KERAS={legacy!r} in this process (tensorflow_transform sets "
        "it when imported before tf.keras is first used): create the model's layers inside "
        "the function, with tf.keras or `import keras`, not at import or from tf_keras."
    )
