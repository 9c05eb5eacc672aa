"""The built wheel, installed as the image installs it, compiles a Kubeflow spec and is exact.

The wheel is the one the Dockerfile's builder stage builds, and the environment is the
image's (the ``image`` fixture: the Dockerfile's own install lines replayed into a fresh
virtual environment, non-editable, with no path to the source tree): so ``tfx_accum`` can
only come from the wheel. Everything runs from a temporary directory.
"""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

# Runs the pipeline or a command in subprocesses (minutes): `pytest -m "not e2e"` skips it.
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]

EQUIVALENCE = """
import json, os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import keras, numpy as np
import tfx_accum
from tfx_accum.components import GradientAccumulationModel

rng = np.random.default_rng(0)
x = rng.normal(size=(100, 8)).astype("float32")
y = rng.integers(0, 3, 100)
def build():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,))
    h = keras.layers.Dense(16, activation="tanh")(inputs)
    return inputs, keras.layers.Dense(3, activation="softmax")(h)
plain = keras.Model(*build())
ga = GradientAccumulationModel(*build(), gradient_accumulation_steps=4)
ga.set_weights(plain.get_weights())
for m in (plain, ga):
    m.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    m.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
diff = max(float(np.abs(a - b).max()) for a, b in zip(plain.get_weights(), ga.get_weights()))
print(json.dumps({"diff": diff, "file": tfx_accum.__file__, "version": tfx_accum.__version__}))
"""


@pytest.fixture(scope="module")
def wheel_env(image, tmp_path_factory):
    (wheel,) = (image.stage_roots["builder"] / "wheels").glob("tfx_accum-*.whl")
    venv = image.python.parent.parent
    (site_packages,) = (venv / "lib").glob("python*/site-packages")
    # Installed, not editable: no finder or path file leads back to the source tree.
    assert not list(site_packages.glob("__editable__*"))
    assert not [p for p in site_packages.glob("*.pth") if str(ROOT) in p.read_text()]
    return wheel, venv, tmp_path_factory.mktemp("wheel")


def test_wheel_installs_no_colliding_top_level_packages(wheel_env):
    wheel, _, _ = wheel_env
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"tfx_accum"}, top
    assert "tfx_accum/kubeflow/node_pools.yaml" in names


def test_the_wheel_holds_only_modules_the_installed_package_uses(wheel_env):
    """Nothing a user never imports: every module is imported or named by another one of
    the wheel, an entry point or a program (tests/installed_modules.py); the image tools
    (kubeflow/image_tools) are not in it."""
    from installed_modules import module_name, unused

    wheel, _, _ = wheel_env
    archive = zipfile.ZipFile(wheel)
    modules = {
        module_name(name): archive.read(name).decode()
        for name in archive.namelist()
        if name.endswith(".py")
    }
    assert "tfx_accum.components.training.trainer_module" in modules
    assert not [name for name in modules if ".image_tools" in name]
    assert not unused(modules), unused(modules)


def test_from_the_repository_root_the_installed_wheel_imports_the_subpackages(wheel_env):
    """Python imports the checkout's tfx_accum/ from there, before the installed one; its
    subpackages are found beside it."""
    _, venv, _ = wheel_env
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import tfx_accum.components as c; print(c.__file__)"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] == str(ROOT / "components" / "__init__.py")


def test_installed_wheel_compiles_for_a_gpu_node_pool(wheel_env):
    _, venv, work = wheel_env
    output = work / "gpu.yaml"
    proc = subprocess.run(
        [
            str(venv / "bin" / "tfx-accum"),
            "compile",
            "--node-pool",
            "gpu",
            "--output",
            str(output),
            "--image",
            "registry.example/tfx-accum:0.1.0-gpu",
            "--pipeline-root",
            "gs://bucket/root",
            "--data-root",
            "gs://bucket/data",
        ],
        capture_output=True,
        text=True,
        cwd=work,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    spec, platform = yaml.safe_load_all(output.read_text())
    assert "tfx_accum.components.training.trainer_module.run_fn" in json.dumps(spec)
    assert "tfx_accum.components.training.baseline_metrics" in json.dumps(spec)  # the Evaluator's
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    selector = executors["Trainer_executor"]["nodeSelector"]["labels"]
    assert selector == {"cloud.google.com/gke-accelerator": "nvidia-l4"}


def test_installed_wheel_trains_exactly(wheel_env):
    _, venv, work = wheel_env
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", EQUIVALENCE],
        capture_output=True,
        text=True,
        cwd=work,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert str(venv) in result["file"], result  # the wheel's copy, not the source tree
    assert result["version"] != "0+unknown"
    assert result["diff"] < 1e-5, result


BASELINE_METRICS = """
import json, os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.metrics import metric_specs
from tfx_accum.components.training import baseline_metrics
files = []
for cls in (baseline_metrics.MajorityClassLift, baseline_metrics.MeanPredictorLift):
    metric = metric_specs.metric_instance(baseline_metrics.metric_config(cls))
    files.append(__import__(type(metric).__module__, fromlist=["_"]).__file__)
print(json.dumps(files))
"""


def test_installed_wheel_holds_the_evaluators_baseline_metrics(wheel_env):
    """TFMA imports the baseline metrics by module name, as an Evaluator pod will."""
    _, venv, work = wheel_env
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", BASELINE_METRICS],
        capture_output=True,
        text=True,
        cwd=work,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(files) == 2 and all(str(venv) in f for f in files), files
