"""Pre-launched ncu targets without a GPU: a stand-in ncu that understands
``--mode launch`` (it runs the target on the CPU and holds it before its harness, as ncu holds
it at its first CUDA call, until an attach on its port) and ``--mode attach`` (it connects or
says "No attachable process found", waits for the target's end, and leaves the H200 sweep's
report). A job through a target gives the run a cold launch gives; an attach that fails, a
replay mode an attach cannot serve and a launch ncu refuses or holds go cold and say why; a
take is replenished; close, cancel, a timeout and a server killed with SIGKILL leave no
process. Every wait waits on a state with a deadline. The last test runs the real launch and
attach on a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from nsight_agent.engine import children, pipeline
from nsight_agent.engine.collection import extract, ncu_args
from nsight_agent.engine.collection.collect.choose import cold_reason
from nsight_agent.engine.executors import first_profile
from nsight_agent.engine.executors.base import JobHandle
from nsight_agent.engine.executors.local import LocalExecutor
from nsight_agent.engine.harness.call_markers import MARKER_KERNEL
from nsight_agent.engine.pipeline import Job
from nsight_agent.engine.store.runs import RunResult
from nsight_agent.engine.worker import targets as targets_module
from nsight_agent.engine.worker.targets import TargetPool
from nsight_agent.errors import CollectionTimeoutError, InvalidRequestError, RunCancelledError
from nsight_agent.request import ProfileRequest, Variant
from nsight_agent.server.app import build_server
from nsight_agent.service.summaries import profile_summary

# Tests that wait on other processes share one xdist worker, one after another.
pytestmark = pytest.mark.xdist_group("targets")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


STAND_IN_NCU = """#!{python}
# A stand-in ncu on the CPU: programs run with Triton's interpreter; a run leaves the H200
# sweep's report, its manifest's calls spliced in so that the report's NVTX ranges match.
import json, os, shutil, subprocess, sys, time
from pathlib import Path
argv = sys.argv[1:]
STATE = Path({state!r})
FAIL = os.environ.get("STAND_IN_FAIL", "")
with open(STATE / "calls.jsonl", "a") as f:
    f.write(json.dumps(argv) + "\\n")

