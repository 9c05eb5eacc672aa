"""The container image's layout, replayed without Docker, for the tests that run in it.

``kubeflow/Dockerfile``'s own build steps (``python -m
tfx_accum.kubeflow.image_tools.image_replay``): the project's wheel built in the builder stage and
installed, non-editable, into a fresh environment by the Dockerfile's install lines, then the
image's own check, in its ``WORKDIR``. ``TFX_ACCUM_TEST_DOCKERFILE=PATH`` replays another Dockerfile
(an older one, to see these tests fail on it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tfx_accum.kubeflow.image_tools.image_replay import ReplayedImage, ReplayError, replay

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = Path(os.environ.get("TFX_ACCUM_TEST_DOCKERFILE") or ROOT / "kubeflow" / "Dockerfile")


def replayed_image(directory: Path) -> ReplayedImage:
    """The cpu variant of the image, replayed into ``directory``."""
    try:
        return replay(DOCKERFILE, ROOT, directory, variant="cpu")
    except ReplayError as error:
        pytest.fail(f"replaying {DOCKERFILE}: {error}")


def image_env(image: ReplayedImage) -> dict[str, str]:
    """This process's environment with the image's ENV, for a command run "in" the image."""
    return {**os.environ, **image.env}
