"""Run records that tell the truth when the server ends mid-run.

A run in flight when the server is ended (SIGTERM, the client closing stdin, an SDK client
leaving, an HTTP server's SIGTERM) is recorded ``interrupted`` with who ended it
(``ended_by``), never left ``running`` and never blamed on its source ("harness died ...
os._exit() in your source?"); a server that starts finds the runs a dead server left
``running`` and marks them ``interrupted``. Every wait here waits on a state (a flag file the
hanging source writes, a status, a process gone), each with a generous deadline.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from nsight_agent.engine import children, process
from nsight_agent.engine.store import run_status
from nsight_agent.engine.store.run_status import RunRecord, run_record, write_status
from nsight_agent.engine.store.runs import load_run, new_run_dir, write_request
from nsight_agent.errors import RunCancelledError, RunInterruptedError
from nsight_agent.request import ProfileRequest
from nsight_agent.server.app import build_server

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
BLAME = ("os._exit", "died without an error report", "in your source")

# The source hangs in its entry (in the pre-flight, or only under "ncu") after writing FLAG.
HANGS = """
import os, time
import torch

def setup(n, device):
    return (torch.ones(n, device=device),)

def run(x):
    if {when}:
        open({flag!r}, "w").close()
        time.sleep(300)
    return x * 2