def alive(pid):
    try:
        return Path(f"/proc/{{pid}}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (OSError, IndexError):
        return False

def leave_report(base, run_dir):
    shutil.copy({report!r}, base + ".ncu-rep")
    manifest = run_dir / "manifest.json"
    if manifest.exists():
        data = json.loads(manifest.read_text())
        data["calls"] = json.loads(Path({manifest!r}).read_text())["calls"]
        manifest.write_text(json.dumps(data))

mode = argv[argv.index("--mode") + 1] if "--mode" in argv else ""
if mode == "launch":
    # ncu prints this as it launches, before the target imports anything (seen on the H200)
    print("==PROF== Waiting for profiler to attach on ports 49408-49471.", flush=True)
    if FAIL == "launch-nvtx" and "--nvtx" in argv:
        print("==ERROR== Invalid option --nvtx specified for --mode launch")
        sys.exit(1)
    if FAIL == "launch-option":
        print("==ERROR== Invalid option --port specified for --mode launch")
        sys.exit(1)
    if FAIL == "launch-never-ready":  # a target that never says ready
        time.sleep(300)
    port = argv[argv.index("--port") + 1]
    for name in (f"waiting-{{port}}", f"go-{{port}}"):
        (STATE / name).unlink(missing_ok=True)
    program = argv[argv.index({python!r}):]
    env = dict(os.environ, TRITON_INTERPRET="1", STAND_IN_PORT=port, STAND_IN_STATE=str(STATE))
    sys.exit(subprocess.call([program[0], str(STATE / "shim.py"), program[-1]], env=env))
if mode == "attach":
    port = argv[argv.index("--port") + 1]
    if FAIL == "attach":
        print("==ERROR== Failed to attach to the target (stand-in)")
        sys.exit(1)
    waiting = STATE / f"waiting-{{port}}"
    pid = int(waiting.read_text()) if waiting.exists() else 0
    if not pid or not alive(pid):
        print(f"==WARNING== No processes found on 127.0.0.1 (ports {{port}}).")
        print("==ERROR== No attachable process found.")
        sys.exit(1)
    (STATE / f"go-{{port}}").touch()
    while alive(pid):
        time.sleep(0.02)
    base = argv[argv.index("--export") + 1]
    leave_report(base, Path(base).parent)
    if FAIL == "no-ranges":  # a report of the same kernels without NVTX ranges
        shutil.copy({bare!r}, base + ".ncu-rep")
    print("==PROF== Disconnected from process")
    sys.exit(0)
# A cold run: the harness on the CPU.
Path(argv[argv.index("--log-file") + 1]).write_text("==PROF== Disconnected\\n")
program = ["cpu" if a == "cuda" else a for a in argv[argv.index({python!r}):]]
code = subprocess.call(program, env=dict(os.environ, TRITON_INTERPRET="1"))
leave_report(argv[argv.index("--export") + 1], Path.cwd())
sys.exit(code)
"""

# The target as the stand-in launches it: held after its job arrives (where ncu holds it at
# its first CUDA call) until the attach says go; its harness runs on the CPU.
SHIM = """
import os, sys, time
from pathlib import Path
from nsight_agent.engine.worker import target

state, port = Path(os.environ["STAND_IN_STATE"]), os.environ["STAND_IN_PORT"]
run = target.run_job

def held(job):
    (state / f"waiting-{port}").write_text(str(os.getpid()))
    while not (state / f"go-{port}").exists():
        time.sleep(0.01)
    argv = ["cpu" if a == "cuda" else a for a in job.argv]
    return run(target.TargetJob(job.run_dir, argv, job.output, job.env))

target.run_job = held
sys.exit(target.main(sys.argv[1:]))
"""

SWEEP_SOURCE = """
import os, time
import torch

def setup(n, device="cpu"):
    return (torch.arange(n, dtype=torch.float32, device=device),)

def triton_add(x):
    return x + x

def triton_scale(x):
    return x * 2.0

def hangs(x):
    if not os.environ.get("NSIGHT_AGENT_PREFLIGHT"):
        open({flag!r} + ".tmp", "w").write(str(os.getpid()))
        os.replace({flag!r} + ".tmp", {flag!r})  # whole: a reader never sees it empty
        time.sleep(300)
    return x * 2.0
"""

KERNELS = {"triton_add": ["add_kernel"], "triton_scale": ["scale_kernel"]}  # the sweep's


def wait_for(what: str, ready: Callable[[], bool], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        assert time.monotonic() < deadline, f"{what}: not within {seconds:g} s"
        time.sleep(0.05)


def target_processes() -> dict[int, str]:
    """Live processes of ours that belong to a pre-launched target (launcher or program)."""
    return {
        pid: marker
        for pid, marker in children.marked_processes(children.owner_prefix()).items()
        if "-target-" in marker
    }


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sweep: Any) -> Iterator[Path]:
    state = tmp_path / "ncu-state"
    state.mkdir()
    script = state / "ncu"
    script.write_text(
        STAND_IN_NCU.format(
            python=sys.executable,
            state=str(state),
            report=str(sweep.report),
            manifest=str(sweep.manifest),
            bare=str(Path(__file__).parent / "fixtures" / "planted" / "control_copy_cuda.ncu-rep"),
        )
    )
    script.chmod(0o755)
    (state / "shim.py").write_text(SHIM)
    monkeypatch.setenv("NCU", str(script))
    monkeypatch.setattr(pipeline, "_default_device", lambda: "cpu")
    yield state
    wait_for("no target process left", lambda: not target_processes(), 30)


def calls(state: Path, mode: str) -> list[list[str]]:
    lines = (state / "calls.jsonl").read_text().splitlines()
    found = [json.loads(line) for line in lines]
    return [a for a in found if mode in a or (mode == "cold" and "--mode" not in a)]


def sweep_request(**fields: Any) -> ProfileRequest:
    return ProfileRequest(
        source=SWEEP_SOURCE.format(flag="/nonexistent"),
        language="torch",
        configs={"n": [4096, 65536, 1048576]},
        variants=[
            Variant(name="triton_add", entry="triton_add"),
            Variant(name="triton_scale", entry="triton_scale"),
        ],
        runs=3,
        timeout_s=300,
        **fields,
    )


def profile(executor: LocalExecutor, request: ProfileRequest, root: Path) -> RunResult:
    result = executor.run(Job(request, root))
    assert isinstance(result, RunResult)
    return result


def ready_pool(executor: LocalExecutor) -> TargetPool:
    executor.start_targets()
    pool = executor.target_pool("cpu")
    assert pool is not None
    assert pool.wait_ready(180), pool.info()
    return pool


def test_a_job_through_a_prelaunched_target_gives_the_cold_result_and_is_replenished(
    stand_in: Path, tmp_path: Path
) -> None:
    with LocalExecutor(["cpu"], targets=1) as executor:
        pool = ready_pool(executor)
        assert executor.pool_info()["slots"][0]["targets"] == "1 ready"
        first = set(target_processes())
        warm = profile(executor, sweep_request(), tmp_path / "runs")
        assert pool.taken == 1
        assert pool.wait_ready(180), pool.info()  # the next target, launched after the take
        assert first.isdisjoint(target_processes())  # the one taken is gone, a new one waits
    cold = pipeline.profile(sweep_request(), runs_root=tmp_path / "runs")

    assert warm.facts.collection == "pre-launched"
    assert cold.facts.collection == "cold: no pre-launched targets here"
    assert profile_summary(warm).collection == "pre-launched"
    columns = ["Annotation", "Metric", "n", "AvgValue", "StdDev", "NumRuns", "OutputOK"]
    assert warm.processed[columns].equals(cold.processed[columns])
    assert warm.raw.equals(cold.raw)
    assert warm.checks == cold.checks and len(warm.checks) == 2 * 3
    assert warm.kernels == cold.kernels == KERNELS
    assert warm.warnings == cold.warnings
    assert warm.dropped == cold.dropped and warm.suspects == cold.suspects
    manifest = json.loads((warm.run_dir / "manifest.json").read_text())
    assert manifest["mode"] == "profile" and manifest["device"] == "cpu"
    again = pipeline.load_run(warm.run_id, runs_root=tmp_path / "runs")
    assert again.facts.collection == "pre-launched"

    launch = calls(stand_in, "launch")[0]
    # ncu 2025.3.1 refuses --nvtx-include in launch and attach mode: --nvtx only, at launch.
    assert "--nvtx" in launch and "--nvtx-include" not in launch
    attached = calls(stand_in, "attach")[-1]
    assert "--nvtx" not in attached and "--nvtx-include" not in attached
    assert attached[attached.index("--port") + 1] == launch[launch.index("--port") + 1]
    assert attached[attached.index("--replay-mode") + 1] == "kernel"
    assert attached[attached.index("--export") + 1] == str(warm.run_dir / "report")


def test_the_warm_ups_throwaway_profile_takes_the_slots_path_and_keeps_no_run(
    stand_in: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It is queued as a user's job is and collected through the slot's pre-launched target;
    the pool then launches the next one; the run folder is gone; the pool row says how it
    went. A slot whose targets are off is left to go cold."""
    roots: list[Path] = []

    def job(root: Path) -> Job:  # the sweep: what the stand-in answers with
        roots.append(root)
        return Job(sweep_request(), root, "profile")

    monkeypatch.setattr(first_profile, "job", job)
    with LocalExecutor(["cpu"], targets=1) as executor:
        pool = ready_pool(executor)
        executor.pay_first_profiles(["cpu"])
        row = executor.pool_info()["slots"][0]
        assert pool.taken == 1 and row["jobs_done"] == 1, row
        assert row["first_profile"]["ok"] and row["first_profile"]["path"] == "pre-launched", row
        assert pool.wait_ready(180), pool.info()  # the next target, for the user's first call
    assert len(roots) == 1 and not roots[0].exists()
    with LocalExecutor(["cpu"], targets=0) as executor:
        executor.start_targets()
        executor.pay_first_profiles(["cpu"])
        assert "first_profile" not in executor.pool_info()["slots"][0]
    assert len(roots) == 1


def test_a_throwaway_profile_that_fails_or_hangs_is_said_and_a_hanging_one_cancelled() -> None:
    failed = JobHandle(first_profile.job(Path("unused")))
    failed.future.set_exception(RuntimeError("ncu exited 1"))
    done = first_profile.outcome(failed)
    assert not done.ok and done.said().endswith(": RuntimeError: ncu exited 1"), done
    hanging = JobHandle(first_profile.job(Path("unused")))
    done = first_profile.outcome(hanging, timeout=0.2)
    assert done.said() == "first profile failed after 0.2 s: no answer within 0.2 s"
    assert hanging.cancel_event.is_set()


def test_an_attach_that_fails_goes_cold_and_says_why(
    stand_in: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with LocalExecutor(["cpu"], targets=1) as executor:
        ready_pool(executor)
        monkeypatch.setenv("STAND_IN_FAIL", "attach")
        run = profile(executor, sweep_request(), tmp_path / "runs")
    assert run.facts.collection == (
        "cold: attach failed: ncu failed (exit code 1): Failed to attach to the target (stand-in)"
    )
    assert run.kernels == KERNELS
    assert all(c.ok for c in run.checks) and len(calls(stand_in, "cold")) == 1


def test_options_an_attach_cannot_serve_go_cold_and_leave_the_target(
    stand_in: Path, tmp_path: Path
) -> None:
    with LocalExecutor(["cpu"], targets=1) as executor:
        pool = ready_pool(executor)
        run = profile(executor, sweep_request(replay_mode="range"), tmp_path / "runs")
        assert pool.taken == 0 and pool.info() == "1 ready"
    assert run.facts.collection == "cold: replay_mode=range (targets serve kernel replay only)"
    assert not calls(stand_in, "attach")


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"replay_mode": "kernel"}, None),
        ({"replay_mode": "range"}, "replay_mode=range"),
        ({"nvtx_include": ("other@range",)}, "NVTX filter"),
        ({"nvtx_include": ()}, "NVTX filter"),
        ({"extra_args": ("--set", "full")}, "extra ncu arguments"),
        ({"sections": ("SpeedOfLight",)}, None),  # the attach keeps to the calls' ranges
        ({"sample_launches": True}, "launch sampling"),
    ],
)
def test_which_options_a_target_serves(options: dict[str, Any], why: str | None) -> None:
    reason = cold_reason(ncu_args.NcuOptions(**options))
    assert (reason is None) if why is None else (reason is not None and why in reason)


