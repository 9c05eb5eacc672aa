"""The model alone, as a Keras user installs it: registered for ``load_model`` by
``import tfx_accum``, the TFX parts answering one line without the ``tfx`` extra, a core that
requires no Keras backend, and a missing backend answering one line naming its extra.

Run by the main suite and by scripts/newest_stack.sh, against the wheel installed with one
backend's extra and no other (where the missing-extra and missing-backend tests meet the real
thing; elsewhere the missing package is blocked in a fresh process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tfx_accum import backends, extras

CORE_ONLY = bool(extras.missing())
# Set by scripts/newest_stack.sh for its JAX and PyTorch stages: one backend's extra alone,
# no TensorFlow.
WITHOUT_TENSORFLOW = bool(os.environ.get("TFX_ACCUM_TESTS_WITHOUT_TENSORFLOW"))
NEEDS_TF = pytest.mark.skipif(find_spec("tensorflow") is None, reason="no TensorFlow installed")

SAVE = """
import sys
import keras, numpy as np
from tfx_accum import GradientAccumulationModel
inputs = keras.Input((3,))
outputs = keras.layers.Dense(1)(inputs)
model = GradientAccumulationModel(inputs, outputs, gradient_accumulation_steps=3)
model.compile(optimizer="sgd", loss="mse")
model.fit(np.ones((6, 3)), np.ones((6, 1)), batch_size=6, verbose=0)
model.save(sys.argv[1])
"""


def _python(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env=env
    )


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("saved") / "model.keras"
    proc = _python(SAVE, str(path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return path


@pytest.mark.e2e
@pytest.mark.parametrize(
    "imports",
    [
        "import tfx_accum; import keras",
        "import keras; import tfx_accum",
        pytest.param("import tfx_accum; import tensorflow; import keras", marks=NEEDS_TF),
        pytest.param("import tensorflow; import tfx_accum; import keras", marks=NEEDS_TF),
        # Another library asking whether Keras is installed, before importing it.
        "import tfx_accum, importlib.util; importlib.util.find_spec('keras'); import keras",
    ],
)
def test_import_tfx_accum_registers_the_model_for_load_model(saved_model, imports):
    """In a fresh process, whichever of TensorFlow, Keras and tfx_accum comes first."""
    proc = _python(
        f"{imports}\nm = keras.saving.load_model({str(saved_model)!r})\n"
        "print(type(m).__name__, m.gradient_accumulation_steps)"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-2:] == ["GradientAccumulationModel", "3"]


def test_import_tfx_accum_stays_light():
    """The CLI imports the package for --help and its input checks: no TensorFlow yet."""
    proc = _python(
        "import sys, tfx_accum\n"
        "heavy = ('tensorflow', 'keras', 'tfx', 'apache_beam')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


@pytest.mark.skipif(not CORE_ONLY, reason="the tfx extra is installed here")
@pytest.mark.parametrize(
    "module",
    [
        "tfx_accum.pipeline",
        "tfx_accum.components.training.trainer_module",
        "tfx_accum.components.search.tuner_module",
    ],
)
def test_without_the_extra_the_tfx_parts_name_it(module):
    proc = _python(f"import {module}")
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tfx_accum.extras.MissingExtra: ")
    assert "pip install 'tfx-accum[tfx]'" in last


@pytest.mark.skipif(not CORE_ONLY, reason="the tfx extra is installed here")
def test_without_the_extra_the_command_is_one_line_and_exit_2():
    command = Path(sys.executable).with_name("tfx-accum")
    proc = subprocess.run([str(command), "run"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1
    assert "pip install 'tfx-accum[tfx]'" in proc.stderr


@pytest.mark.skipif(CORE_ONLY, reason="the real thing is tested above")
def test_a_missing_package_of_the_extra_is_named():
    """Here, with the extra installed: one of its packages made missing, in a fresh process
    (the check runs once per process, when the first TFX part is imported)."""
    proc = _python(
        "from tfx_accum import command, extras\n"
        "extras.PACKAGES = (*extras.PACKAGES, 'no_such_package_of_tfx')\n"
        "command.entry(['run'])"
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stdout == "" and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("tfx-accum: error: ")
    assert "no_such_package_of_tfx is not installed" in proc.stderr
    assert "pip install 'tfx-accum[tfx]'" in proc.stderr


# ------------------------------------------------------------------ the Keras backends


def _requirements() -> dict[str, list[Requirement]]:
    """The installed distribution's requirements: "" for the core, else by extra."""
    found: dict[str, list[Requirement]] = {}
    for text in metadata.requires("tfx-accum") or []:
        requirement = Requirement(text)
        extra = ""
        if requirement.marker is not None:
            extra = next(
                e
                for e in metadata.metadata("tfx-accum").get_all("Provides-Extra")
                if requirement.marker.evaluate({"extra": e})
            )
        found.setdefault(extra, []).append(requirement)
    return found


def test_the_core_requires_no_backend_and_each_backend_has_its_extra():
    """What pip reads from the installed wheel's metadata (Requires-Dist, Provides-Extra)."""
    found = _requirements()
    assert sorted(r.name for r in found[""]) == ["keras", "numpy"]
    for backend, modules in backends.MODULES.items():
        # The extra the missing-backend line names installs exactly that backend.
        assert sorted(r.name for r in found[backend]) == sorted(modules), backend
    tensorflow = {r.name: r for r in found["tfx"]}["tensorflow"]
    assert tensorflow.specifier == found["tensorflow"][0].specifier  # the same TensorFlows
    assert "tfx" in {r.name for r in found["tfx"]}
    # pip with the CPU wheel of torch 2.13.0 on disk installs no other torch.
    assert found["torch"][0].specifier.contains("2.13.0")


@pytest.mark.skipif(
    not WITHOUT_TENSORFLOW, reason="only tfx-accum[jax] or [torch] lacks TensorFlow"
)
def test_the_jax_or_torch_extra_alone_installs_no_tensorflow():
    assert find_spec("tensorflow") is None
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.distribution("tensorflow")
    proc = _python("import tensorflow")
    assert proc.returncode == 1 and "No module named 'tensorflow'" in proc.stderr


# A fresh process in which the backend's modules cannot be imported, as where it is not
# installed (where it is not, the blocker finds nothing to block).
BLOCKER = """
import sys
class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {modules!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, _NotInstalled())
"""
USE_THE_MODEL = """
import json
for attempt in range(2):
    try:
        {use}
    except ImportError as e:
        print(json.dumps([type(e).__name__, str(e), isinstance(e, ModuleNotFoundError)]))
"""


@pytest.mark.parametrize("backend", sorted(backends.MODULES))
@pytest.mark.parametrize(
    "use",
    [
        "from tfx_accum import GradientAccumulationModel",
        "import tfx_accum; import keras",
        "from tfx_accum.components.accumulation.model import GradientAccumulationModel",
    ],
)
def test_a_missing_backend_is_one_line_naming_its_extra(backend, use):
    """Keras imports its backend at ``import keras``; tfx_accum's line comes first, each time."""
    modules = backends.MODULES[backend]
    code = BLOCKER.format(modules=modules) + USE_THE_MODEL.format(use=use)
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = _python(code, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2, proc.stdout  # both attempts fail
    for line in lines:
        kind, message, module_not_found = json.loads(line)
        assert kind == "MissingBackend" and module_not_found
        assert "\n" not in message and message.startswith("tfx-accum: ")
        assert f"backend is {backend!r}" in message
        assert backends.install_line(backend) in message
