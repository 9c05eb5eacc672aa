"""Runs a compiled tfx-accum pipeline spec locally with KFP's own orchestrator (``kfp.local``).

This file runs in an environment of its own with KFP >= 2.17 (it needs protobuf 6; the TFX
1.16 environment has protobuf 3.20), started by ``tfx-accum run-compiled``. It does not
import tfx_accum or TFX.

``kfp.local`` (KFP 2.17) orders the DAG of the very YAML you would upload, builds each
task's ``ExecutorInput``, resolves the placeholders, reads ``executor_output.json`` and wires
the artifacts downstream. Two things stand between it and a TFX pipeline, and this file's
one adapter handles both:

- its ``SubprocessRunner`` runs only lightweight Python components, and its ``DockerRunner``
  needs a Docker engine. :class:`TfxContainerTaskHandler` runs a task's container command
  (``python -m tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor ...``) as a
  local process, with the tfx-accum environment's interpreter standing in for the image;
- it rebuilds a task's input artifacts with a generic type (``system.Artifact``), from which
  TFX cannot tell an ``Examples`` from a ``Schema``. The handler restores each input's type
  from the task's own ``--json_serialized_inputs_spec_args`` (the types the compiler wrote).

The handler replaces ``kfp.local.subprocess_task_handler.SubprocessTaskHandler`` (the class
``kfp.local`` looks up for ``SubprocessRunner`` when it runs a task); verified with kfp 2.17.0
(``kubeflow/local-run-requirements.txt``).

Run-time parameters (``NAME=VALUE``) are parsed as ``kfp run create`` (KFP 2.17) parses
them and passed to the pipeline, whose declared defaults fill in the rest; an unknown name is
refused with the known ones. ``--workdir`` is every task's working directory (the image's
``WORKDIR``, where ``python -m`` looks first for modules).

Usage (what ``tfx-accum run-compiled`` runs)::

    KFP_PYTHON run_compiled.py SPEC.yaml [NAME=VALUE ...] --tfx-python PYTHON
        [--workdir DIR] [--pipeline-root DIR] [--no-cache]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import yaml

_INVOCATION = "--json_serialized_invocation_args"
_INPUTS_SPEC = "--json_serialized_inputs_spec_args"
_ACCELERATOR_ENV = "TFX_ACCUM_ACCELERATOR"


def _typed_inputs(command: list[str]) -> list[str]:
    """``command`` with the input artifacts' types taken from the task's inputs spec."""
    if _INVOCATION not in command or _INPUTS_SPEC not in command:
        return command
    at_input, at_spec = command.index(_INVOCATION) + 1, command.index(_INPUTS_SPEC) + 1
    executor_input = json.loads(command[at_input])
    spec = json.loads(command[at_spec]).get("artifacts", {})
    for name, artifact_list in executor_input.get("inputs", {}).get("artifacts", {}).items():
        artifact_type = spec.get(name, {}).get("artifactType")
        if artifact_type:
            for artifact in artifact_list.get("artifacts", []):
                artifact["type"] = artifact_type
    fixed = list(command)
    fixed[at_input] = json.dumps(executor_input)
    return fixed


def _make_handler(tfx_python: str, workdir: str | None):
    from kfp.local import status, task_handler_interface

    class TfxContainerTaskHandler(task_handler_interface.ITaskHandler):
        """Runs a TFX container task's command here, with ``tfx_python`` as the image."""

        def __init__(self, image, full_command, pipeline_root, runner, env_vars=None):
            self.image = image
            self.full_command = list(full_command)
            self.env_vars = dict(env_vars or {})

        def run(self):
            command = _typed_inputs(self.full_command)
            if command and command[0] in ("python", "python3"):
                command = [tfx_python, *command[1:]]
            process = subprocess.run(
                command, env={**os.environ, **self.env_vars}, cwd=workdir, check=False
            )
            return status.Status.SUCCESS if process.returncode == 0 else status.Status.FAILURE

    return TfxContainerTaskHandler