"""
IN_PREFLIGHT = "True"
UNDER_NCU = "not os.environ.get('NSIGHT_AGENT_PREFLIGHT')"

# Runs the harness the way ncu would, without profiling: on the CPU, no report written.
STAND_IN_NCU = """#!{python}
import os, subprocess, sys
argv = sys.argv[1:]
open(argv[argv.index("--log-file") + 1], "w").close()
target = argv[argv.index({python!r}):]
target = ["cpu" if a == "cuda" else a for a in target]
sys.exit(subprocess.call(target, env=dict(os.environ, TRITON_INTERPRET="1")))
"""


def show(what: str, value: object) -> None:
    """What a user sees, printed for ``pytest -rP`` (the closing notes quote it)."""
    print(f"{what}: {value if isinstance(value, str) else json.dumps(value)}")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def wait_for(what: str, ready: Callable[[], bool], seconds: float = 120) -> None:
    """Wait on a state, with a deadline that fails loudly."""
    deadline = time.monotonic() + seconds
    while not ready():
        assert time.monotonic() < deadline, f"{what}: not within {seconds:g} s"
        time.sleep(0.1)


def statuses(runs: Path) -> list[dict[str, Any]]:
    return [json.loads((d / "status.json").read_text()) for d in sorted(runs.glob("2*"))]


def server_env(tmp_path: Path, ncu: bool) -> dict[str, str]:
    env = dict(os.environ, NSIGHT_AGENT_RUNS=str(tmp_path / "runs"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("NSIGHT_AGENT_TOKEN", None)
    if ncu:
        stand_in = tmp_path / "ncu"
        stand_in.write_text(STAND_IN_NCU.format(python=sys.executable))
        stand_in.chmod(0o755)
        env["NCU"] = str(stand_in)
    else:
        env["NCU"] = "/nonexistent"
        env["PATH"] = "/usr/bin:/bin"  # no ncu: the call takes the timing path (method below)
    return env


def send(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())
    proc.stdin.flush()


def stdio_server_in_a_run(tmp_path: Path, ncu: bool, when: str) -> subprocess.Popen[bytes]:
    """A stdio server with one profile_kernel call hanging in its source (FLAG written)."""
    flag = tmp_path / "sleeping"
    proc = subprocess.Popen(
        [sys.executable, "-m", "nsight_agent", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "server.log").open("wb"),
        env=server_env(tmp_path, ncu),
        cwd=tmp_path,
    )
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
    send(proc, {"id": 1, "method": "initialize",
                "params": {**hello, "clientInfo": {"name": "records", "version": "1"}}})  # fmt: skip
    assert proc.stdout is not None and b'"id":1' in proc.stdout.readline()
    send(proc, {"method": "notifications/initialized"})
    args = {"source": HANGS.format(when=when, flag=str(flag)), "configs": [{"n": 8}],
            "language": "torch", **({} if ncu else {"method": "timing"})}  # fmt: skip
    send(proc, {"id": 2, "method": "tools/call",
                "params": {"name": "profile_kernel", "arguments": args}})  # fmt: skip
    wait_for("the source started hanging", flag.exists)
    return proc


@pytest.fixture
def cleanup() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        children.kill_marked(children.owner_prefix(proc.pid))


STAGES = [
    pytest.param(False, IN_PREFLIGHT, "pre-flight", id="timing pre-flight (no ncu)"),
    pytest.param(True, IN_PREFLIGHT, "pre-flight", id="warm pre-flight"),
    pytest.param(True, UNDER_NCU, "ncu", id="under ncu"),
]
ENDS = [
    pytest.param("SIGTERM", "the server's shutdown (SIGTERM)", 128 + 15, id="SIGTERM"),
    pytest.param("stdin", "the client's exit (stdin closed)", 0, id="stdin closed"),
]


@pytest.mark.parametrize(("how", "who", "code"), ENDS)
@pytest.mark.parametrize(("ncu", "when", "stage"), STAGES)
def test_a_server_ended_mid_run_records_the_run_interrupted_by_who_ended_it(
    tmp_path: Path,
    cleanup: list[subprocess.Popen[bytes]],
    ncu: bool,
    when: str,
    stage: str,
    how: str,
    who: str,
    code: int,
) -> None:
    proc = stdio_server_in_a_run(tmp_path, ncu, when)
    cleanup.append(proc)
    wait_for(f"stage {stage}", lambda: statuses(tmp_path / "runs")[0]["stage"] == stage)
    if how == "SIGTERM":
        proc.send_signal(signal.SIGTERM)
    else:
        assert proc.stdin is not None
        proc.stdin.close()
    assert proc.wait(timeout=60) == code
    (status,) = statuses(tmp_path / "runs")
    show(f"{how} at {stage}: exit {code}, status.json", status)
    assert status["status"] == "interrupted", status
    assert status["ended_by"] == who and status["stage"] == stage, status
    assert who in status["message"] and not any(b in status["message"] for b in BLAME), status
    wait_for("every child gone", lambda: not children.marked_processes(f"{proc.pid}-"), 20)


async def test_an_sdk_client_leaving_mid_run_is_not_blamed_on_the_source(tmp_path: Path) -> None:
    """The SDK's stdio client leaving (it cancels the call, closes stdin, then SIGTERM after
    2 s): the run is cancelled or interrupted, with who ended it, and the server is gone."""
    flag = tmp_path / "sleeping"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nsight_agent", "serve"],
        env=server_env(tmp_path, ncu=True),
        cwd=str(tmp_path),
    )
    args = {"source": HANGS.format(when=IN_PREFLIGHT, flag=str(flag)), "configs": [{"n": 8}],
            "language": "torch"}  # fmt: skip
    async with Client(params, read_timeout_seconds=120) as client, anyio.create_task_group() as tg:
        tg.start_soon(client.call_tool, "profile_kernel", args)
        with anyio.fail_after(120):
            while not flag.exists():
                await anyio.sleep(0.1)
        tg.cancel_scope.cancel()
    with anyio.fail_after(60):
        while any(s["status"] == "running" for s in statuses(tmp_path / "runs")):
            await anyio.sleep(0.1)
    (status,) = statuses(tmp_path / "runs")
    show("an SDK client left mid-run: status.json", status)
    assert status["status"] in ("cancelled", "interrupted"), status
    assert status["ended_by"], status
    assert not any(b in status["message"] for b in BLAME), status


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_an_http_server_ended_mid_run_answers_and_records_interrupted(
    tmp_path: Path, cleanup: list[subprocess.Popen[bytes]]
) -> None:
    port, flag = free_port(), tmp_path / "sleeping"
    proc = subprocess.Popen(
        [sys.executable, "-m", "nsight_agent", "serve", "--transport", "streamable-http",
         "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "server.log").open("wb"),
        stdin=subprocess.DEVNULL,
        env=server_env(tmp_path, ncu=False),
        cwd=tmp_path,
    )  # fmt: skip
    cleanup.append(proc)
    wait_for("the server listens", lambda: _listens(port), 60)
    args = {
        "source": HANGS.format(when=IN_PREFLIGHT, flag=str(flag)),
        "configs": [{"n": 8}],
        "language": "torch",
        "method": "timing",
    }  # fmt: skip (no ncu: the timing path)
    http = httpx2.AsyncClient(timeout=120)
    url = f"http://127.0.0.1:{port}/mcp"

    async def end_it() -> None:
        with anyio.fail_after(120):
            while not flag.exists():
                await anyio.sleep(0.1)
        proc.send_signal(signal.SIGTERM)

    client = Client(streamable_http_client(url, http_client=http))
    with anyio.fail_after(180):  # a server that waited for the run would wait for ever
        async with client, anyio.create_task_group() as tg:
            tg.start_soon(end_it)
            answer = await client.call_tool("profile_kernel", args)
    text = answer.content[0].text if answer.content else ""  # type: ignore[union-attr]
    assert answer.is_error and "interrupted by the server's shutdown (SIGTERM)" in text, text
    assert proc.wait(timeout=60) in (0, -signal.SIGTERM)  # uvicorn raises the signal again
    (status,) = statuses(tmp_path / "runs")
    assert status["status"] == "interrupted", status
    assert status["ended_by"] == "the server's shutdown (SIGTERM)", status


def _listens(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


# --- a server's start finds runs a dead server left running ----------------------------------


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def left_running(root: Path, pid: int, **fields: Any) -> str:
    run_id, run_dir = new_run_dir(root)
    write_status(run_dir, run_id, "running", stage="pre-flight")
    status = json.loads((run_dir / "status.json").read_text())
    status.update(pid=pid, **fields)
    (run_dir / "status.json").write_text(json.dumps(status))
    return run_id


async def test_a_starting_server_marks_runs_a_dead_server_left_running(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    gone = dead_pid()
    abandoned = left_running(runs, gone)
    reused = left_running(runs, os.getppid(), pid_started=1)  # alive, but another process now
    ours = left_running(runs, os.getpid())  # this process: alive
    elsewhere = left_running(runs, gone, host="another-host")  # not ours to judge
    async with Client(build_server(runs)) as client:
        assert not (await client.call_tool("list_skills", {})).is_error
    by_id = {s["run_id"]: s for s in statuses(runs)}
    for run_id in (abandoned, reused):
        status = by_id[run_id]
        assert status["status"] == "interrupted", status
        assert "the end of its server (pid" in status["ended_by"], status
        assert "pre-flight" in status["message"] and "os._exit" not in status["message"]
    assert by_id[ours]["status"] == "running" and by_id[elsewhere]["status"] == "running"


def test_reading_a_run_a_dead_server_left_running_says_interrupted(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run_id = left_running(runs, dead_pid())
    request = ProfileRequest(source=HANGS, language="torch", configs={"n": [1]})
    write_request(runs / run_id, request)
    (runs / run_id / "user_source.py").write_text(HANGS)
    run = load_run(run_id, runs_root=runs)
    assert run.status == "interrupted" and "ended while it ran" in run.warnings[0]


# --- the record itself ---------------------------------------------------------------------------


def test_no_late_write_overwrites_an_interrupted_run(tmp_path: Path) -> None:
    run_id, run_dir = new_run_dir(tmp_path)
    with pytest.raises(ValueError), run_record(run_dir, run_id) as record:
        record.stage("pre-flight")
        assert run_status.interrupt_open_runs("the server's shutdown (SIGTERM)") == [run_id]
        record.stage("ncu")  # a worker thread still unwinding
        raise ValueError("the harness died (exit status -9): os._exit() in your source?")
    status = run_status.read_status(run_dir)
    assert status is not None and status["status"] == "interrupted", status
    assert status["stage"] == "pre-flight" and "os._exit" not in status["message"]
    assert run_status.interrupt_open_runs("again") == []  # it left the open runs


def test_a_failure_while_the_process_ends_is_an_interruption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, run_dir = new_run_dir(tmp_path)
    monkeypatch.setattr(children, "_ending", ["the client's exit (stdin closed)"])
    RunRecord(run_dir, run_id).failed(RuntimeError("the worker died during the job (signal 9)"))
    status = run_status.read_status(run_dir)
    assert status is not None and status["status"] == "interrupted", status
    assert status["ended_by"] == "the client's exit (stdin closed)"


def test_a_cancelled_run_says_who_cancelled_it(tmp_path: Path) -> None:
    run_id, run_dir = new_run_dir(tmp_path)
    RunRecord(run_dir, run_id).failed(RunCancelledError("The run was cancelled."))
    status = run_status.read_status(run_dir)
    assert status is not None and status["status"] == "cancelled"
    assert status["ended_by"].startswith("the caller")


def test_a_child_that_dies_while_the_process_ends_raises_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(children, "_ending", ["the server's shutdown (SIGTERM)"])
    with pytest.raises(RunInterruptedError, match=r"interrupted by the server's shutdown"):
        process.run_to_file(
            [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
            output_path=tmp_path / "out.log",
            timeout=60,
        )
