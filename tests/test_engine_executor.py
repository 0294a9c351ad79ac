"""The executors without a GPU: the local executor's queue (one job per slot, the others wait,
slots run in parallel, each job pinned to its GPU), cancellation of a queued job, and the
parts of the Ray executor that need no Ray (install error, unreachable address, the run
folder on the wire, errors rebuilt from data)."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from nsight_agent.engine import pinning, pipeline, process
from nsight_agent.engine.collection import ncu, run_result
from nsight_agent.engine.collection.collect import profiled
from nsight_agent.engine.collection.collect.strategy import Collected
from nsight_agent.engine.executors import local as ex
from nsight_agent.engine.executors.ray import executor as ray_executor
from nsight_agent.engine.executors.ray import node as ray_node
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.pipeline import Job, Progress, run_job
from nsight_agent.engine.store.runs import RunResult
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.errors import InvalidRequestError, RunCancelledError
from nsight_agent.request import ProfileRequest

SOURCE = """
import torch


def setup(n: int, device: str = "cuda"):
    return torch.arange(n, device=device, dtype=torch.float32)


def run(x):
    return x * 2
"""


def request(source: str = SOURCE) -> ProfileRequest:
    return ProfileRequest(
        source=source, language="torch", configs={"n": [64]}, runs=1, warmup=0, timeout_s=60
    )


class Recorder:
    """A stand-in job function: sleeps, records its slot's pin and its start and end; with
    ``meet``, each job waits (10 s at most) until that many jobs run at once."""

    def __init__(
        self,
        seconds: float = 0.4,
        gate: threading.Event | None = None,
        meet: threading.Barrier | None = None,
    ) -> None:
        self.seconds, self.gate, self.meet = seconds, gate, meet
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(
        self, job: Job, cancel: threading.Event | None, on_progress: Progress | None
    ) -> Any:
        start = time.monotonic()
        if self.gate is not None:
            self.gate.wait(10)
        if self.meet is not None:
            self.meet.wait(10)  # raises BrokenBarrierError if the others never come
        time.sleep(self.seconds)
        with self.lock:
            self.calls.append(
                {
                    "name": job.name,
                    "env": pinning.pinned_env(),
                    "start": start,
                    "end": time.monotonic(),
                }
            )
        return job.name


def wait_for_running(pool: ex.LocalExecutor, jobs: int) -> None:
    """Wait on the pool's state (a slot thread took the job), not on a time."""
    deadline = time.monotonic() + 30
    while pool.pool_info()["running"] != jobs:
        assert time.monotonic() < deadline, pool.pool_info()
        time.sleep(0.01)


def by_name(rec: Recorder) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in rec.calls}


def test_with_one_slot_the_second_job_waits_for_the_first() -> None:
    rec = Recorder()
    with ex.LocalExecutor(["0"], job_function=rec) as pool:
        said: list[str] = []
        a = pool.submit(Job(request(), name="a"))
        b = pool.submit(Job(request(), name="b"), on_progress=lambda d, t, m: said.append(m))
        assert a.result(10) == "a" and b.result(10) == "b"
    calls = by_name(rec)
    assert calls["b"]["start"] >= calls["a"]["end"]
    assert calls["a"]["env"] == calls["b"]["env"] == {"CUDA_VISIBLE_DEVICES": "0"}
    assert said and said == ["queued: 1 job(s) ahead for 1 GPU slot(s)"]


def test_with_two_slots_two_jobs_run_at_once_each_on_its_own_gpu() -> None:
    rec = Recorder(seconds=0.1, meet=threading.Barrier(2))  # both running, or an error
    with ex.LocalExecutor(["2", "3"], job_function=rec) as pool:
        handles = [pool.submit(Job(request(), name=n)) for n in ("a", "b")]
        assert [h.result(10) for h in handles] == ["a", "b"]
    a, b = by_name(rec)["a"], by_name(rec)["b"]
    assert a["start"] < b["end"] and b["start"] < a["end"], "the two jobs did not overlap"
    assert {a["env"]["CUDA_VISIBLE_DEVICES"], b["env"]["CUDA_VISIBLE_DEVICES"]} == {"2", "3"}
    assert {h.device for h in handles} == {"2", "3"}


