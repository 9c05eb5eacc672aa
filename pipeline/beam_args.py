"""Beam arguments sized to the data and the machine.

Starting Beam's worker processes costs more than the work on a small input, while a large
input on many cores needs the workers. The local runner therefore picks the DirectRunner's
mode from the CPUs and from the input's size in bytes *and* in rows (a narrow table is
small in bytes, but the Evaluator's and StatisticsGen's cost is per example). On two CPUs
or fewer it is always ``in_memory``: there ``bench.beam_sizing`` found ``multi_processing``
slower, and dearer in CPU, for StatisticsGen and the Evaluator at every row count it
measured (the workers share the cores with the launching process and pay their own start
and the pickling between them). With more CPUs, one worker per ``BYTES_PER_WORKER`` or
``ROWS_PER_WORKER``, up to the CPUs: not measured here (a 2-core machine). The workers read
the split's files in parallel, so ExampleGen writes a large input in several files
(``tfx_accum.components.data.csv_examples``), and each worker batches TFXIO's reads by bytes
(``--beam_plugins``: ``tfx_accum.pipeline.tfxio_batching``). ``--beam-pipeline-args``
replaces the choice entirely (for example ``--runner=DataflowRunner ...``).

Every Beam component's executor also packages TFX itself as an sdist for remote workers
(``tfx/utils/dependency_utils.py``: a ``setup.py sdist`` subprocess per component) unless one of
Beam's dependency options is set. The DirectRunner never reads it: its workers are this interpreter,
in this process (``in_memory``) or as ``sys.executable -m
apache_beam.runners.worker.sdk_worker_main`` (``multi_processing``). Nor does the project's
DaskRunner (:data:`DASK_RUNNER`): its workers are processes started in an environment like this one,
with tfx-accum installed (``--dask-scheduler`` checks that), and it installs nothing.
:func:`without_tfx_sdist` says so to TFX for either.

Example:

```python
args, why = local_beam_args(input_bytes=300_000, cpus=2, rows=1_797)
# (["--direct_running_mode=in_memory", "--direct_num_workers=1"],
#  "input 0.3 MiB < 64 MiB and 1,797 rows < 200,000")
```
"""

from __future__ import annotations

import importlib.metadata
import os
import shlex
import sys
from collections.abc import Sequence

from tfx_accum.pipeline.errors import InputError

BEAM_PLUGIN_ARG = "--beam_plugins=tfx_accum.pipeline.tfxio_batching"

# Below both, or on at most IN_MEMORY_CPUS CPUs, one in-process worker; above either, one
# worker per BYTES_PER_WORKER or ROWS_PER_WORKER, whichever asks for more.
IN_MEMORY_CPUS = 2
SMALL_INPUT_BYTES = 64 * 2**20
BYTES_PER_WORKER = 128 * 2**20
SMALL_INPUT_ROWS = 200_000
ROWS_PER_WORKER = 500_000


