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
# Tests mirror the package layout (tests/accumulation/, ...); a few test modules share their
# cases across folders (test_exactness_matrix's models, test_kubeflow's compile arguments), so
# every folder is importable whichever test runs first or alone.
for _folder in sorted(p for p in TESTS.iterdir() if p.is_dir() and p.name[0] not in "._"):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))
# The benchmarks' helpers (bench.tuner_component) are shared with the tests. Not when the
# tests run against an installed wheel (scripts/newest_stack.sh): the checkout's own
# tfx_accum/ directory would shadow it.
if str(TESTS.parent) not in sys.path and not os.environ.get("TFX_ACCUM_TESTS_INSTALLED"):
    sys.path.insert(1, str(TESTS.parent))


# One pipeline run on the embedded digits, shared by every module that needs its outputs
# (end-to-end checks, the Tuner component tests): the slow part runs once per session.
@pytest.fixture(scope="session")
def first_run(tmp_path_factory):
    from pipeline_runs import SMALL, run_cli

    out = tmp_path_factory.mktemp("e2e") / "out"
    # The run's own temporary directory, beside its outputs: the e2e tests check that the
    # run leaves it empty.
    (out.parent / "tmp").mkdir()
    proc, seconds = run_cli(
        "--output-dir", str(out), *SMALL, env={"TMPDIR": str(out.parent / "tmp")}
    )
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


# Parallel runs (`pytest -n N --dist loadscope`, what scripts/test.sh runs): every module is
# one unit of work, so that its module fixtures are built once, and the modules that share
# one of the session fixtures above form one unit, so that one worker builds it. (xdist's
# own `xdist_group` marks have no effect with pytest 9: their node-id suffix is lost, so
# the units are told to the scheduler through xdist's public hook instead.) The units that
# run pipelines come first, so that the light ones fill the end of the run.
SHARED_SESSION_FIXTURES = {
    "first_run": (
        "tests/pipeline/test_faults.py",
        "tests/training/test_multi_worker_trainer.py",
        "tests/search/test_parallel_search.py",
        "tests/pipeline/test_pipeline_e2e.py",
        "tests/search/test_search_at_scale.py",
        "tests/pipeline/test_dask_e2e.py",
    ),
    "image": (
        "tests/kubeflow/test_image.py",
        "tests/kubeflow/test_kubeflow_local.py",
        "tests/kubeflow/test_wheel.py",
    ),
}
UNIT = {module: name for name, modules in SHARED_SESSION_FIXTURES.items() for module in modules}
# The longest units, longest first (by their sequential time); the
# other modules that run pipelines follow, then the rest.
LONGEST_UNITS = ("first_run", "tests/pipeline/test_reliability.py", "image")


# XLA cases in the slow tier. Every exactness test keeps its graph cases in the fast tier
# (`-m "not e2e"`); its XLA cases (XLA's compile dominates them, seconds each) are the slow
# tier's, except in the tests of XLA's own paths (XLA_OWN: the static micro-batch schedule,
# retracing, steps_per_execution, the loops as compiled for a GPU, the inputs XLA refuses, the
# loss matrix's XLA cells), which keep theirs there but the exhaustive ones (XLA_SWEEP). CI
# runs them all. tests/test_layout.py checks that every name and id names a collected test.
XLA_OWN = frozenset(
    {
        "test_each_forward_pass_sees_one_micro_batch",
        "test_jit_compile_and_steps_per_execution",
        "test_loss_matrix",
        "test_ragged_inputs_split_along_their_rows_or_refused_under_xla",
        "test_sparse_inputs_under_xla_are_refused_in_one_line",
        "test_under_xla_a_new_k_retraces_the_step",
        "test_xla_loops_as_on_a_gpu",
    }
)
XLA_SWEEP = (
    "tests/accumulation/test_micro_batches.py::test_xla_loops_as_on_a_gpu[masked-two-outputs]",
    "tests/accumulation/test_micro_batches.py::test_xla_loops_as_on_a_gpu[lstm]",
)


def slow_xla_case(item) -> bool:
    """Whether a collected test is one of the slow tier's XLA cases."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return False
    if getattr(item, "originalname", item.name) in XLA_OWN:
        return item.nodeid in XLA_SWEEP
    return "xla" in callspec.id.split("-")


def pytest_itemcollected(item):  # at collection: before `-m` deselects by marker
    if slow_xla_case(item):
        item.add_marker(pytest.mark.e2e)


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::")[0]
            return UNIT.get(module, module)

    return ByUnit(config, log)


def pytest_collection_modifyitems(config, items):
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    for module, module_items in modules.items():
        used = {name for item in module_items for name in item.fixturenames}
        for name in SHARED_SESSION_FIXTURES:
            # The table above must name every module that uses a shared fixture.
            assert name not in used or UNIT.get(module) == name, (
                f"{module} uses the {name} fixture: add it to SHARED_SESSION_FIXTURES"
            )

    def weight(module: str) -> int:
        unit = UNIT.get(module, module)
        if unit in LONGEST_UNITS:
            return LONGEST_UNITS.index(unit)
        e2e = any(item.get_closest_marker("e2e") for item in modules[module])
        return len(LONGEST_UNITS) + (not e2e)

    # Modules stay contiguous (a module fixture is set up once); heavier units first.
    order = sorted(modules, key=weight)
    seed = os.environ.get("TFX_ACCUM_SHUFFLE_MODULES")
    if seed:  # to find order dependence: the modules in a seeded random order (tests in each
        # module keep theirs), so other modules share a worker and run before each other
        import random

        random.Random(int(seed)).shuffle(order)
    items[:] = [item for module in order for item in modules[module]]