def test_the_cpu_slot_pins_nothing() -> None:
    rec = Recorder(seconds=0)
    with ex.LocalExecutor(["cpu"], job_function=rec) as pool:
        pool.run(Job(request(), name="a"))
    assert rec.calls[0]["env"] == {}


def test_a_queued_job_cancelled_leaves_the_queue_at_once_and_never_runs() -> None:
    gate = threading.Event()
    rec = Recorder(seconds=0, gate=gate)
    with ex.LocalExecutor(["0"], job_function=rec) as pool:
        first = pool.submit(Job(request(), name="first"))
        cancel = threading.Event()
        second = pool.submit(Job(request(), name="second"), cancel=cancel)
        wait_for_running(pool, 1)
        info = pool.pool_info()
        assert (info["running"], info["queued"]) == (1, 1)
        assert info["slots"] == [{"device": "0", "state": "busy", "job": "first", "jobs_done": 0}]
        cancel.set()
        with pytest.raises(RunCancelledError):
            second.result(5)
        # Out of the queue while the first job still holds its slot: the cancel did not wait
        # for a slot to free (state, not a stopwatch).
        assert not first.done()
        assert pool.pool_info()["queued"] == 0
        gate.set()
        assert first.result(5) == "first"
    assert [c["name"] for c in rec.calls] == ["first"]


def test_a_job_error_reaches_the_caller_and_the_slot_goes_on() -> None:
    calls: list[str] = []

    def job_function(job: Job, cancel: Any, on_progress: Any) -> Any:
        calls.append(job.name)
        if job.name == "bad":
            raise SourceError("setup", "boom")
        return job.name

    with ex.LocalExecutor(["0"], job_function=job_function) as pool:
        with pytest.raises(SourceError, match="boom"):
            pool.run(Job(request(), name="bad"))
        assert pool.run(Job(request(), name="good")) == "good"
        assert pool.pool_info()["slots"][0]["jobs_done"] == 2


def test_profile_calls_the_pipeline_with_the_service_arguments(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}

    def fake_profile(req: ProfileRequest, **kwargs: Any) -> RunResult:
        seen.update(kwargs, env=pinning.pinned_env())
        empty = pd.DataFrame()
        return RunResult("r1", tmp_path, req, empty, empty, [], {}, [], {}, 0.0)

    monkeypatch.setattr(pipeline, "profile", fake_profile)
    cancel = threading.Event()
    with ex.LocalExecutor(["1"]) as pool:
        run = pool.profile(request(), runs_root=tmp_path, cancel=cancel)
    assert run.run_id == "r1"
    assert seen["runs_root"] == tmp_path and seen["cancel"] is cancel
    assert seen["env"] == {"CUDA_VISIBLE_DEVICES": "1"}


def test_a_real_preflight_job_runs_in_a_slot(tmp_path: Path) -> None:
    with ex.LocalExecutor(["cpu"]) as pool:
        pre = pool.run(Job(request(), tmp_path, mode="preflight"))
    assert isinstance(pre, pipeline.PreflightResult) and pre.ok, pre
    assert (tmp_path / str(pre.run_id) / "preflight-manifest.json").is_file()


