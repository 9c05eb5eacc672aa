"""``tfx-accum run-compiled``: run a compiled Kubeflow spec locally before uploading it.

The spec runs under KFP's own local orchestrator (``kfp.local`` of KFP >= 2.17), which needs
protobuf 6 and so an environment of its own (``scripts/setup_env.sh`` makes one in
``.venv/kfp-local``; anywhere else: ``python3.10 -m venv kfp-env && kfp-env/bin/pip install
-r kubeflow/local-run-requirements.txt``). Each task's container command runs with an
interpreter standing in for the image (``tfx_accum.kubeflow.run_compiled``): this environment's, or
with ``--image-python`` and ``--workdir`` the image's own layout replayed without Docker
(``python -m tfx_accum.kubeflow.image_tools.image_replay``). ``NAME=VALUE`` arguments set run-time
parameters, as ``kfp run create`` does.

Example::

    tfx-accum compile --node-pool cpu --output spec.yaml --image IMAGE \\
        --pipeline-root "$PWD/kfp-root" --data-root "$PWD/data"
    tfx-accum run-compiled spec.yaml max_trials=4 train_steps=500
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from tfx_accum.pipeline.errors import InputError

KFP_PYTHON_ENV = "TFX_ACCUM_KFP_PYTHON"
_REPO_KFP_ENV = Path(__file__).resolve().parents[2] / ".venv" / "kfp-local" / "bin" / "python"
# tfx_accum.kubeflow.run_compiled: in a checkout and, installed, in the tfx_accum.kubeflow package.
_SCRIPT = Path(__file__).resolve().parents[2] / "kubeflow" / "run_compiled.py"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="pipeline YAML from tfx-accum compile (--node-pool cpu)")
    parser.add_argument(
        "parameters",
        nargs="*",
        metavar="NAME=VALUE",
        help="run-time parameters of the spec (data_root, max_trials, tuning_epochs, "
        "train_steps, bless_threshold), as for kfp run create",
    )
    parser.add_argument(
        "--pipeline-root", default=None, help="local directory (default: the spec's own root)"
    )
    parser.add_argument(
        "--kfp-python",
        default=None,
        help=f"Python of an environment with KFP >= 2.17 (default: ${KFP_PYTHON_ENV}, else "
        ".venv/kfp-local of a source checkout)",
    )
    parser.add_argument(
        "--image-python",
        default=None,
        help="interpreter standing in for the image (default: this environment's), e.g. the "
        "one python -m tfx_accum.kubeflow.image_tools.image_replay prints",
    )
    parser.add_argument(
        "--workdir",
        default=None,
        help="working directory of every task, as the image's WORKDIR (default: the current one)",
    )
    parser.add_argument("--no-cache", action="store_true", help="run every task")


def kfp_python(given: str | None) -> str:
    candidate = given or os.environ.get(KFP_PYTHON_ENV) or str(_REPO_KFP_ENV)
    if not Path(candidate).is_file():
        raise InputError(
            f"no KFP environment at {candidate}: run-compiled needs KFP >= 2.17 in an "
            "environment of its own (python3.10 -m venv kfp-env && kfp-env/bin/pip install "
            "-r kubeflow/local-run-requirements.txt), then --kfp-python kfp-env/bin/python."
        )
    return candidate


def run_compiled(args: argparse.Namespace) -> int:
    """Runs ``args.spec`` with kfp.local; the exit code is the orchestrator's (0: all tasks ran)."""
    spec = Path(args.spec)
    if not spec.is_file():
        raise InputError(f"no compiled spec at {spec}: run tfx-accum compile first.")
    for parameter in args.parameters:
        if "=" not in parameter:
            raise InputError(f"run-time parameter {parameter!r}: expected NAME=VALUE.")
    image_python = args.image_python or sys.executable
    if not Path(image_python).is_file():
        raise InputError(f"--image-python {image_python}: no such interpreter.")
    if args.workdir and not Path(args.workdir).is_dir():
        raise InputError(f"--workdir {args.workdir}: no such directory.")
    command = [
        kfp_python(args.kfp_python),
        str(_SCRIPT),
        str(spec),
        *args.parameters,
        "--tfx-python",
        image_python,
    ]
    if args.workdir:
        command += ["--workdir", str(Path(args.workdir).resolve())]
    if args.pipeline_root:
        command += ["--pipeline-root", args.pipeline_root]
    if args.no_cache:
        command.append("--no-cache")
    return subprocess.run(command, check=False).returncode
