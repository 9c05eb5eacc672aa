"""Parallel-search workers: how many, which GPU each holds, their oracle's token, and that
they die with their chief (a real SIGKILL of a real chief)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import keras_tuner
import pytest
from keras_tuner.src import protos

from tfx_accum.components.search import keras_tuner_adapter as kt_adapter
from tfx_accum.components.search.parallel_search import (
    CHIEF_PID_ENV,
    GROWTH_ENV,
    TOKEN_ENV,
    GpuSlots,
    plan_workers,
    worker_env,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "requested,left,gpus,cpus,expected,why",
    [
        (4, 8, 4, 46, 4, None),  # a100x4: one per GPU
        (8, 8, 4, 46, 4, "parallel_trials=8 capped to 4: one GPU per worker, 4 GPU(s)"),
        (64, 2, 0, 2, 2, "parallel_trials=64 capped to 2: the search has 2 trial(s) left"),
        (4, 1, 4, 46, 1, "parallel_trials=4 capped to 1: the search has 1 trial(s) left"),
        (4, None, 0, 2, 2, "parallel_trials=4 capped to 2: no GPU, 2 CPU(s)"),  # Hyperband
        (4, 0, 4, 46, 0, "parallel_trials=4 capped to 0: the search has 0 trial(s) left"),
    ],
)
def test_workers_are_capped_by_trials_left_and_devices(requested, left, gpus, cpus, expected, why):
    assert plan_workers(requested, left, gpus, cpus) == (expected, why)


def test_each_worker_holds_one_gpu_and_a_replacement_takes_the_freed_one():
    slots = GpuSlots(4)
    assert [slots.take(i) for i in range(4)] == [0, 1, 2, 3]
    slots.release(1)  # worker 1 died
    assert slots.take(4) == 1  # its replacement takes GPU 1 (index % gpus would give 0)
    slots.release(2)
    slots.release(0)
    assert slots.take(5) == 0 and slots.take(6) == 2
    with pytest.raises(RuntimeError, match="all 4 GPU"):
        slots.take(7)
    assert [GpuSlots(0).take(i) for i in range(3)] == [None, None, None]  # CPU: shared


def test_a_worker_sees_its_gpu_grows_its_memory_and_carries_the_token():
    env = worker_env(3, 5000, gpu=2, threads=8, token="secret", chief=1234)
    assert env["CUDA_VISIBLE_DEVICES"] == "2" and env[GROWTH_ENV] == "true"
    assert env["TFX_ACCUM_ACCELERATOR"] == "gpu:1"
    assert env[TOKEN_ENV] == "secret" and env[CHIEF_PID_ENV] == "1234"
    assert env["KERASTUNER_ORACLE_PORT"] == "5000" and env["KERASTUNER_TUNER_ID"] == "worker3-1234"
    cpu = worker_env(0, 5000, gpu=None, threads=8, token="secret", chief=1234)
    assert cpu.get("CUDA_VISIBLE_DEVICES") == os.environ.get("CUDA_VISIBLE_DEVICES")
    assert cpu["TF_NUM_INTRAOP_THREADS"] == "8"


def _oracle(tmp_path: Path, max_trials: int = 2) -> keras_tuner.Oracle:
    oracle = keras_tuner.oracles.RandomSearchOracle(
        objective=keras_tuner.Objective("score", "max"), max_trials=max_trials, seed=0
    )
    oracle._set_project_dir(str(tmp_path), "p")  # what a Tuner does with its directory
    hp = keras_tuner.HyperParameters()
    hp.Int("x", 0, 10)
    oracle.update_space(hp)
    return oracle


def test_the_oracle_refuses_a_client_without_the_search_token(tmp_path, monkeypatch):
    oracle = _oracle(tmp_path)
    server, port = kt_adapter.serve_oracle(oracle, "127.0.0.1", "the-token")
    try:
        address = f"127.0.0.1:{port}"
        request = protos.get_service().GetSpaceRequest()
        for metadata in ((), (("x-tfx-accum-oracle-token", "a-guess"),)):
            stub = protos.get_service_grpc().OracleStub(grpc.insecure_channel(address))
            with pytest.raises(grpc.RpcError) as refused:
                stub.GetSpace(request, metadata=metadata, timeout=30)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # A worker's own client, with the token: served.
        from keras_tuner.src.distribute import oracle_client

        monkeypatch.setenv("KERASTUNER_ORACLE_IP", "127.0.0.1")
        monkeypatch.setenv("KERASTUNER_ORACLE_PORT", str(port))
        monkeypatch.setenv("KERASTUNER_TUNER_ID", "worker0")
        client = oracle_client.OracleClient(oracle)
        kt_adapter.authenticate_client(client, "the-token")
        assert client.get_space().get_config()["space"][0]["config"]["name"] == "x"
        trial = client.create_trial("worker0")
        assert trial.status == "RUNNING" and "worker0" in oracle.ongoing_trials
    finally:
        server.stop(None)


def test_trials_left_counts_new_and_interrupted_trials(tmp_path):
    oracle = _oracle(tmp_path, max_trials=3)
    assert kt_adapter.trials_left(oracle) == 3
    first = oracle.create_trial("a")
    oracle.create_trial("b")
    assert kt_adapter.trials_left(oracle) == 1
    first.status = "COMPLETED"
    oracle.update_trial(first.trial_id, {"score": 1.0})
    oracle.end_trial(first)
    oracle.save()
    reloaded = _oracle(tmp_path, max_trials=3)
    reloaded.reload()  # a resumed search: trial "b" was interrupted and is run again
    assert kt_adapter.trials_left(reloaded) == 2
    unlimited = _oracle(tmp_path / "hyperband")
    unlimited.max_trials = None  # as Hyperband's oracle
    assert kt_adapter.trials_left(unlimited) is None


CHIEF = """
import sys
from pathlib import Path
from bench.tuner_component import run_tuner_component
from tfx_accum.components.config.search_space import SearchSpace
space = SearchSpace(accumulation_steps_choices=(1, 2), micro_batch_choices=(16, 32),
                    learning_rate_min=1e-4, learning_rate_max=1e-1, learning_rate_step=10,
                    algorithm="random", max_trials=8, tuning_epochs=3)