def with_component_prefix(spec: dict) -> dict:
    """``spec`` with its components named ``comp-NAME``, as ``kfp.local`` expects.

    TFX names a component after its node (``Tuner``); ``kfp.local`` derives each task's
    directory by cutting the KFP compiler's ``comp-`` prefix off that name, which would turn
    ``Tuner`` into ``""``. Only the names change, not the graph.
    """
    renamed = {}
    for name, component in spec.get("components", {}).items():
        renamed[name if name.startswith("comp-") else f"comp-{name}"] = component
    spec["components"] = renamed
    for task in spec["root"]["dag"]["tasks"].values():
        ref = task.get("componentRef", {})
        if ref.get("name") and not ref["name"].startswith("comp-"):
            ref["name"] = f"comp-{ref['name']}"
    return spec


def problem_running_here(spec: dict, root: str | None) -> str | None:
    """Why ``spec`` cannot run on this machine (None: it can)."""
    for label, executor in spec["deploymentSpec"]["executors"].items():
        for env in executor.get("container", {}).get("env", []):
            if env["name"] == _ACCELERATOR_ENV and not env["value"].startswith("cpu"):
                return (
                    f"{label} is compiled for accelerators ({env['value']}); to run a spec "
                    "locally, compile it with --node-pool cpu and local --pipeline-root and "
                    "--data-root paths."
                )
    if not root or "://" in root:
        return (
            f"the pipeline root {root!r} is not a local path; compile with a local "
            "--pipeline-root, or pass --pipeline-root DIR."
        )
    return None


def parse_arguments(spec: dict, parameters: list[str]) -> tuple[dict, str | None]:
    """``(arguments, problem)``: the run-time parameters ``NAME=VALUE``, typed as KFP does."""
    from kfp.cli.utils.parsing import parse_parameter_value

    declared = spec["root"].get("inputDefinitions", {}).get("parameters", {})
    arguments = {}
    for parameter in parameters:
        name, _, text = parameter.partition("=")
        if name not in declared:
            return {}, (
                f"the spec has no run-time parameter {name!r}; it has: "
                + (", ".join(sorted(declared)) or "none")
            )
        value = parse_parameter_value(text)
        if declared[name].get("parameterType") == "NUMBER_DOUBLE" and isinstance(value, int):
            value = float(value)  # bless_threshold=1 is a number, as for the KFP backend
        arguments[name] = value
    return arguments, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", help="compiled pipeline YAML (tfx-accum compile --target kfp)")
    parser.add_argument("parameters", nargs="*", metavar="NAME=VALUE")
    parser.add_argument("--tfx-python", required=True, help="interpreter standing in for the image")
    parser.add_argument("--workdir", help="every task's working directory (the image's WORKDIR)")
    parser.add_argument("--pipeline-root", help="default: the spec's defaultPipelineRoot")
    parser.add_argument("--no-cache", action="store_true", help="run every task")
    args = parser.parse_args(argv)

    with open(args.spec) as handle:
        documents = list(yaml.safe_load_all(handle))
    spec = with_component_prefix(documents[0])
    root = args.pipeline_root or spec.get("defaultPipelineRoot")
    problem = problem_running_here(spec, root)
    arguments, bad_argument = parse_arguments(spec, args.parameters)
    problem = problem or bad_argument
    if problem:
        print(f"tfx-accum run-compiled: error: {problem}", file=sys.stderr)
        return 2

    from kfp import components, local
    from kfp.local import subprocess_task_handler

    subprocess_task_handler.SubprocessTaskHandler = _make_handler(args.tfx_python, args.workdir)
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=os.path.abspath(root),
        raise_on_error=True,
        enable_caching=not args.no_cache,
    )
    # The Kubernetes platform spec (node selectors, tolerations) has no meaning here.
    pipeline = components.load_component_from_text(yaml.safe_dump(spec))
    pipeline(**arguments)
    return 0


if __name__ == "__main__":
    sys.exit(main())