def test_with_workers_a_profile_jobs_preflight_runs_on_the_slots_warm_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Only the ncu process starts cold: the pre-flight runs on one worker, reused by the next
    job, and a broken source is still rejected (by that worker) before ncu."""
    seen: list[pipeline.PreflightResult] = []

    def measured(req: ProfileRequest, run_dir: Path, run_id: str, pre: Any, *a: Any) -> Any:
        seen.append(pre)
        empty = pd.DataFrame()
        return RunResult(run_id, run_dir, req, empty, empty, [], {}, [], {}, 0.0)

    monkeypatch.setattr(ncu, "find_ncu", lambda: Path("/bin/true"))
    # No ncu run.
    monkeypatch.setattr(profiled, "cold", lambda *a, **k: Collected(0.0, "cold"))
    monkeypatch.setattr(run_result, "of_ncu_run", measured)
    with WorkerPool() as workers, ex.LocalExecutor(["cpu"], workers=workers) as pool:
        pool.profile(request(), runs_root=tmp_path)
        first = workers.get("cpu").pid
        pool.profile(request(), runs_root=tmp_path)
        assert workers.get("cpu").pid == first is not None
        with pytest.raises(SourceError, match="SyntaxError"):
            pool.profile(request(SOURCE + "\ndef broken(:\n"), runs_root=tmp_path)
        assert workers.get("cpu").pid == first
    assert len(seen) == 2 and all(p.ok for p in seen)
    assert all(p.warm for p in seen)


def test_a_timing_job_waits_for_the_ncu_job_on_its_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A timing job is queued in the slot like an ncu job, so it never measures beside one on
    the same GPU; it then runs whole on the slot's warm worker (perf_counter on the CPU)."""

    def slow_profile(req: ProfileRequest, **kwargs: Any) -> RunResult:
        time.sleep(1.5)  # an ncu run holding the GPU
        empty = pd.DataFrame()
        return RunResult("ncu", tmp_path, req, empty, empty, [], {}, [], {}, 0.0)

    monkeypatch.setattr(pipeline, "profile", slow_profile)
    with WorkerPool() as workers, ex.LocalExecutor(["cpu"], workers=workers) as pool:
        assert pool.runs_timing
        ncu_job = pool.submit(Job(request(), tmp_path, name="ncu"))
        timing_job = pool.submit(Job(request(), tmp_path, mode="timing", name="timing"))
        ncu_job.result(30)
        timed = timing_job.result(120)
    assert isinstance(timed, RunResult)
    assert set(timed.processed["Method"]) == {"perf_counter"}
    assert ncu_job.ended is not None and timing_job.started is not None
    assert timing_job.started >= ncu_job.ended
    with pytest.raises(InvalidRequestError, match="warm worker"):
        run_job(Job(request(), tmp_path, mode="timing"))  # no workers, no timing


def test_close_cancels_the_queued_jobs() -> None:
    gate = threading.Event()
    pool = ex.LocalExecutor(["0"], job_function=Recorder(seconds=0, gate=gate))
    first = pool.submit(Job(request(), name="first"))
    queued = pool.submit(Job(request(), name="queued"))
    wait_for_running(pool, 1)  # the first job is in its slot, the second waits
    pool.close()
    with pytest.raises(RunCancelledError):
        queued.result(2)
    gate.set()
    assert first.result(5) == "first"
    with pytest.raises(RuntimeError):
        pool.submit(Job(request()))