def available_cpus() -> int:
    """CPUs this process may use (the pod's or container's, where the OS limits them)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def local_beam_args(input_bytes: int, cpus: int, rows: int = 0) -> tuple[list[str], str]:
    """The DirectRunner's mode and worker count for an input of ``input_bytes`` and ``rows``."""
    mib = input_bytes / 2**20
    small = input_bytes < SMALL_INPUT_BYTES and rows < SMALL_INPUT_ROWS
    if small or cpus <= IN_MEMORY_CPUS:
        reason = (
            f"input {mib:.1f} MiB < {SMALL_INPUT_BYTES // 2**20} MiB and "
            f"{rows:,} rows < {SMALL_INPUT_ROWS:,}"
            if small
            else f"{cpus} CPU(s): worker processes pay only on more than {IN_MEMORY_CPUS}"
        )
        return direct_args(1), reason
    wanted = max(-(-input_bytes // BYTES_PER_WORKER), -(-rows // ROWS_PER_WORKER))
    workers = max(2, min(cpus, wanted))
    return direct_args(workers), f"input {mib:.0f} MiB, {rows:,} rows, {cpus} CPUs"


def direct_args(workers: int) -> list[str]:
    """The DirectRunner with ``workers`` workers: one in-process, else worker processes,
    each batching TFXIO's reads by bytes (``BEAM_PLUGIN_ARG``:
    tfx_accum.pipeline.tfxio_batching)."""
    if workers == 1:
        return ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
    return [
        "--direct_running_mode=multi_processing",
        f"--direct_num_workers={workers}",
        BEAM_PLUGIN_ARG,
    ]


# Beam's options that TFX takes as "the workers' dependencies are provided" (dest names).
TFX_DEPENDENCY_OPTIONS = frozenset(
    {
        "extra_packages",
        "setup_file",
        "requirements_file",
        "worker_harness_container_image",
        "sdk_container_image",
    }
)
# Where TFX decides: a dependency option, or an explicit worker environment
# (``--environment_type=DOCKER``...), which may install the package.
LEFT_TO_TFX = TFX_DEPENDENCY_OPTIONS | {"environment_type"}
DIRECT_RUNNERS = frozenset({"directrunner", "direct", "switchingdirectrunner"})
DASK_RUNNER = "tfx_accum.pipeline.local.dask_runner.DaskRunner"  # --runner's full path
# Runners whose workers run in an environment like this one's and install nothing.
NO_PACKAGE_RUNNERS = DIRECT_RUNNERS | {DASK_RUNNER.lower()}


def without_tfx_sdist(args: Sequence[str]) -> list[str]:
    """``args``, plus Beam's own SDK image as ``--sdk_container_image`` where they select
    the DirectRunner (or :data:`DASK_RUNNER`) and name no dependency option, so that TFX
    builds no sdist of itself.

    The image is the one Beam's portable runners start for this Python and Beam version;
    the DirectRunner's environment is fixed by its running mode and the DaskRunner's by its
    workers, and both ignore it. Arguments for another runner (Dataflow, Flink), or with an
    explicit worker environment, are returned unchanged: there TFX's package is what the
    workers install.
    """
    names, runner = set(), "directrunner"
    for arg in args:
        name, _, value = arg.removeprefix("--").partition("=")
        name = name.replace("-", "_")
        names.add("extra_packages" if name == "extra_package" else name)
        if name == "runner":
            runner = value.lower()
    if runner not in NO_PACKAGE_RUNNERS or names & LEFT_TO_TFX:
        return list(args)
    return [*args, f"--sdk_container_image={beam_sdk_image()}"]


def beam_sdk_image() -> str:
    """Beam's SDK container image for this interpreter and the installed Beam."""
    version = importlib.metadata.version("apache-beam")
    return f"apache/beam_python{sys.version_info.major}.{sys.version_info.minor}_sdk:{version}"


def pod_beam_args(cpus: float) -> list[str]:
    """DirectRunner arguments for a Kubeflow pod with ``cpus`` CPUs (not the node's count):
    in-process on at most ``IN_MEMORY_CPUS``, as a local run, else one worker per CPU.

    ``--direct_num_workers=0`` would start one worker per CPU of the *node*, which can
    exceed the pod's memory limit on a large node. With several workers, each batches
    TFXIO's reads by bytes, as the local run's do (``BEAM_PLUGIN_ARG``; the pod's image has
    this package).
    """
    return direct_args(1 if cpus <= IN_MEMORY_CPUS else int(cpus))


def parse_beam_args(text: str | None) -> list[str] | None:
    """``--beam-pipeline-args "..."``: shell-style words, each an ``--option[=value]``."""
    if text is None:
        return None
    try:
        words = shlex.split(text)
    except ValueError as error:
        raise InputError(f"--beam-pipeline-args {text!r} cannot be parsed: {error}.") from None
    bad = [w for w in words if not w.startswith("--")]
    if not words or bad:
        raise InputError(
            f"--beam-pipeline-args must be Beam options such as "
            f"'--direct_running_mode=in_memory --direct_num_workers=1'; got {text!r}."
        )
    return words
