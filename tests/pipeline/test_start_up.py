"""What every run pays before and around its work: imports, and TFX's packaging for Beam.

Both are fixed costs of every local run and of every Kubeflow step's pod, seconds each on
a 2-core machine (bench/results/pipeline.md).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tfx_accum.pipeline.beam_args import local_beam_args, pod_beam_args, without_tfx_sdist
from tfx_accum.pipeline.local.dask_cluster import dask_beam_args


@pytest.mark.e2e
def test_a_local_run_never_imports_the_google_cloud_clients():
    """``from tfx import v1`` imports TFX's Google Cloud extensions, and with them
    ``google.cloud.aiplatform``, slow to import. A local run builds, and the Tuner and Trainer
    modules run, without them; only the Vertex AI Trainer
    (tfx_accum.components.training.vertex_trainer) needs it."""
    code = (
        "import sys\n"
        "from tfx_accum.pipeline.pipeline import create_pipeline\n"
        "import tfx_accum.pipeline.local.runner, tfx_accum.pipeline.run_parameters\n"
        "import tfx_accum.components.search.tuner_module\n"
        "import tfx_accum.components.training.trainer_module\n"
        "p = create_pipeline('p', '/r', '/d', '/s', tune=True, metadata_path='/tmp/m.db')\n"
        "from tfx.orchestration.local.local_dag_runner import LocalDagRunner\n"
        "print(len(p.components), sorted(m for m in ('google.cloud.aiplatform', 'tfx.v1')"
        " if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-2:] == ["8", "[]"], proc.stdout


@pytest.mark.parametrize(
    "args",
    [
        local_beam_args(300_000, cpus=2)[0],
        local_beam_args(2 * 2**30, cpus=8)[0],
        pod_beam_args(4.0),
        ["--runner=DirectRunner", "--direct_num_workers=2"],
        dask_beam_args("tcp://127.0.0.1:8786"),
    ],
)
def test_direct_runner_arguments_make_tfx_build_no_package(args, monkeypatch):
    """TFX builds an sdist of itself for every Beam component unless a
    dependency option is set; the DirectRunner's workers are this interpreter, the
    DaskRunner's run this environment too."""
    from tfx.utils import dependency_utils

    def no_build():
        raise AssertionError("TFX built its ephemeral package")

    monkeypatch.setattr(dependency_utils, "build_ephemeral_package", no_build)
    extended = without_tfx_sdist(args)
    assert extended[: len(args)] == args
    assert dependency_utils.make_beam_dependency_flags(extended) == extended
    with pytest.raises(AssertionError, match="ephemeral package"):
        dependency_utils.make_beam_dependency_flags(args)  # what it would otherwise do


@pytest.mark.parametrize(
    "args",
    [
        ["--runner=DataflowRunner", "--project=p"],
        ["--direct_num_workers=2", "--extra_package=/dist/mine.tar.gz"],
        ["--setup_file=./setup.py"],
        ["--direct_num_workers=2", "--environment_type=DOCKER"],
    ],
)
def test_other_runners_and_own_dependencies_are_left_to_tfx(args):
    """Remote workers install what TFX packages, and a user's own dependency option wins."""
    assert without_tfx_sdist(args) == args


def test_the_pipeline_passes_the_direct_runner_arguments_to_tfx():
    from tfx_accum.pipeline.pipeline import create_pipeline

    pipeline = create_pipeline("p", "/r", "/d", "/s", beam_pipeline_args=pod_beam_args(2.0))
    assert pipeline.beam_pipeline_args == without_tfx_sdist(pod_beam_args(2.0))
    assert any(a.startswith("--sdk_container_image=") for a in pipeline.beam_pipeline_args)