@pytest.mark.parametrize(
    ("visible", "slots"),
    [("2,3", ["2", "3"]), ("GPU-ab12", ["GPU-ab12"]), ("", ["cpu"]), ("-1", ["cpu"])],
)
def test_local_slots_follow_cuda_visible_devices(
    monkeypatch: pytest.MonkeyPatch, visible: str, slots: list[str]
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(pinning, "_nvml_count", lambda: 4)  # a machine with GPUs
    assert ex.local_slots() == slots


def test_cuda_visible_devices_on_a_machine_without_a_gpu_is_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Set where there is no GPU (a CI image, Ray's logical GPUs): every job ran as a CUDA
    job and its harness died without a report."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(pinning, "_nvml_count", lambda: None)
    monkeypatch.setattr(pinning, "_torch_count", lambda: 0)
    assert ex.local_slots() == ["cpu"]


def test_local_slots_without_a_gpu_are_one_cpu_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(pinning, "_nvml_count", lambda: None)
    monkeypatch.setattr(pinning, "_torch_count", lambda: 0)
    assert ex.local_slots() == ["cpu"]
    monkeypatch.setattr(pinning, "_nvml_count", lambda: 2)
    assert ex.local_slots() == ["0", "1"]


def test_pinning_is_per_thread() -> None:
    seen: list[dict[str, str]] = []
    with pinning.pinned("5"):
        thread = threading.Thread(target=lambda: seen.append(pinning.pinned_env()))
        thread.start()
        thread.join()
        assert pinning.pinned_env() == {"CUDA_VISIBLE_DEVICES": "5"}
    assert seen == [{}] and pinning.pinned_env() == {}


def test_child_processes_of_a_pinned_job_see_only_its_gpu() -> None:
    with pinning.pinned("3"):
        assert process.child_env()["CUDA_VISIBLE_DEVICES"] == "3"


# --- the Ray executor's parts that need no Ray ------------------------------------------------


def test_without_ray_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ray_executor.RayNotInstalledError) as err:
        ray_executor.import_ray()
    assert 'pip install ".[ray]" in a clone' in str(err.value)


def test_an_unreachable_cluster_fails_in_seconds() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(ray_executor.RayClusterUnreachableError, match="unreachable"):
        ray_executor.probe_address(f"127.0.0.1:{port}", timeout=2)
    assert time.monotonic() - t0 < 5


def test_run_folders_travel_as_tar_and_land_in_the_runs_root(tmp_path: Path) -> None:
    node, server = tmp_path / "node", tmp_path / "server"
    (node / "20261130-000000-abc" / "sub").mkdir(parents=True)
    (node / "20261130-000000-abc" / "status.json").write_text("{}")
    (node / "20261130-000000-abc" / "sub" / "x.txt").write_text("x")
    (node / ".cuda-cache").mkdir()
    (node / ".cuda-cache" / "big.so").write_text("not shipped")
    data = ray_node.pack(node)
    assert ray_node.unpack(data, server) == ["20261130-000000-abc"]
    assert (server / "20261130-000000-abc" / "sub" / "x.txt").read_text() == "x"
    assert not (server / ".cuda-cache").exists()
    assert [p.name for p in server.iterdir()] == ["20261130-000000-abc"]
    with pytest.raises(Exception, match="already exists"):
        ray_node.unpack(data, server)


@pytest.mark.parametrize("name", ["../escape.txt", "/abs.txt", ".hidden/x", "ok/../../x"])
def test_an_unsafe_tar_entry_is_refused(tmp_path: Path, name: str) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(InvalidRequestError):
        ray_node.unpack(buffer.getvalue(), tmp_path / "server")
    assert not (tmp_path / "escape.txt").exists()


def test_a_node_error_is_rebuilt_as_its_class_with_server_paths(tmp_path: Path) -> None:
    err = SourceError("setup", "boom in /scratch/42-x/run1/harness.py", line=7)
    err.run_id = "run1"  # type: ignore[attr-defined]
    payload = ray_node.error_payload(err)
    back = ray_node.rebuild_error(payload, "/scratch/42-x", tmp_path)
    assert isinstance(back, SourceError)
    assert (back.stage, back.line, getattr(back, "run_id", None)) == ("setup", 7, "run1")
    assert f"{tmp_path}/run1/harness.py" in str(back)
    foreign = dict(payload, module="os", qualname="PathLike")
    assert ray_node.rebuild_error(foreign, "", tmp_path) is None


def test_a_killed_hosts_run_folder_is_salvaged_marked_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the salvage task does on the node once the host is gone: the folder comes back as
    tar bytes, its unfinished run marked cancelled, and the scratch root is removed."""
    from nsight_agent.engine.executors.ray import scratch
    from nsight_agent.engine.store.run_status import read_status, write_status

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(gone.stdout)
    root = scratch.scratch_base() / f"{pid}-abc"
    run_dir = root / "20261205-000000-abc"
    run_dir.mkdir(parents=True)
    write_status(run_dir, run_dir.name, "running", message="profiling")
    data = scratch.salvage(str(root), pid)
    assert not root.exists()
    assert ray_node.unpack(data, tmp_path / "server") == [run_dir.name]
    status = read_status(tmp_path / "server" / run_dir.name) or {}
    assert status["status"] == "cancelled" and "host was killed" in status["message"]
    # Only a folder under the node's scratch base is read.
    assert scratch.salvage(str(tmp_path / "server"), pid) == b""


def test_the_salvage_task_imports_nothing_heavy() -> None:
    """It runs in a new Ray worker on a node that may be busy: importing the whole engine
    (pandas, pydantic, torch) there can take it past the cancel's wait."""
    code = (
        "import sys; import nsight_agent.engine.executors.ray.scratch; "
        "print(sorted(m for m in ('pandas', 'pydantic', 'torch', 'ray', 'ncu_report') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