def test_torch_operator_ranges_go_cold() -> None:
    """A step view groups kernels by torch operator (NVTX ranges): an attach records none."""
    assert "torch operator ranges" in (cold_reason(ncu_args.NcuOptions(), True) or "")


def test_an_attach_profiles_only_inside_the_harness_profiler_ranges() -> None:
    """The set-up, check and warm-up kernels between the measured calls are never profiled:
    the attach keeps to the profiler ranges the harness opens around each call's markers."""
    options = ncu_args.NcuOptions(sections=("SpeedOfLight",))
    argv = ncu_args.attach_argv("ncu", options, 49152, Path("report"))
    assert argv[argv.index("--profile-from-start") + 1] == "off"
    assert argv[argv.index("--section") + 1] == "SpeedOfLight" and "--nvtx-include" not in argv


def test_application_replay_goes_cold() -> None:
    """ncu refuses application replay in attach mode; the tools do not offer it (request.py),
    and were it to reach the collect stage it would launch cold."""
    options = ncu_args.NcuOptions()
    object.__setattr__(options, "replay_mode", "application")
    assert cold_reason(options) == ("replay_mode=application (targets serve kernel replay only)")


@pytest.mark.parametrize(
    ("fail", "why", "launches"),
    [
        ("launch-option", "Invalid option --port specified for --mode launch", 1),
        ("launch-never-ready", "not ready within 3 s", targets_module.FAILURES_OFF),
    ],
)
def test_a_launch_that_cannot_serve_turns_the_pool_off_and_jobs_go_cold(
    stand_in: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fail: str,
    why: str,
    launches: int,
) -> None:
    """A refused option turns the pool off at once; a target that never gets ready is given
    up after START_TIMEOUT, and the pool after FAILURES_OFF such launches in a row."""
    monkeypatch.setenv("STAND_IN_FAIL", fail)
    monkeypatch.setattr(targets_module, "START_TIMEOUT", 3.0)
    with LocalExecutor(["cpu"], targets=1) as executor:
        executor.start_targets()
        pool = executor.target_pool("cpu")
        assert pool is not None
        wait_for("the pool off", lambda: pool.info().startswith("off:"), 60)
        assert why in pool.info()
        run = profile(executor, sweep_request(), tmp_path / "runs")
    assert run.facts.collection.startswith("cold: pre-launched targets are off (the launch")
    assert len(calls(stand_in, "launch")) == launches  # not tried again after that


