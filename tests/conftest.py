import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Test helpers (equivalence.py, ...) import each other by name. The project itself is
# imported as the installed package `tfx_accum` (an editable install in .venv), never as
# top-level `components`/`pipeline`.
TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
# The benchmarks' helpers (bench.tuner_component) are shared with the tests.
if str(TESTS.parent) not in sys.path:
    sys.path.insert(1, str(TESTS.parent))


# One pipeline run on the embedded digits, shared by every module that needs its outputs
# (end-to-end checks, the Tuner component tests): the slow part runs once per session.
@pytest.fixture(scope="session")
def first_run(tmp_path_factory):
    from pipeline_runs import SMALL, run_cli

    out = tmp_path_factory.mktemp("e2e") / "out"
    proc, seconds = run_cli("--output-dir", str(out), *SMALL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert proc.stderr == "", proc.stderr[-3000:]  # nothing but our lines, all on stdout
    return out, proc.stdout, seconds


# The container image's layout, replayed without Docker (tests/image_layout.py): shared by
# the installed-wheel tests and the compiled spec's run (about a minute, once a session).
@pytest.fixture(scope="session")
def image(tmp_path_factory):
    from image_layout import replayed_image

    # Whether or not an earlier test imported TFX (whose tensorflow_transform sets
    # TF_USE_LEGACY_KERAS=1 in this process), the replay must behave like a docker build, which
    # sees none of the host's environment: set it here so the order of tests cannot matter.
    before = os.environ.get("TF_USE_LEGACY_KERAS")
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    try:
        return replayed_image(tmp_path_factory.mktemp("image"))
    finally:
        if before is None:
            os.environ.pop("TF_USE_LEGACY_KERAS")
        else:
            os.environ["TF_USE_LEGACY_KERAS"] = before
