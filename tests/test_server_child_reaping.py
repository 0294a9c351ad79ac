"""A stdio server that its client closes mid-run leaves no process behind: every child it
started (the warm worker running the harness, ncu and the program ncu runs) is killed and
reaped before it exits, so none is left as a zombie for init to collect.

The test process makes itself the child subreaper while a server runs (Linux), so whatever the
server leaves at its exit comes to this process, as it would to init, where /proc shows it.
The long-running child is the kernel source itself, hanging in its entry after writing a flag
file; "ncu" is a stand-in that runs the harness as ncu would (tests/test_records_shutdown.py).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from nsight_agent.engine import children
from nsight_agent.server.shutdown import PR_SET_CHILD_SUBREAPER, child_states
from tests.test_records_shutdown import (
    HANGS,
    IN_PREFLIGHT,
    UNDER_NCU,
    server_env,
    stdio_server_in_a_run,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def set_subreaper(on: bool) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0, ctypes.get_errno()


@contextmanager
def left_behind() -> Iterator[dict[int, tuple[str, int]]]:
    """This process as the subreaper for the block; yields, filled at the end, the processes
    that came to it (pid -> (state, group)) beside the children it had before. They are then
    killed and reaped, so a failure leaves nothing either."""
    before = set(child_states())
    found: dict[int, tuple[str, int]] = {}
    set_subreaper(True)
    try:
        yield found
        time.sleep(0.5)  # a SIGKILLed process dies in milliseconds
        found.update({p: s for p, s in child_states().items() if p not in before})
    finally:
        set_subreaper(False)
        for pid in set(child_states()) - before:
            with suppress(ProcessLookupError, ChildProcessError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)


def server_pid(before: set[int]) -> int:
    (pid,) = [p for p in child_states() if p not in before]
    return pid


CASES = [
    pytest.param(False, IN_PREFLIGHT, id="harness on the warm worker (timing, no ncu)"),
    pytest.param(True, UNDER_NCU, id="harness under ncu"),
]


@pytest.mark.parametrize(("ncu", "when"), CASES)
def test_stdin_closed_mid_run_leaves_no_zombie(tmp_path: Path, ncu: bool, when: str) -> None:
    with left_behind() as leftovers:
        proc = stdio_server_in_a_run(tmp_path, ncu, when)
        try:
            assert children.marked_processes(f"{proc.pid}-"), "the run started no child"
            assert proc.stdin is not None
            proc.stdin.close()
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert not leftovers, f"left by the server (pid -> (state, group)): {leftovers}"
    assert not children.marked_processes(f"{proc.pid}-")


@pytest.mark.anyio
@pytest.mark.parametrize(("ncu", "when"), CASES)
async def test_an_sdk_client_leaving_mid_run_leaves_no_zombie(
    tmp_path: Path, ncu: bool, when: str
) -> None:
    """The SDK's client cancels the call, closes stdin, then SIGTERMs after its grace."""
    flag = tmp_path / "sleeping"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nsight_agent", "serve"],
        env=server_env(tmp_path, ncu),
        cwd=str(tmp_path),
    )
    args = {"source": HANGS.format(when=when, flag=str(flag)), "configs": [{"n": 8}],
            "language": "torch", **({} if ncu else {"method": "timing"})}  # fmt: skip
    before = set(child_states())
    with left_behind() as leftovers:
        async with (
            Client(params, read_timeout_seconds=120) as client,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(client.call_tool, "profile_kernel", args)
            with anyio.fail_after(120):
                while not flag.exists():
                    await anyio.sleep(0.1)
            pid = server_pid(before)
            assert children.marked_processes(f"{pid}-"), "the run started no child"
            tg.cancel_scope.cancel()
    assert not leftovers, f"left by the server {pid} (pid -> (state, group)): {leftovers}"
    assert not children.marked_processes(f"{pid}-")


# A subreaper whose child (in a session of its own) started a grandchild; the child is killed
# with its group and waited for by its Popen, so the grandchild is adopted as a zombie. A second
# child is left a zombie unwaited: its Popen must still get its exit status.
ADOPTING = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    from nsight_agent.server import shutdown
    assert shutdown.adopt_orphans()
    parent = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    direct = subprocess.Popen(["sh", "-c", "exit 7"], start_new_session=True)
    time.sleep(0.5)
    os.killpg(parent.pid, signal.SIGKILL)
    parent.wait()
    time.sleep(0.5)
    adopted = [p for p, (state, _) in shutdown.child_states().items() if p != direct.pid]
    reaped = shutdown.reap_adopted()
    print(len(adopted), reaped == adopted, direct.wait(), sorted(shutdown.child_states()))
    """
)


def test_the_server_reaps_what_it_adopts_and_leaves_its_own_children_to_their_popen() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", ADOPTING], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    # one adopted grandchild, reaped; the direct child's status (7) kept for its Popen
    assert out.stdout.split() == ["1", "True", "7", "[]"], out.stdout
