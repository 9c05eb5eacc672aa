"""The model alone, as a Keras user installs it (#30): registered for ``load_model`` by
``import tfx_accum``, and the TFX parts answering one line without the ``tfx`` extra.

Run by the main suite and by scripts/newest_stack.sh, against the wheel installed with no
extra (where the missing-extra tests meet the real thing).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tfx_accum import extras

CORE_ONLY = bool(extras.missing())

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


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("saved") / "model.keras"
    proc = _python(SAVE, str(path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return path


@pytest.mark.parametrize(
    "imports",
    [
        "import tfx_accum; import keras",
        "import keras; import tfx_accum",
        "import tfx_accum; import tensorflow; import keras",
        "import tensorflow; import tfx_accum; import keras",
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
        "tfx_accum.components.training.trainer",
        "tfx_accum.components.search.tuner",
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
