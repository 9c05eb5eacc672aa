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


# Parallel runs (`pytest -n 2 --dist loadgroup`, what scripts/test.sh runs): every module is
# one unit of work, so its module fixtures are built once; the modules that share one of the
# session fixtures above form one unit, so that one worker builds it. The units that run
# pipelines come first (one end-to-end module can take minutes), so that the light ones
# fill the end of the run instead of a long one starting last.
SHARED_SESSION_FIXTURES = ("first_run", "image")


def pytest_collection_modifyitems(config, items):
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    weight = {}
    for module, module_items in modules.items():
        used = {name for item in module_items for name in item.fixturenames}
        group = next((name for name in SHARED_SESSION_FIXTURES if name in used), module)
        for item in module_items:
            item.add_marker(pytest.mark.xdist_group(group))
        e2e = any(item.get_closest_marker("e2e") for item in module_items)
        weight[module] = SHARED_SESSION_FIXTURES.index(group) if group != module else 2 + (not e2e)
    # Modules stay contiguous (a module fixture is set up once); heavier units first.
    order = sorted(modules, key=lambda module: weight[module])
    items[:] = [item for module in order for item in modules[module]]