run_tuner_component(Path(sys.argv[1]), Path(sys.argv[2]), space, parallel_trials=2)
"""


def _children(pid: int) -> list[int]:
    """Live worker processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if (
            b"tuner_worker" in cmdline
            and int(fields["PPid"]) == pid
            and not fields["State"].strip().startswith("Z")
        ):
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = next(
            line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("State:")
        )  # fmt: skip
    except (OSError, StopIteration):
        return False
    return not state.split(":", 1)[1].strip().startswith("Z")


def _two_workers_in_trials(chief: subprocess.Popen, tmp_path: Path) -> list[int]:
    """The chief's two worker pids, once both run and a trial has started (within the
    deadline below)."""
    deadline, workers = time.monotonic() + 300, []
    while time.monotonic() < deadline and chief.poll() is None:
        workers = _children(chief.pid)
        if len(workers) == 2 and list(tmp_path.glob("search/*/*/trial_*/trial.json")):
            break
        time.sleep(0.2)
    assert len(workers) == 2, "the workers did not start into their trials"
    return workers


@pytest.mark.e2e
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_their_chief(first_run, tmp_path):
    """SIGKILL the Tuner's chief while both workers train: neither outlives it."""
    chief = subprocess.Popen(
        [sys.executable, "-c", CHIEF, str(first_run[0]), str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers: list[int] = []
    try:
        workers = _two_workers_in_trials(chief, tmp_path)
        time.sleep(1.0)  # both are training
        chief.send_signal(signal.SIGKILL)
        chief.wait()
        deadline = time.monotonic() + 30  # a hang guard: the kernel kills them at once
        while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
            time.sleep(0.2)
        assert not [pid for pid in workers if _alive(pid)]
    finally:
        if chief.poll() is None:
            chief.kill()
        for pid in workers:  # what the test found alive, if anything
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_chief_and_its_children_grow_gpu_memory_as_needed(monkeypatch):
    from tfx_accum.components.search.parallel_search import share_gpus

    monkeypatch.delenv(GROWTH_ENV, raising=False)
    share_gpus()  # the chief of a parallel search, before the probe and the workers start
    assert os.environ[GROWTH_ENV] == "true"
    child = subprocess.run(
        [sys.executable, "-c", f"import os; print(os.environ['{GROWTH_ENV}'])"],
        capture_output=True,
        text=True,
    )
    assert child.stdout.strip() == "true"


def test_a_stopped_worker_is_told_from_a_working_one():
    """A worker stopped with `kill -STOP` hung the search without a line; the chief now
    kills a worker that uses no CPU time for worker_stall_seconds (its trial fails)."""
    from tfx_accum.components.search.parallel_search import StallWatch

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        watch = StallWatch(busy.pid, seconds=1.0)
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            assert not watch.stalled()  # working: its CPU time grows
            time.sleep(0.2)
        busy.send_signal(signal.SIGSTOP)
        time.sleep(0.3)
        watch.stalled()  # the last ticks before the stop
        time.sleep(1.5)
        assert watch.stalled()  # stopped: no CPU time for more than a second
        busy.send_signal(signal.SIGCONT)
        time.sleep(0.3)
        assert not watch.stalled()
    finally:
        busy.kill()
        busy.wait()


STALLING_CHIEF = """
import sys
from pathlib import Path
from bench.tuner_component import run_tuner_component
from tfx_accum.components.config.search_space import SearchSpace
space = SearchSpace(accumulation_steps_choices=(1, 2), micro_batch_choices=(16, 32),
                    learning_rate_min=1e-4, learning_rate_max=1e-1, learning_rate_step=10,
                    algorithm="random", max_trials=4, tuning_epochs=2)
run_tuner_component(Path(sys.argv[1]), Path(sys.argv[2]), space, parallel_trials=2,
                    custom_config={"worker_stall_seconds": 8})
"""


@pytest.mark.e2e
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_worker_stopped_with_sigstop_is_killed_and_the_search_goes_on(first_run, tmp_path):
    """`kill -STOP` on a worker hung the search without a line. The chief kills it after
    worker_stall_seconds of no CPU time, its trial fails, and the search finishes."""
    chief = subprocess.Popen(
        [sys.executable, "-c", STALLING_CHIEF, str(first_run[0]), str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        workers = _two_workers_in_trials(chief, tmp_path)
        stopped = workers[0]
        os.kill(stopped, signal.SIGSTOP)
        out, _ = chief.communicate(timeout=600)
    finally:
        if chief.poll() is None:
            chief.kill()
    assert chief.returncode == 0, out[-3000:]
    assert not _alive(stopped)
    assert (
        "used no CPU for 8 s (stopped or hung; custom_config 'worker_stall_seconds'): killed"
        in (out)
    )
    trials = [json.loads(p.read_text()) for p in tmp_path.glob("search/*/*/trial_*/trial.json")]
    statuses = sorted(t["status"] for t in trials)
    # The stopped worker's trial failed (if it was inside one: it may have been between two);
    # none is left running, and the other worker finished the search.
    assert set(statuses) <= {"COMPLETED", "FAILED"} and statuses.count("COMPLETED") >= 2, statuses
