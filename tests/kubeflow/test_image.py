"""The container image, checked without Docker: every pinned requirement of every variant
has a wheel for the image's platform or is built in the builder stage (this needs the
package indexes), and each variant installs exactly one TensorFlow distribution."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfx_accum.kubeflow.image_tools.check_image_wheels import check

# Runs the pipeline or a command in subprocesses (minutes): `pytest -m "not e2e"` skips it.
pytestmark = pytest.mark.e2e

DOCKERFILE = Path(__file__).resolve().parents[2] / "kubeflow" / "Dockerfile"

# The install lines of the image before the builder stage existed (commit 01964fa): the
# image did not build (pyfarmhash 0.3.2 is C++ source, the slim base has no compiler), and
# its TPU variant installed tensorflow-tpu over tensorflow.
OLD_DOCKERFILE = """
FROM python:3.10-slim-bookworm
RUN python -m pip install --upgrade pip \\
 && python -m pip install -c constraints.txt ".[tfx]" \\
 && case "$ACCELERATOR" in \\
      gpu) python -m pip install -c constraints.txt "tensorflow[and-cuda]" ;; \\
      tpu) python -m pip install "tensorflow-tpu==2.16.*" \\
             -f https://storage.googleapis.com/libtpu-releases/index.html ;; \\
      cpu) ;; \\
      *) echo "ACCELERATOR must be gpu, tpu or cpu, got $ACCELERATOR" >&2; exit 1 ;; \\
    esac \\
 && python -c "import sysconfig, tfx_accum.components as c; \\
      assert c.__file__.startswith(sysconfig.get_paths()['purelib']), 'from ' + c.__file__"
"""


def test_every_variant_of_the_image_can_be_built():
    problems, unverified, counts = check(DOCKERFILE.read_text())
    assert problems == []
    # Google's libtpu index is the one source not reachable from CI machines.
    assert all(line.startswith("libtpu==") for line in unverified), unverified
    assert counts["cpu"] > 100 and counts["gpu"] > counts["cpu"]  # + the CUDA wheels


def test_the_old_image_would_have_failed_the_check():
    problems, _, _ = check(OLD_DOCKERFILE)
    assert any(p.startswith("pyfarmhash==0.3.2 has no wheel") for p in problems), problems
    assert any("tpu: 2 TensorFlow distributions" in p for p in problems), problems
    assert any(p.startswith("tensorflow-tpu is not pinned") for p in problems), problems


# --- the image's layout (kubeflow/Dockerfile read and replayed without Docker) ---

# The image's earlier layout (commit f5406ed): the project installed from
# sources copied into the WORKDIR, which `python -m` and `python -c` put first on sys.path.
# The package imported there is the WORKDIR's copy (its subpackages found beside it by
# tfx_accum's __path__); its check asserts the installed one. (Its install line gains --no-compile
# here, to spare the test the bytecode: the failure does not depend on it; its builder gains
# the pinned build tools.)
OLD_LAYOUT = """
FROM python:3.10-slim-bookworm AS builder
RUN python -m pip install --no-cache-dir "pip==24.3.1" "setuptools==75.3.0" "wheel==0.45.1"
COPY constraints.txt /tmp/constraints.txt
RUN python -m pip wheel --no-deps --no-build-isolation -c /tmp/constraints.txt -w /wheels \\
      pyfarmhash google-apitools kfp kfp-server-api rouge-score
FROM python:3.10-slim-bookworm
ARG ACCELERATOR=gpu
WORKDIR /opt/tfx-accum
COPY --from=builder /wheels /wheels
COPY pyproject.toml constraints.txt README.md ./
COPY tfx_accum ./tfx_accum
COPY components ./components
COPY pipeline ./pipeline
COPY kubeflow ./kubeflow
RUN python -m pip install --no-compile --only-binary=:all: --find-links /wheels \\
      -c constraints.txt . \\
 && python -c "import sysconfig, tfx_accum.components as c; \\
      assert c.__file__.startswith(sysconfig.get_paths()['purelib']), 'from ' + c.__file__"
