"""The Ray executor against a real local Ray cluster with two logical GPUs (no GPU needed):
real pre-flight jobs as Ray tasks, two at once each on its own GPU, the run folders back in
the server's runs root, a cancelled job, a worker killed mid-job (retried once, then
reported), a pool with no free GPU. ``pytest -m ray`` runs only these; without Ray they skip.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason='Ray is not installed (pip install ".[ray]" in a clone)')

from nsight_agent.engine import children  # noqa: E402
from nsight_agent.engine.executors.base import Job, JobHandle  # noqa: E402
from nsight_agent.engine.executors.ray.executor import (  # noqa: E402
    RESOURCE,
    NodeLostError,
    NoFreeGpuError,
    RayExecutor,
)
from nsight_agent.engine.pipeline import PreflightResult  # noqa: E402
from nsight_agent.engine.store.runs import load_run  # noqa: E402
from nsight_agent.errors import RunCancelledError  # noqa: E402
from nsight_agent.request import ProfileRequest  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(1800)]

# Every wait here is on a state (a job's answer, its harness sleeping); this only bounds a
# hang. Hosts and their warm workers start cold (Python, torch), and Ray runs its workers at
# nice 19: on a busy 2-core machine a host took more than 4 minutes to start.
WAIT_S = 600

# {prelude} runs at import, before setup: it prints what the child sees, sleeps, or kills.
SOURCE = """
import os, signal, sys, time
import torch
{prelude}

def setup(n: int, device: str = "cuda"):
    return torch.arange(n, device=device, dtype=torch.float32)


def run(x):
    return x * 2
