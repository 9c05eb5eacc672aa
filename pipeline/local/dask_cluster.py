"""``--dask-scheduler``: the Beam components on a Dask cluster, checked before they run.

The option becomes Beam arguments for this project's DaskRunner
(``tfx_accum.pipeline.local.dask_runner``): ExampleGen (TFRecords), StatisticsGen and the
Evaluator (and Transform or BulkInferrer in a user's pipeline) then run their Beam pipelines
on the cluster's workers; the other components run in this process as before.

A cluster that cannot do the run is refused with one line (exit 2) before any component
runs: no scheduler at the address, a scheduler without workers, workers whose environment
differs from this one (they unpickle this process's code, so tfx-accum, Beam, TFX, TFDV and
TFMA must be the same versions), or storage the workers do not share with this process. The
workers read the data root and ExampleGen's output and write the components' outputs under
the output directory, so every worker must see both as this process does: each reads a
probe file written here and writes one back, and checks the data files' sizes.

Example::

    args = dask_beam_args("tcp://10.0.0.5:8786")      # the Beam arguments
    workers = check_scheduler("tcp://10.0.0.5:8786")    # or InputError
    check_shared_storage("tcp://10.0.0.5:8786", Path("out"), summary.files)
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

from tfx_accum.pipeline.beam_args import DASK_RUNNER
from tfx_accum.pipeline.errors import InputError

CONNECT_TIMEOUT_S = 10
# What the workers must have as this process has it (they unpickle its code and data).
SAME_VERSIONS = (
    "tfx-accum",
    "apache-beam",
    "tfx",
    "tensorflow-data-validation",
    "tensorflow-model-analysis",
    "dask",
    "distributed",
)
_ADDRESS = re.compile(r"^(?:tcp://)?(\[[0-9a-fA-F:]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})$")
_OWN_OPTIONS = ("runner", "dask_client_address")


def scheduler_address(text: str) -> str:
    """``tcp://HOST:PORT`` (``HOST:PORT`` is taken as tcp); anything else is an InputError."""
    match = _ADDRESS.match(text.strip())
    if not match or not 0 < int(match.group(2)) < 65536:
        raise InputError(
            f"--dask-scheduler {text!r} is not a scheduler address such as "
            "tcp://HOST:8786 (what `dask scheduler` prints as 'Scheduler at')."
        )
    return f"tcp://{match.group(1)}:{match.group(2)}"


def dask_beam_args(address: str, extra: Sequence[str] | None = None) -> list[str]:
    """The Beam arguments that run the Beam components on the scheduler at ``address``, with
    ``extra`` Beam options (``--beam-pipeline-args``) after them; these may tune the runner
    (``--dask_npartitions``) but not name another runner or scheduler."""
    extra = list(extra or ())
    for arg in extra:
        name = arg.removeprefix("--").partition("=")[0].replace("-", "_")
        if name in _OWN_OPTIONS:
            raise InputError(
                f"--beam-pipeline-args {arg!r} with --dask-scheduler: the scheduler option "
                "chooses the runner and its address; give one or the other."
            )
    return [
        f"--runner={DASK_RUNNER}",
        f"--dask_client_address={scheduler_address(address)}",
        f"--dask_connection_timeout={CONNECT_TIMEOUT_S}",
        *extra,
    ]


def _client(address: str):
    import distributed

    try:
        return distributed.Client(
            scheduler_address(address), timeout=CONNECT_TIMEOUT_S, set_as_default=False
        )
    except (OSError, TimeoutError) as error:
        raise InputError(
            f"--dask-scheduler {address}: no Dask scheduler answered within "
            f"{CONNECT_TIMEOUT_S} s ({type(error).__name__}); start one (`dask scheduler`) "
            "and its workers (`dask worker ADDRESS`), or correct the address."
        ) from None


def check_scheduler(address: str) -> list[str]:
    """The scheduler's workers, each with this process's versions of :data:`SAME_VERSIONS`;
    InputError where the scheduler is unreachable, has no worker, or a worker differs."""
    with _client(address) as client:
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        if not workers:
            raise InputError(
                f"--dask-scheduler {address} has no workers: start them with "
                f"`dask worker {address}` in this environment."
            )
        try:
            found = client.run(worker_environment)
        except ModuleNotFoundError as error:
            raise InputError(
                f"--dask-scheduler {address}: a worker cannot import {error.name!r}; run the "
                "workers in an environment with tfx-accum[dask] installed, as this one."
            ) from None
    here = worker_environment()
    for worker, theirs in sorted(found.items()):
        for name, version in here.items():
            if theirs.get(name) != version:
                raise InputError(
                    f"--dask-scheduler {address}: worker {worker} has {name} "
                    f"{theirs.get(name)}, this process {version}; the workers need the same "
                    "environment (they run this process's code)."
                )
    return workers


def worker_environment() -> dict[str, str | None]:
    """This interpreter's Python version and installed :data:`SAME_VERSIONS`."""
    found: dict[str, str | None] = {"python": "{}.{}".format(*sys.version_info[:2])}
    for name in SAME_VERSIONS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def check_shared_storage(
    address: str, output_dir: Path, data_root: str, data_files: Sequence[str]
) -> None:
    """InputError unless every worker reads a probe written to ``output_dir`` here, writes one
    back that this process reads, and sees each of ``data_files`` (under ``data_root``) with
    its size here."""
    token = uuid.uuid4().hex
    probe = output_dir / f".dask-probe-{token}"
    probe.write_text(token)
    sizes = {path: os.path.getsize(path) for path in data_files}
    try:
        with _client(address) as client:
            answers = client.run(worker_sees, str(probe), token, sizes)
        for worker, answer in sorted(answers.items()):
            option, problem = answer.get("option"), answer.get("problem")
            reply = Path(answer.get("reply") or probe)
            if problem is None and not (reply.exists() and reply.read_text() == token):
                option, problem = "--output-dir", f"wrote {reply}, which this process does not see"
            if problem:
                path = output_dir if option == "--output-dir" else data_root
                raise InputError(
                    f"{option} {path} is not storage every Dask worker sees: worker {worker} "
                    f"{problem}; use storage the workers share (a network file system mounted "
                    "at the same path, or this machine's disk for workers on this machine)."
                )
    finally:
        for path in output_dir.glob(f".dask-probe-{token}*"):
            path.unlink(missing_ok=True)


def worker_sees(probe: str, token: str, sizes: dict[str, int]) -> dict[str, str]:
    """On a worker: ``{"option", "problem"}`` (one phrase), or ``{"reply": path}`` where it
    wrote ``token`` beside ``probe``."""
    try:
        with open(probe) as handle:
            if handle.read() != token:
                return {"option": "--output-dir", "problem": f"reads other contents at {probe}"}
    except OSError:
        return {"option": "--output-dir", "problem": f"cannot read the probe file {probe}"}
    for path, size in sizes.items():
        try:
            theirs = os.path.getsize(path)
        except OSError:
            return {"option": "--data-root", "problem": f"does not find {path}"}
        if theirs != size:
            return {
                "option": "--data-root",
                "problem": f"finds {path} of {theirs} bytes, not {size}",
            }
    reply = f"{probe}-{uuid.uuid4().hex}"
    try:
        with open(reply, "w") as handle:
            handle.write(token)
    except OSError as error:
        return {"option": "--output-dir", "problem": f"cannot write {reply} ({error.strerror})"}
    return {"reply": reply}
