"""How the server ends, on stdio and over HTTP: who ends it is said first, its open runs are
marked ``interrupted`` by that, then its children are killed, so no run is left ``running``
and none is blamed on its source.

Then every child is reaped, so none outlives the server, not even as a zombie. The server is
its descendants' subreaper (Linux): a process whose parent died (the program ncu ran, when ncu
is killed with its group) comes back to the server instead of init. While it serves, such
adopted zombies are reaped every few seconds; only those, never a direct child, whose exit
status its own ``Popen`` waits for.

Who ends it: "the client's exit (stdin closed)" (stdio: said when stdin ends, before the SDK
cancels the calls in flight), or "the server's shutdown (SIGTERM)" (SIGINT, SIGHUP; over
HTTP uvicorn's own handler, which then shuts down gracefully).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import anyio

from nsight_agent.engine import children  # the server's own children (start-up, shutdown)
from nsight_agent.service.session import end_open_runs

CLIENT_EXIT = "the client's exit (stdin closed)"
PR_SET_CHILD_SUBREAPER = 36
ADOPTED_EVERY_S = 5.0  # how often adopted zombies are reaped while the server runs
# The most the end waits for killed children to die (SIGKILL: milliseconds), within the 2 s an
# MCP SDK client gives a server between its SIGTERM and its SIGKILL.
END_GRACE_S = 1.5


def adopt_orphans() -> bool:
    """Make this process its descendants' subreaper and reap adopted zombies in the background;
    return whether the kernel took it (Linux only; elsewhere orphans go to init as before)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    if prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return False
    threading.Thread(target=_reap_adopted_forever, name="reap-adopted", daemon=True).start()
    return True


def child_states() -> dict[int, tuple[str, int]]:
    """This process's children: pid -> (state, process group), read from /proc."""
    me, found = os.getpid(), {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == me:
            found[int(entry.name)] = (fields[0], int(fields[2]))
    return found


def reap_adopted() -> list[int]:
    """Reap the zombies this process adopted. A direct child is its own group's leader (every
    child starts a session) or in ours (a build); an adopted one is a member of a dead child's
    group, which no ``Popen`` of ours waits for."""
    ours, reaped = os.getpgrp(), []
    for pid, (state, group) in child_states().items():
        if state == "Z" and group not in (pid, ours):
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    reaped.append(pid)
    return reaped


def _reap_adopted_forever() -> None:
    while children.ending() is None:
        time.sleep(ADOPTED_EVERY_S)
        with contextlib.suppress(OSError):
            reap_adopted()


def end_children() -> list[int]:
    """Kill every child (``children.kill_all``) and reap them all, the adopted ones too, before
    the process exits; return the pids reaped. It waits until every process the kill ends is
    gone (reaped by us, or by its own parent), at most ``END_GRACE_S``; a child the kill does
    not reach (one that carries no marker) is reaped if it ended, never waited for."""
    ending = _killed_by_kill_all()
    children.kill_all()
    reaped: list[int] = []
    deadline = time.monotonic() + END_GRACE_S
    while True:
        reaped += _reap_ended()
        left = [pid for pid in ending if Path(f"/proc/{pid}").exists()]
        if not left or time.monotonic() > deadline:
            return reaped + _reap_ended()
        time.sleep(0.02)


def _killed_by_kill_all() -> set[int]:
    """What ``children.kill_all`` ends: every process carrying our marker, and every child that
    leads its own session (as this package starts each one), in case one is already dying and
    no longer shows its marker. Read before the kill: a dying process's marker cannot be read."""
    leaders = {
        pid for pid, (state, group) in child_states().items() if group == pid and state != "Z"
    }
    return set(children.marked_processes(children.owner_prefix())) | leaders


def _reap_ended() -> list[int]:
    """Reap every child that has ended, without waiting for one that has not."""
    reaped: list[int] = []
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no child left
            return reaped
        if pid == 0:
            return reaped
        reaped.append(pid)


def _end(who: str) -> None:
    """The server's end, once who ends it is said: its open runs marked interrupted by that,
    then its children killed and reaped."""
    end_open_runs(who)
    end_children()


class _StdinWatch:
    """The stdio transport's read stream, saying the client's exit as soon as it ends."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    @property
    def last_context(self) -> Any:  # the SDK reads the sender's context from here
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            children.begin_ending(CLIENT_EXIT)
            raise

    def __aiter__(self) -> _StdinWatch:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _StdinWatch:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


def run_stdio(server: Any) -> None:
    """``server.run()`` on stdio (an ``MCPServer``), with stdin watched; every child dies
    with the server and is reaped, after its open runs are marked interrupted."""
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        low = server._lowlevel_server
        async with stdio_server() as (read_stream, write_stream):
            watched: Any = _StdinWatch(read_stream)
            await low.run(watched, write_stream, low.create_initialization_options())

    # Leaving the block after stdin ended keeps "the client's exit" (said first, above); a
    # server that fails instead says only that it ended.
    adopt_orphans()
    with children.die_with_us(_end, leaving="the server's end"):
        anyio.run(main)


def run_http(app: Any, host: str, port: int) -> None:
    """uvicorn on ``app``; its signal handler first ends the runs and the children."""
    adopt_orphans()
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            who = children.begin_ending(f"the server's shutdown ({signal.Signals(sig).name})")
            _end(who)
            super().handle_exit(sig, frame)

    Server(uvicorn.Config(app, host=host, port=port, log_level="info")).run()
