"""How the server ends, on stdio and over HTTP: who ends it is said first, its open runs are
marked ``interrupted`` by that, then its children are killed, so no run is left ``running``
and none is blamed on its source.

Who ends it: "the client's exit (stdin closed)" (stdio: said when stdin ends, before the SDK
cancels the calls in flight), or "the server's shutdown (SIGTERM)" (SIGINT, SIGHUP; over
HTTP uvicorn's own handler, which then shuts down gracefully).
"""

from __future__ import annotations

import signal
from types import FrameType, TracebackType
from typing import Any

import anyio

from nsight_agent.engine import process  # the server's own children (start-up, shutdown)
from nsight_agent.service.session import end_open_runs

CLIENT_EXIT = "the client's exit (stdin closed)"


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
            process.begin_ending(CLIENT_EXIT)
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
    with the server, after its open runs are marked interrupted."""
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        low = server._lowlevel_server
        async with stdio_server() as (read_stream, write_stream):
            watched: Any = _StdinWatch(read_stream)
            await low.run(watched, write_stream, low.create_initialization_options())

    # Leaving the block after stdin ended keeps "the client's exit" (said first, above); a
    # server that fails instead says only that it ended.
    with process.children_die_with_us(end_open_runs, leaving="the server's end"):
        anyio.run(main)


def run_http(app: Any, host: str, port: int) -> None:
    """uvicorn on ``app``; its signal handler first ends the runs and the children."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            who = process.begin_ending(f"the server's shutdown ({signal.Signals(sig).name})")
            end_open_runs(who)
            process.kill_all()
            super().handle_exit(sig, frame)

    Server(uvicorn.Config(app, host=host, port=port, log_level="info")).run()
