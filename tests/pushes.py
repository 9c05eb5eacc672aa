"""Pushes through the project's Pusher executor (tfx_accum.components.training.pusher), as the
Pusher component runs it, for the unit tests of what a push publishes."""

from __future__ import annotations

import json
from pathlib import Path


def push(root: Path, base: Path, model: bytes | None = b"model", blessed: bool = True):
    """Runs the executor on a model (a ``saved_model.pb`` holding ``model``; none: an
    empty model directory) and its blessing, under ``root``, into ``base``; returns the
    ``PushedModel`` artifact it filled in."""
    from tfx.proto import pusher_pb2
    from tfx.types import standard_artifacts
    from tfx.utils import proto_utils

    from tfx_accum.components.training.pusher import Executor

    model_dir = root / "model" / "Format-Serving"
    model_dir.mkdir(parents=True)
    if model is not None:
        (model_dir / "saved_model.pb").write_bytes(model)
    (root / "blessing").mkdir()
    artifact, blessing = standard_artifacts.Model(), standard_artifacts.ModelBlessing()
    artifact.uri, blessing.uri = str(root / "model"), str(root / "blessing")
    blessing.set_int_custom_property("blessed", int(blessed))
    pushed = standard_artifacts.PushedModel()
    pushed.uri = str(root / "pushed")
    destination = pusher_pb2.PushDestination(
        filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=str(base))
    )
    Executor().Do(
        {"model": [artifact], "model_blessing": [blessing]},
        {"pushed_model": [pushed]},
        {
            "push_destination": proto_utils.proto_to_json(destination),
            "custom_config": json.dumps({}),
        },
    )
    return pushed