"""


def test_the_image_installs_its_wheel_as_a_user_of_its_own_with_an_empty_workdir():
    from tfx_accum.kubeflow.image_tools import dockerfile

    builder, final = dockerfile.parse(DOCKERFILE.read_text())
    # The project's wheel is built in the builder stage from its sources ...
    assert any(
        "pip wheel" in run.arguments and "/src" in run.arguments for run in builder.all("RUN")
    )
    # ... and the image copies nothing of them: only the wheels and the lock.
    copies = [dockerfile.copy_arguments(c) for c in final.all("COPY")]
    assert copies == [
        ("builder", ["/wheels"], "/wheels"),
        (None, ["constraints.txt"], "/wheels/constraints.txt"),
    ]
    install = " ".join(run.arguments for run in final.all("RUN"))
    # The project with its tfx and dask extras: the pipeline's components (and the
    # DaskRunner for --dask-scheduler), not the model alone.
    assert "--compile" in install and ' "tfx-accum[tfx,dask]"' in install
    assert final.last("USER") not in (None, "root", "0")
    assert final.last("WORKDIR") == "/home/tfx"
    assert final.all("RUN")[-1].arguments == "python -m tfx_accum.kubeflow.image_check"


def test_the_build_context_leaves_out_the_environment_and_caches():
    from tfx_accum.kubeflow.image_tools.image_replay import ignore_patterns, ignored

    patterns = ignore_patterns(DOCKERFILE.parents[1])
    for path in (
        ".venv/lib/python3.10/site-packages/x.py",
        ".git/HEAD",
        "components/__pycache__/a.pyc",
        "tests/kubeflow/test_image.py",
    ):
        assert ignored(path, patterns), path
    for path in ("components/accumulation/model.py", "kubeflow/node_pools.yaml", "constraints.txt"):
        assert not ignored(path, patterns), path


def test_the_image_check_finds_missing_and_stale_bytecode(tmp_path):
    import os
    import py_compile

    from tfx_accum.kubeflow.image_check import missing_bytecode

    module = tmp_path / "module.py"
    module.write_text("VALUE = 1\n")
    (tmp_path / "template.py").write_text("{% if x %}not python{% endif %}\n")  # skipped
    assert missing_bytecode([tmp_path]) == ([module], 2)
    py_compile.compile(str(module))
    assert missing_bytecode([tmp_path]) == ([], 2)
    os.utime(module, (1, 1))  # the source changed after compiling: stale
    assert missing_bytecode([tmp_path]) == ([module], 2)


def test_the_replayed_image_carries_bytecode_and_nothing_in_its_workdir(image):
    from tfx_accum.kubeflow.image_check import missing_bytecode

    (site_packages,) = (image.python.parent.parent / "lib").glob("python*/site-packages")
    missing, checked = missing_bytecode([site_packages / "tfx_accum", site_packages / "tfx"])
    assert missing == [] and checked > 500
    assert list(image.workdir.iterdir()) == []
    assert image.env["PYTHONDONTWRITEBYTECODE"] == "1" and image.user == "tfx"
    # Only the system steps were left to Docker.
    assert [s.split()[0] for s in image.skipped] == ["apt-get", "useradd"]


def test_the_old_layout_shadows_the_installed_package(tmp_path):
    """Replayed, the earlier layout fails where `docker build` failed: its own check."""
    from tfx_accum.kubeflow.image_tools.image_replay import ReplayError, replay

    old = tmp_path / "Dockerfile"
    old.write_text(OLD_LAYOUT)
    with pytest.raises(ReplayError, match=r"from \S*/opt/tfx-accum/components/__init__\.py"):
        replay(old, DOCKERFILE.parents[1], tmp_path / "replay", variant="cpu")


# A builder stage with the base image's own pip (23.0.1) and no `wheel`, which built
# rouge-score's sdist (no pyproject.toml) only when a warm pip cache already held its wheel.
OLD_BUILDER = """
FROM python:3.10-slim-bookworm AS builder
COPY constraints.txt /src/constraints.txt
RUN python -m pip wheel --no-deps -c /src/constraints.txt -w /wheels rouge-score
FROM python:3.10-slim-bookworm
"""


def test_the_replay_builds_from_an_empty_pip_cache_as_docker_does(tmp_path):
    """Each replayed stage gets a pip cache of its own, empty, whatever this machine's holds:
    that builder stage fails here as on a fresh docker builder, and a stage's RUN lines
    see that cache (the real builder's success from it is the `image` fixture's)."""
    from tfx_accum.kubeflow.image_tools.image_replay import ReplayError, replay

    old = tmp_path / "Dockerfile"
    old.write_text(OLD_BUILDER)
    with pytest.raises(ReplayError, match="rouge-score"):
        replay(old, DOCKERFILE.parents[1], tmp_path / "old", variant="cpu")

    probe = tmp_path / "Dockerfile.probe"
    probe.write_text(
        "FROM python:3.10-slim-bookworm AS builder\nWORKDIR /out\n"
        "RUN python -m pip cache dir > cache\n"
        'RUN (ls -A "$(cat cache)" || true) | wc -l > entries\n'
        "FROM python:3.10-slim-bookworm\n"
    )
    image = replay(probe, DOCKERFILE.parents[1], tmp_path / "probe", variant="cpu")
    out = image.stage_roots["builder"] / "out"
    assert Path((out / "cache").read_text().strip()).is_relative_to(tmp_path / "probe")
    assert (out / "entries").read_text().strip() == "0"
