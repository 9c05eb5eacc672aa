"""The signature a run would push, checked against what the serving directory serves.

A model server watching ``<output-dir>/serving_model`` loads the newest version. A run with
another label (``--label-key``) or task into the same output directory pushes a model whose
``serving_default`` outputs differ (``predictions`` where clients read ``scores`` and
``classes``, or scores over other classes): the server would switch to it without a word.
Such a run is refused before anything runs, naming both signatures, unless
``--allow-signature-change`` asks for it.
"""

from __future__ import annotations

from pathlib import Path

from tfx_accum.components.training.serving_versions import local_versions
from tfx_accum.pipeline.errors import InputError

SIGNATURE = "serving_default"
Outputs = dict[str, tuple[str, tuple[int, ...]]]


def served_outputs(version_dir: Path) -> Outputs | None:
    """``{output: (dtype, shape)}`` of the ``serving_default`` signature of the SavedModel
    in ``version_dir``; None where it has none or cannot be read."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    try:
        saved = saved_model_pb2.SavedModel.FromString((version_dir / "saved_model.pb").read_bytes())
        signature = saved.meta_graphs[0].signature_def[SIGNATURE]
    except Exception:  # noqa: BLE001 - not a SavedModel we can read: nothing to compare
        return None
    if not signature.outputs:
        return None
    return {
        name: (
            tf.as_dtype(info.dtype).name,
            tuple(-1 if d.size < 0 else d.size for d in info.tensor_shape.dim),
        )
        for name, info in sorted(signature.outputs.items())
    }


def describe(outputs: Outputs) -> str:
    """``scores float32 (-1, 10), classes string (-1, 1)``: a signature's outputs."""
    return ", ".join(f"{name} {dtype} {shape}" for name, (dtype, shape) in sorted(outputs.items()))


def check_signature(
    serving_dir: Path, task: str, num_classes: int | None, label_key: str, allow: bool
) -> None:
    """Refuses (``InputError``) a run whose model would serve other outputs than the newest
    version in ``serving_dir``, unless ``allow``."""
    versions = local_versions(str(serving_dir))
    if not versions:
        return
    newest = serving_dir / versions[-1]
    served = served_outputs(newest)
    if served is None:
        return
    from tfx_accum.components.training.export import serving_outputs

    ours = serving_outputs(task, num_classes)
    if served == ours or allow:
        return
    raise InputError(
        f"{newest} serves {SIGNATURE} with {describe(served)}; this run's model (label "
        f"{label_key!r}, {task}) would serve {describe(ours)}, and a server watching "
        f"{serving_dir} would switch to it: use another --output-dir, or "
        "--allow-signature-change to push it there."
    )