"""

SLEEPS = """
print("VISIBLE", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
print("PID", os.getpid(), flush=True)
print("START", time.time(), flush=True)
time.sleep({seconds})
print("END", time.time(), flush=True)
"""

# Two jobs that meet: each says it started (a file named after it), then waits (WAIT_S at
# most) for the other's file before it ends. Both ran at once by construction, however long
# each host took to start (a sleep of a few seconds overlapped only on an idle machine).
MEETS = """
print("VISIBLE", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
print("PID", os.getpid(), flush=True)
print("START", time.time(), flush=True)
open(os.path.join({folder!r}, {me!r}), "w").close()
deadline = time.time() + {wait}
while not os.path.exists(os.path.join({folder!r}, {other!r})) and time.time() < deadline:
    time.sleep(0.05)
print("MET", os.path.exists(os.path.join({folder!r}, {other!r})), flush=True)
print("END", time.time(), flush=True)
"""

# Kills its parent (the GPU host: the pre-flight runs on the host's warm worker) the first
# time, or every time.
KILLS_WORKER = """
flag = {flag!r}
if {always} or not os.path.exists(flag):
    open(flag, "w").close()
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(30)
"""


def job(prelude: str, root: Path, name: str = "") -> Job:
    req = ProfileRequest(
        source=SOURCE.format(prelude=prelude),
        language="torch",
        configs={"n": [64]},
        runs=1,
        warmup=0,
        timeout_s=2 * WAIT_S,
    )
    return Job(req, root, mode="preflight", name=name)


def init_two_gpu_cluster() -> None:
    """A local Ray cluster with two logical GPUs, each with the ncu resource (no GPU needed)."""
    ray.init(
        num_cpus=4,
        num_gpus=2,
        resources={RESOURCE: 2},
        include_dashboard=False,
        log_to_driver=False,
    )


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    init_two_gpu_cluster()
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture
def executor(cluster: None) -> Iterator[RayExecutor]:
    pool = RayExecutor(queue_timeout_s=WAIT_S)
    try:
        yield pool
    finally:
        pool.close()


def wait_until_sleeping(handle: JobHandle, timeout: float = WAIT_S) -> int:
    """Wait until the job's harness printed START (it sleeps then) in its run folder on the
    node (this machine); return the pid of the host running it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        scratch = handle.where.get("scratch")
        logs = list(Path(scratch).glob("*/preflight-output.log")) if scratch else []
        if any("START" in log.read_text() for log in logs):
            return int(handle.where["pid"])
        time.sleep(0.1)
    raise AssertionError(f"the job did not start within {timeout} s: {handle.where}")


def log_values(root: Path, pre: PreflightResult) -> dict[str, str]:
    return log_of(root / str(pre.run_id))


def log_of(run_dir: Path) -> dict[str, str]:
    """What the harness printed (VISIBLE, PID, START, END) in a run's pre-flight log."""
    text = (run_dir / "preflight-output.log").read_text()
    return {line.split()[0]: line.split()[1] for line in text.splitlines() if line[:1].isupper()}


def test_two_jobs_run_at_once_each_on_its_own_gpu_and_land_in_the_runs_root(
    executor: RayExecutor, tmp_path: Path
) -> None:
    t0 = time.monotonic()
    meet = {"a": "b", "b": "a"}
    preludes = {
        n: MEETS.format(folder=str(tmp_path), me=n, other=o, wait=WAIT_S) for n, o in meet.items()
    }
    handles = [executor.submit(job(preludes[n], tmp_path, n)) for n in "ab"]
    results = [h.result(WAIT_S) for h in handles]
    wall = time.monotonic() - t0
    seen = []
    for handle, pre in zip(handles, results):
        assert isinstance(pre, PreflightResult) and pre.ok, pre
        run = load_run(str(pre.run_id), runs_root=tmp_path)  # the server's store reads it
        assert run.status == "passed" and run.run_dir.parent == tmp_path
        where = json.loads((run.run_dir / "where.json").read_text())  # which GPU ran it
        assert where["gpu"] == handle.where["gpu"] and where["ended"] >= where["started"]
        seen.append(log_values(tmp_path, pre))
    assert {s["VISIBLE"] for s in seen} == {"0", "1"}, seen
    assert [s["MET"] for s in seen] == ["True", "True"], seen
    (a, b) = [(float(s["START"]), float(s["END"])) for s in seen]
    assert a[0] < b[1] and b[0] < a[1], f"the jobs did not overlap: {a} {b}"
    assert {h.where["gpu"] for h in handles} == {"0", "1"}
    print(f"two jobs that met on two logical GPUs: {wall:.1f} s wall")


def test_the_pool_lists_the_node_its_gpus_and_the_ncu_resource(executor: RayExecutor) -> None:
    info = executor.pool_info()
    assert info["executor"] == "ray" and info["gpus"] == 2
    (node,) = info["nodes"]
    assert node["accepts_jobs"] and node["ncu_slots"] == 2 and node["resources"] == {RESOURCE: 2}
    assert (info["running"], info["queued"]) == (0, 0)
    assert info["hosts"] == []  # a cluster the executor joined: hosts start only on demand
    # What the node read about itself (a task pinned there): this machine, as seen from here.
    from nsight_agent.engine.device import device_info

    here = device_info()
    assert [g["name"] for g in node["gpu_models"]] == [g.name for g in here.gpus]
    assert node["ncu_version"] == here.ncu_version and node["counters"] == here.counters.permitted
    assert executor.pool_info()["nodes"][0]["ncu_version"] == here.ncu_version  # cached


def test_a_cancelled_job_is_reported_cancelled_its_processes_die_and_its_host_stays(
    executor: RayExecutor, tmp_path: Path
) -> None:
    handle = executor.submit(job(SLEEPS.format(seconds=60), tmp_path))
    host = wait_until_sleeping(handle)
    handle.cancel()
    t0 = time.monotonic()
    with pytest.raises(RunCancelledError):
        handle.result(60)
    assert time.monotonic() - t0 < 60  # seconds: the kill, the folder's trip back
    # The cancelled run came back from the node, as a local cancel leaves it: in the store,
    # marked cancelled, named by the error, with what the harness printed before the kill.
    (run_dir,) = [d for d in tmp_path.iterdir() if not d.name.startswith(".")]
    harness = int(log_of(run_dir)["PID"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{harness}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not Path(f"/proc/{harness}").exists(), "the cancelled harness outlived the cancel"
    assert not [m for m in children.marked_processes(f"{host}-").values() if run_dir.name in m]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "cancelled", status
    assert (run_dir / "preflight-output.log").read_text().startswith("VISIBLE")
    assert json.loads((run_dir / "where.json").read_text())["gpu"] == handle.where["gpu"]
    with pytest.raises(RunCancelledError) as info:
        handle.result(1)
    assert getattr(info.value, "run_id", None) == run_dir.name
    # The host was not killed, and its worker (killed with the job) is started again.
    assert Path(f"/proc/{host}").exists()
    deadline = time.monotonic() + WAIT_S  # the worker starts again, cold
    while time.monotonic() < deadline:
        hosts = executor.pool_info()["hosts"]
        if hosts and all(h.get("warm") for h in hosts):
            break
        time.sleep(0.5)
    assert hosts and all(h.get("warm") for h in hosts), hosts
    # The next job runs on it (the same process), and passes.
    after = executor.submit(job("", tmp_path))
    assert isinstance(after.result(WAIT_S), PreflightResult)
    assert int(after.where["pid"]) == host  # the warmest idle host: the one just used


def test_a_worker_lost_mid_job_is_retried_once(executor: RayExecutor, tmp_path: Path) -> None:
    flag = tmp_path / "killed-once"
    handle = executor.submit(job(KILLS_WORKER.format(flag=str(flag), always=False), tmp_path))
    pre = handle.result(WAIT_S)
    assert isinstance(pre, PreflightResult) and pre.ok, pre
    assert flag.exists() and handle.attempts == 2


def test_a_worker_lost_twice_is_reported(executor: RayExecutor, tmp_path: Path) -> None:
    flag = tmp_path / "killed"
    handle = executor.submit(job(KILLS_WORKER.format(flag=str(flag), always=True), tmp_path))
    with pytest.raises(NodeLostError, match=r"died 2 time\(s\); it was retried 1 time"):
        handle.result(WAIT_S)


def test_no_free_gpu_within_the_timeout(executor: RayExecutor, tmp_path: Path) -> None:
    # Both GPUs busy until cancelled, waited on their state (each job's harness sleeping), not
    # on a time: two 30 s jobs waited on for 30 s gave running == 1 when a host started late.
    busy = [executor.submit(job(SLEEPS.format(seconds=300), tmp_path)) for _ in range(2)]
    for handle in busy:
        wait_until_sleeping(handle)
    # The hosts' own state is read apart from the run folder: wait on it too (a repeat run
    # read 0 once right after both harnesses slept).
    deadline = time.monotonic() + WAIT_S
    while executor.pool_info()["running"] != 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert executor.pool_info()["running"] == 2
    impatient = RayExecutor(queue_timeout_s=2)
    try:
        t0 = time.monotonic()
        with pytest.raises(NoFreeGpuError, match="became free within 2 s"):
            impatient.run(job("", tmp_path))
        assert time.monotonic() - t0 < 30  # the 2 s timeout, not the default 600 s
    finally:
        impatient.close()
    for handle in busy:
        handle.cancel()
        with pytest.raises(RunCancelledError):
            handle.result(60)


def test_no_node_with_the_resource_is_an_error_at_once(cluster: None, tmp_path: Path) -> None:
    pool = RayExecutor(resource="nsight_agent_ncu_missing")
    with pytest.raises(NoFreeGpuError, match="No node of the Ray cluster offers"):
        pool.submit(job("", tmp_path))
    info: dict[str, Any] = pool.pool_info()
    assert "does not advertise" in info["nodes"][0]["why_not"]
    pool.close()


def test_token_authentication_stays_on(cluster: None) -> None:
    assert os.environ.get("RAY_AUTH_MODE", "token") != "disabled"


def test_an_idle_host_gives_its_gpu_back_and_the_next_job_starts_a_new_one(
    cluster: None, tmp_path: Path
) -> None:
    pool = RayExecutor(queue_timeout_s=WAIT_S, idle_release_s=1)
    try:
        first = pool.submit(job("", tmp_path))
        assert isinstance(first.result(WAIT_S), PreflightResult)
        deadline = time.monotonic() + 60
        info = pool.pool_info()
        while (info["hosts"] or info["gpus_free"] < 2) and time.monotonic() < deadline:
            time.sleep(0.5)
            info = pool.pool_info()
        assert info["hosts"] == [] and info["idle_release_s"] == 1, info
        assert info["gpus_free"] == 2, info  # given back to the cluster
        second = pool.submit(job("", tmp_path))
        assert isinstance(second.result(WAIT_S), PreflightResult)
        assert second.where["pid"] != first.where["pid"]  # a new host
    finally:
        pool.close()


def test_a_host_that_cannot_start_is_an_error_not_a_wait(cluster: None) -> None:
    """Two hosts failing to start in a row, none up: the job gets Ray's reason at once."""
    import threading

    from nsight_agent.engine.executors.ray.cluster import RemoteJobError
    from nsight_agent.engine.executors.ray.hosts import HostPool

    class BrokenHost:  # what a node without nsight-agent's libraries would do
        def __init__(self) -> None:
            raise ImportError("No module named 'nsight_agent' (on the node)")

        def describe(self) -> dict[str, Any]:
            return {}

    hosts = HostPool(ray, ray.remote(BrokenHost).options(num_cpus=0).remote, RESOURCE)
    try:
        t0 = time.monotonic()
        with pytest.raises(
            RemoteJobError, match=r"could not start.*No module named 'nsight_agent'"
        ):
            hosts.acquire(threading.Event(), WAIT_S)  # not NoFreeGpuError at WAIT_S
        assert time.monotonic() - t0 < WAIT_S
    finally:
        hosts.close()


def test_a_host_that_does_not_stop_a_cancelled_job_in_time_is_killed_and_replaced(
    executor: RayExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no grace at all the executor kills the host at once: the run folder still comes
    back from the node (salvaged, marked cancelled), and a new host takes the GPU.

    The salvage is a cold Ray task (a new worker process that imports the engine): on a
    two-core machine under eight test processes it can take more than the product's 60 s, and
    the cancel then (rightly) says the folder stayed on the node; that message has its own test
    below. Here the salvage gets the test's patience, and the killed host time to be reaped."""
    monkeypatch.setattr("nsight_agent.engine.executors.ray.jobs.CANCEL_GRACE_S", 0.0)
    monkeypatch.setattr("nsight_agent.engine.executors.ray.landing.SALVAGE_S", float(WAIT_S))
    handle = executor.submit(job(SLEEPS.format(seconds=60), tmp_path))
    host = wait_until_sleeping(handle)
    handle.cancel()
    with pytest.raises(RunCancelledError, match=r"GPU host .* was killed") as info:
        handle.result(WAIT_S)
    (run_dir,) = [d for d in tmp_path.iterdir() if not d.name.startswith(".")]
    assert getattr(info.value, "run_id", None) == run_dir.name
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "cancelled", status
    deadline = time.monotonic() + WAIT_S  # ray.kill is asynchronous
    while Path(f"/proc/{host}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not Path(f"/proc/{host}").exists(), "the host was not killed"
    after = executor.submit(job("", tmp_path))
    assert isinstance(after.result(WAIT_S), PreflightResult)
    assert int(after.where["pid"]) != host


def test_a_salvage_that_does_not_come_back_in_time_says_where_the_run_stayed(
    tmp_path: Path,
) -> None:
    """The cancel stands; its message says the folder was not brought back and where it is."""
    from types import SimpleNamespace

    from nsight_agent.engine.executors.ray import landing

    def never(*_: object, **__: object) -> object:
        raise TimeoutError("the salvage task did not finish")

    task = SimpleNamespace(remote=lambda *args: "ref")
    ray = SimpleNamespace(remote=lambda fn: SimpleNamespace(options=lambda **kw: task), get=never)
    where = {"scratch": "/scratch/job-1", "node_id": "ab" * 28, "pid": 4242}
    cancelled = RunCancelledError("Cancelled: its GPU host was killed.", "Run it again.")
    err = landing.salvage_run(ray, where, None, tmp_path, cancelled)
    assert isinstance(err, RunCancelledError) and err.hint == "Run it again."
    assert str(err).startswith("Cancelled: its GPU host was killed. Its run folder was not")
    assert "(TimeoutError)" in str(err) and "/scratch/job-1" in str(err)
    assert landing.salvage_run(ray, {}, None, tmp_path, cancelled) is cancelled  # never started