def test_a_refused_nvtx_flag_is_dropped_and_the_pool_serves(
    stand_in: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If ncu refuses --nvtx at launch too, the next target is launched without it."""
    monkeypatch.setenv("STAND_IN_FAIL", "launch-nvtx")
    with LocalExecutor(["cpu"], targets=1) as executor:
        pool = ready_pool(executor)
        run = profile(executor, sweep_request(), tmp_path / "runs")
    assert run.facts.collection == "pre-launched"
    launches = calls(stand_in, "launch")
    assert "--nvtx" in launches[0] and "--nvtx" not in launches[1]
    assert pool.taken == 1


def test_an_attach_report_without_call_ranges_goes_cold_and_turns_the_pool_off(
    stand_in: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attach mode may not record NVTX: a report whose kernels are in no harness call range
    and carry no call markers cannot be read into rows; the job runs cold, and no later job
    tries a target."""
    with LocalExecutor(["cpu"], targets=1) as executor:
        pool = ready_pool(executor)
        monkeypatch.setenv("STAND_IN_FAIL", "no-ranges")
        run = profile(executor, sweep_request(), tmp_path / "runs")
        assert pool.info().startswith(
            "off: the attached report records no NVTX call ranges and no call markers"
        )
        again = profile(executor, sweep_request(), tmp_path / "runs")
    assert run.facts.collection == (
        "cold: attach failed: the attached report records no NVTX call ranges and no call markers"
    )
    assert run.kernels == KERNELS and all(c.ok for c in run.checks)
    assert again.facts.collection.startswith("cold: pre-launched targets are off")


def test_close_kills_every_waiting_target(stand_in: Path) -> None:
    pool = TargetPool("cpu", 2)
    pool.start()
    wait_for("two ready", lambda: pool.info() == "2 ready", 180)
    pids = set(target_processes())
    assert len(pids) == 4  # two launchers, two targets
    pool.close()
    wait_for("the targets gone", lambda: not (pids & set(target_processes())), 30)
    assert pool.take() is None and "closed" in pool.why_none()


def test_no_targets_unless_asked_for(monkeypatch: pytest.MonkeyPatch, stand_in: Path) -> None:
    """A "cpu" slot keeps none by default, a stand-in job function never starts any, and 0
    turns them off."""
    monkeypatch.delenv("NSIGHT_AGENT_TARGETS", raising=False)
    with LocalExecutor(["cpu"]) as executor:
        executor.start_targets()
        assert executor.target_pool("cpu") is None
    with LocalExecutor(["0"], job_function=lambda job, cancel, say: "done") as executor:
        executor.start_targets()
        assert executor.target_pool("0") is None
    with LocalExecutor(["cpu"], targets=0) as executor:
        executor.start_targets()
        pool = executor.target_pool("cpu")
        assert pool is not None and pool.info() == "off: NSIGHT_AGENT_TARGETS=0"
        assert pool.why_none() == "pre-launched targets are off (NSIGHT_AGENT_TARGETS=0)"
    assert not target_processes()
    monkeypatch.setenv("NSIGHT_AGENT_TARGETS", "two")
    with pytest.raises(InvalidRequestError, match="NSIGHT_AGENT_TARGETS must be a whole number"):
        LocalExecutor(["cpu"])
    assert targets_module.configured_count("0") == 0
    assert targets_module.configured_count("") == 1  # one per GPU by default (ARCHITECTURE.md)
    monkeypatch.delenv("NSIGHT_AGENT_TARGETS")
    assert targets_module.configured_count() == 1


@pytest.mark.anyio
async def test_the_server_answers_which_path_ran_and_its_end_leaves_no_target(
    stand_in: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the MCP tools: the first profiling call starts the slot's targets (and runs
    cold), device_info shows them, the next call runs pre-launched, and the run's answer
    (get_run, as profile_kernel's) says which; the server's end kills the waiting target."""
    monkeypatch.setenv("NSIGHT_AGENT_TARGETS", "1")  # a number: the "cpu" slot gets one
    args = {
        "source": SWEEP_SOURCE.format(flag="/nonexistent"),
        "language": "torch",
        "configs": [{"n": 4096}, {"n": 65536}, {"n": 1048576}],
        "variants": [{"name": n, "entry": n} for n in ("triton_add", "triton_scale")],
        "runs": 3,
    }
    async with Client(build_server(tmp_path / "runs")) as client:
        first = await client.call_tool("compare_variants", args)
        assert not first.is_error, first.content
        deadline = time.monotonic() + 180
        while True:
            info = (await client.call_tool("device_info", {})).structured_content or {}
            if info["pool"]["slots"][0].get("targets") == "1 ready":
                break
            assert time.monotonic() < deadline, info["pool"]
            await anyio.sleep(0.2)
        second = await client.call_tool("compare_variants", args)
        assert not second.is_error, second.content
        run_id = (second.structured_content or {})["run_id"]
        answer = await client.call_tool("get_run", {"run_id": run_id})
        assert (answer.structured_content or {})["collection"] == "pre-launched"
        # The first call started the target: ready before its collect (the pre-flight took
        # longer) or not yet.
        answer = await client.call_tool("get_run", {"run_id": first.structured_content["run_id"]})
        assert answer.structured_content["collection"] in (
            "pre-launched",
            "cold: no pre-launched target ready yet (one is starting)",
        )
        assert target_processes()  # the next target, waiting
    wait_for("the server's targets gone", lambda: not target_processes(), 30)


def hanging_request(flag: Path, timeout_s: float = 300) -> ProfileRequest:
    return ProfileRequest(
        source=SWEEP_SOURCE.format(flag=str(flag)),
        language="torch",
        entry="hangs",
        configs={"n": [64]},
        runs=1,
        timeout_s=timeout_s,
    )


def test_a_cancel_kills_the_taken_target(stand_in: Path, tmp_path: Path) -> None:
    flag = tmp_path / "hanging"
    with LocalExecutor(["cpu"], targets=1) as executor:
        ready_pool(executor)
        handle = executor.submit(Job(hanging_request(flag), tmp_path / "runs"))
        wait_for("the source hanging in the target", flag.exists)
        hung = int(flag.read_text())
        assert hung in target_processes()  # the harness runs in the target itself
        handle.cancel()
        with pytest.raises(RunCancelledError):
            handle.result(60)
        wait_for("the taken target gone", lambda: hung not in target_processes(), 30)


def test_a_timeout_kills_the_taken_target(stand_in: Path, tmp_path: Path) -> None:
    flag = tmp_path / "hanging"
    pids: list[int] = []
    with LocalExecutor(["cpu"], targets=1) as executor:
        ready_pool(executor)
        handle = executor.submit(Job(hanging_request(flag, timeout_s=30), tmp_path / "runs"))
        watcher = threading.Thread(
            target=lambda: (wait_for("hanging", flag.exists), pids.append(int(flag.read_text())))
        )
        watcher.start()
        with pytest.raises(CollectionTimeoutError, match="30 s limit"):
            handle.result(120)
        watcher.join(5)
        assert pids, "the source never ran in the target"
        wait_for("the taken target gone", lambda: pids[0] not in target_processes(), 30)


SERVER = """
import sys
from nsight_agent.engine.worker.targets import TargetPool
pool = TargetPool("cpu", 1)
pool.start()
assert pool.wait_ready(180), pool.info()
target = pool._waiting[0]
print(target.proc.pid, target.info()["pid"], target.folder, flush=True)
sys.stdin.read()
"""


def test_targets_end_themselves_when_their_server_is_killed(stand_in: Path) -> None:
    """A server killed with SIGKILL cannot kill its targets: each target's watchdog ends its
    own process group (launcher included) once the server is gone, and removes its folder."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        assert server.stdout is not None
        first, second, where = server.stdout.readline().decode().split()
        launcher, program, folder = int(first), int(second), Path(where)
        assert running(launcher) and running(program) and folder.is_dir()
    finally:
        server.kill()
        server.wait()
    wait_for("the target and its launcher gone", lambda: not (running(launcher) or running(program)), 30)  # fmt: skip
    assert not folder.exists()


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


# --- on a GPU with ncu (skipped here): the real launch/attach, against a cold run ---------------

TRITON_ADD = Path(__file__).resolve().parents[1] / "examples" / "contract" / "triton_vector_add.py"


def triton_add_request() -> ProfileRequest:
    return ProfileRequest(
        source=TRITON_ADD.read_text(),
        language="triton",
        configs={"n": [1 << 20]},
        variants=[Variant(name="torch", entry="reference"), Variant(name="triton", entry="run")],
        runs=3,
        warmup=2,
    )


STEP_CHAIN = TRITON_ADD.parent / "step_unfused_chain.py"
FOUR_ADDS = """
def add_out(x, y, out, block_size):
    return torch.add(x, y, out=out)


def run_256(x, y, out, block_size):
    return run(x, y, out, 256)
"""


def prelaunch_cases() -> dict[str, ProfileRequest]:
    """What an attached run must read as a cold one does: two variants, a sweep of
    configs, four variants, a multi-kernel step, and a job with sections."""
    torch_triton = [Variant(name="torch", entry="reference"), Variant(name="triton", entry="run")]
    return {
        "two_variants": triton_add_request(),
        "sweep": triton_add_request().model_copy(
            update={"configs": {"n": [4096, 65536, 1 << 20]}, "runs": 2}
        ),
        "four_variants": triton_add_request().model_copy(
            update={
                "source": TRITON_ADD.read_text() + FOUR_ADDS,
                "variants": [
                    *torch_triton,
                    Variant(name="add_out", entry="add_out"),
                    Variant(name="triton_256", entry="run_256"),
                ],
            }
        ),
        "step": ProfileRequest(
            source=STEP_CHAIN.read_text(), language="triton", configs={"n": [1024]}, runs=2
        ),
        "sections": triton_add_request().model_copy(
            update={"sections": ["SpeedOfLight", "LaunchStats", "Occupancy"], "runs": 2}
        ),
    }


def mean_times(run: RunResult) -> dict[tuple[Any, ...], float]:
    frame = run.processed
    rows = frame[frame["Metric"] == "gpu__time_duration.sum"]
    keys = [c for c in ("Annotation", "Kernel", "n") if c in rows.columns]
    return {tuple(r[k] for k in keys): float(r["AvgValue"]) for _, r in rows.iterrows()}


# ncu prints its launch banner before the target reaches CUDA (not a suspended target), and an
# attached report keeps no NVTX state: the call markers stand in for NVTX. The five cases on a
# GPU: bench/results/gpu-tests/2026-12-06-h100-80gb-hbm3-e5bdb94.json.
@pytest.mark.gpu
@pytest.mark.parametrize("case", list(prelaunch_cases()))
def test_a_real_prelaunched_run_measures_what_a_cold_run_measures(
    tmp_path: Path, case: str
) -> None:
    """The attach finds the suspended target and the report is tied to the harness's calls by
    the call markers; it profiled nothing outside them (the profiler ranges); and it reads as a
    cold run of the same request does: the same kernels, rows and checks, each row's mean
    time within 2x of the cold one's (a kernel tied to the wrong call or config reads its
    time many times over across this sweep's sizes)."""
    req = prelaunch_cases()[case]
    with LocalExecutor(["0"], targets=1) as executor:
        executor.start_targets()
        pool = executor.target_pool("0")
        assert pool is not None
        assert pool.wait_ready(120), pool.info()
        warm = profile(executor, req, tmp_path)
    cold = pipeline.profile(req, runs_root=tmp_path)
    assert warm.facts.collection == "pre-launched", warm.facts.collection
    assert cold.facts.collection.startswith("cold"), cold.facts.collection
    assert warm.kernels == cold.kernels and all(warm.kernels.values())
    timed = warm.processed[warm.processed["Metric"] == "gpu__time_duration.sum"]
    assert len(warm.raw) == len(cold.raw) and (timed["NumRuns"] == req.runs).all()
    assert warm.checks == cold.checks and all(c.ok for c in warm.checks)
    profiled = extract.read_actions(warm.files.report, metrics=[])
    markers = [r for r in profiled if r.kernel.startswith(MARKER_KERNEL)]
    calls = len(json.loads(warm.files.manifest.read_text())["calls"])
    assert len(markers) == 2 * calls  # no set-up, check or warm-up kernel was profiled
    measured = extract.read_actions(cold.files.report, metrics=[])  # NVTX-filtered: the calls'
    assert len(profiled) - len(markers) == len(measured)
    times, cold_times = mean_times(warm), mean_times(cold)
    assert times.keys() == cold_times.keys() and times
    for key, value in times.items():
        assert 0.5 < value / cold_times[key] < 2.0, (key, value, cold_times[key])
    wait_for("no target left after close", lambda: not target_processes(), 30)


@pytest.mark.gpu
def test_on_a_real_gpu_a_pool_that_cannot_prelaunch_says_why_and_the_job_runs_cold(
    tmp_path: Path,
) -> None:
    """Where ncu cannot serve pre-launched targets, turning them on costs nothing but a line:
    the pool is off with a reason, the job runs cold and measures what a plain cold run does,
    and no target process is left behind."""
    req = triton_add_request()
    with LocalExecutor(["0"], targets=1) as executor:
        executor.start_targets()
        pool = executor.target_pool("0")
        assert pool is not None
        ready = pool.wait_ready(120)
        run = profile(executor, req, tmp_path)
        said = pool.info()
    wait_for("no target left after close", lambda: not target_processes(), 30)
    if ready and run.facts.collection == "pre-launched":
        pytest.skip("this ncu serves pre-launched targets: the test above covers it")
    assert said.startswith("off: ") or run.facts.collection.startswith("cold: "), (said, run)
    assert run.facts.collection.startswith("cold"), run.facts.collection
    cold = pipeline.profile(req, runs_root=tmp_path)
    assert run.kernels == cold.kernels and run.kernels["triton"] == ["add_kernel"]
    timed = run.processed[run.processed["Metric"] == "gpu__time_duration.sum"]
    assert len(run.raw) == len(cold.raw) and (timed["NumRuns"] == 3).all()
    assert run.checks == cold.checks and all(c.ok for c in run.checks)


GPU_SERVER = """
import sys, time
from nsight_agent.engine.worker.targets import TargetPool
pool = TargetPool("0", 2)
pool.start()
deadline = time.monotonic() + 180
while pool.info() != "2 ready" and time.monotonic() < deadline:
    time.sleep(0.2)
print(pool.info(), flush=True)
sys.stdin.read()
pool.close()
"""


@pytest.mark.gpu
@pytest.mark.parametrize("end", ["killed", "closed"])
def test_on_a_real_gpu_a_full_pool_leaves_no_process_when_its_server_ends(end: str) -> None:
    """Two real ncu launchers, each holding a suspended target on the GPU (the pool full): a
    server killed with SIGKILL, or one that closes its pool on shutdown, leaves none of them
    (nor any process they started) behind."""
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, "-c", GPU_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    prefix = children.owner_prefix(server.pid)
    try:
        assert server.stdout is not None and server.stdin is not None
        said = server.stdout.readline().decode().strip()
        assert said == "2 ready", said
        ours = {
            p for p, marker in children.marked_processes(prefix).items() if "-target-" in marker
        }
        assert len(ours) >= 4, ours  # two launchers and the two targets they hold
        if end == "killed":
            server.kill()
        else:
            server.stdin.close()
        server.wait(60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    wait_for("every launcher and target gone", lambda: not (ours & set(children.marked_processes(prefix))), 60)  # fmt: skip
