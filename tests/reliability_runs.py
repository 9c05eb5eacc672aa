"""Real ``tfx-accum run`` processes for the fault tests: started, watched, signalled, filled.

Shared by ``test_reliability.py`` and ``test_faults.py``. A :class:`Run` is its own process
group (so that a test can signal the run's process alone, or the whole group, and find
anything it left behind); it starts with SIGINT at its default, as from a terminal, unless
the test asks for a run started the way a background job of a shell is (SIGINT ignored).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

CLI = [sys.executable, "-m", "tfx_accum.pipeline"]
# Batch 2 x 16 = 32: 37 updates per epoch on the 1,171 training rows, 160 updates = 5 epochs.
NO_TUNE = [
    "--no-tune",
    "--accumulation-steps",
    "2",
    "--micro-batch-size",
    "16",
    "--learning-rate",
    "0.003",
    "--train-steps",
    "160",
    "--accuracy-threshold",
    "0.5",
]
TUNED = [
    "--max-trials",
    "2",
    "--tuning-epochs",
    "1",
    "--train-steps",
    "60",
    "--accumulation-steps-choices",
    "1,2",
    "--micro-batch-choices",
    "16,32",
    "--accuracy-threshold",
    "0.5",
]
RUNNING, CANCELED = 2, 6  # ml_metadata Execution.State (COMPLETE is 3, CACHED 5)


def _child_setup(sigint: object, umask: int | None):
    def setup() -> None:
        signal.signal(signal.SIGINT, sigint)
        # As from a terminal, whatever started the tests (`nohup` makes SIGHUP ignored, and
        # the run keeps an ignored SIGHUP ignored: tfx_accum.interrupts).
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        if umask is not None:
            os.umask(umask)

    return setup


class Run:
    """A ``tfx-accum run`` in its own process group, read line by line as it goes.

    ``sigint_ignored``: start it as a shell starts a background job (``tfx-accum run &`` in
    a script): with SIGINT ignored. ``umask``: the process's umask. ``env``: variables set
    on top of this process's environment.
    """

    def __init__(
        self,
        out: Path,
        args: list[str],
        *,
        sigint_ignored: bool = False,
        umask: int | None = None,
        env: dict[str, str] | None = None,
    ):
        self.proc = subprocess.Popen(
            [*CLI, "--output-dir", str(out), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            start_new_session=True,
            preexec_fn=_child_setup(signal.SIG_IGN if sigint_ignored else signal.SIG_DFL, umask),
            env={**os.environ, **(env or {})},
        )
        self.lines: list[str] = []

    def wait_for(self, pattern: str, timeout: float = 600) -> str:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))
            if regex.search(line):
                return line
        self.proc.kill()
        raise AssertionError(f"never saw {pattern!r}:\n" + "\n".join(self.lines[-30:]))

    def signal_group(self, signum: int) -> None:
        os.killpg(self.proc.pid, signum)

    def signal_process(self, signum: int) -> None:
        """The run's own process only, as ``kill -SIG PID`` or a process manager sends it."""
        os.kill(self.proc.pid, signum)

    def finish(self, timeout: float = 300) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        self.lines.extend(out.splitlines())
        return self.proc.returncode, "\n".join(self.lines), err

    def group_commands(self) -> list[str]:
        """The command lines of the processes in the run's group (the run included)."""
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _pgid(int(entry)) == self.proc.pid:
                with contextlib.suppress(OSError):
                    found.append(Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" "))
        return [command.decode(errors="replace") for command in found]

    def group_left(self, grace: float = 30) -> list[int]:
        """Processes of the run's group still alive after the run ended (should be none).

        The run stops its children before it exits; ``grace`` only bounds the wait for the
        kernel to reap them, it is not what is measured.
        """
        deadline = time.monotonic() + grace
        while True:
            left = [
                int(p)
                for p in os.listdir("/proc")
                if p.isdigit() and _pgid(int(p)) == self.proc.pid and not _zombie(int(p))
            ]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.2)


def _stat(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return []


def _pgid(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[2]) if fields else None


def _zombie(pid: int) -> bool:
    fields = _stat(pid)
    return not fields or fields[0] == "Z"


def run_to_end(out: Path, args: list[str], umask: int | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, "--output-dir", str(out), *args],
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=_child_setup(signal.SIG_DFL, umask),
    )


def pushed_model(stdout: str) -> Path:
    return Path(re.search(r"pushed to: (\S+)", stdout).group(1))


def served_variables(path: Path) -> list[np.ndarray]:
    import tensorflow as tf

    loaded = tf.saved_model.load(str(path))
    return [v.numpy() for v in sorted(loaded.variables, key=lambda v: v.name)]


def assert_same_weights(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    assert max(float(np.max(np.abs(x - y))) for x, y in zip(a, b)) <= 1e-6


def execution_states(out: Path) -> dict[str, int]:
    """The last execution state of each component type (MLMD's sqlite schema)."""
    with contextlib.closing(sqlite3.connect(out / "metadata.sqlite")) as db:
        rows = db.execute(
            "SELECT Type.name, Execution.last_known_state FROM Execution "
            "JOIN Type ON Type.id = Execution.type_id ORDER BY Execution.id"
        ).fetchall()
    return {name.rsplit(".", 1)[-1]: state for name, state in rows}


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A fresh tmpfs of ``size`` (``mount -o size=``) at ``path``; skips where it cannot."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    """Fills the filesystem of ``directory`` to the last byte; returns the filler file."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (1 << 20, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
    finally:
        os.close(fd)
    return filler


def digits_csv(path: Path, invert: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """900 rows of the digits as ``p0..p63,label``; ``invert``: every label ``9 - label``
    (one digit either way: the file keeps its size). Returns the pixels and the labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = digits.data[:900].astype(int), digits.target[:900]
    labels = 9 - y if invert else y
    header = ",".join([f"p{i}" for i in range(64)] + ["label"])
    rows = [",".join(map(str, [*row, label])) for row, label in zip(x, labels)]
    path.write_text("\n".join([header, *rows]) + "\n")
    return x, labels


def served_accuracy(model_dir: Path, x: np.ndarray, labels: np.ndarray) -> float:
    """The accuracy of the SavedModel in ``model_dir`` served as TF Serving would: raw
    ``tf.Example``s of :func:`digits_csv`'s pixels in, its ``scores`` out."""
    import tensorflow as tf

    examples = [
        tf.train.Example(
            features=tf.train.Features(
                feature={
                    f"p{i}": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v)]))
                    for i, v in enumerate(row)
                }
            )
        ).SerializeToString()
        for row in x
    ]
    serve = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
    scores = serve(examples=tf.constant(examples))["scores"].numpy()
    return float(np.mean(scores.argmax(axis=1) == labels))
