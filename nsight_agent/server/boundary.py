"""The one boundary between the tools and the library: errors, results, threads, progress.

Our own errors and malformed requests become ``ToolError`` (message and hint reach the
model); mcp 2.x would turn any other exception into a bare "Error executing tool NAME".
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, ValidationError

from nsight_agent.arguments import arguments_text, validation_text
from nsight_agent.errors import InvalidRequestError, NsightAgentError
from nsight_agent.server import http
from nsight_agent.service import runs as run_store
from nsight_agent.service import session as sessions
from nsight_agent.service.measure import Measuring, RunResult
from nsight_agent.stages import VALIDATION
from nsight_agent.views.common import dump

T = TypeVar("T")


class CheckedTool(Tool):
    """The SDK's tool, with malformed arguments answered in our words (``arguments_text``:
    the argument meant, what a value must be, and the arguments the tool takes) instead of
    pydantic's error text, which the SDK would pass on as it is."""

    async def run(
        self, arguments: dict[str, Any], context: Any, convert_result: bool = False
    ) -> Any:
        try:
            return await super().run(arguments, context, convert_result)
        except ToolError as err:
            cause = err.__cause__
            if isinstance(err, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            model = self.fn_metadata.arg_model
            text = arguments_text(cause, self.name, model, arguments)
            # from the ValidationError still: the SDK then logs the fields' names alone
            raise ToolError(f"Error executing tool {self.name}: {text}") from cause


@dataclass(frozen=True)
class ServerState:
    """What every tool shares, handed out through the SDK's lifespan context: the serving
    session (runs folder, executor, warm workers) and, over HTTP, the folders reports may be
    read from (None: any path, as on stdio)."""

    session: sessions.Session
    report_folders: tuple[Path, ...] | None = None

    @property
    def runs_root(self) -> Path | None:
        return self.session.runs_root


def lifespan_for(
    runs_root: Path | None,
    executor: sessions.ExecutorKind = "local",
    ray_address: str | None = None,
    report_folders: tuple[Path, ...] | None = None,
) -> Callable[[MCPServer[ServerState]], contextlib.AbstractAsyncContextManager[ServerState]]:
    @contextlib.asynccontextmanager
    async def lifespan(server: MCPServer[ServerState]) -> AsyncIterator[ServerState]:
        await anyio.to_thread.run_sync(sessions.mark_abandoned_runs, runs_root)
        wait_s = sessions.warm_wait_s()  # a bad value stops the start, saying what to set
        session = sessions.open_session(runs_root, executor, ray_address)
        warming = session.warm_up()
        if warming is not None and wait_s > 0:
            await _wait_warm(session, warming, wait_s)
        try:
            yield ServerState(session=session, report_folders=report_folders)
        finally:
            await anyio.to_thread.run_sync(session.close, warming)

    return lifespan


async def _wait_warm(session: sessions.Session, warming: threading.Thread, seconds: float) -> None:
    """Answer nothing until the warm-up is done (``NSIGHT_AGENT_WARM_WAIT_S``), so that the
    first profile finds its worker and a pre-launched target ready; said on stderr."""
    log = logging.getLogger("nsight_agent")
    log.info("warming up (a warm worker, pre-launched ncu targets); up to %g s", seconds)
    start = time.monotonic()
    ready = await anyio.to_thread.run_sync(session.wait_warm, warming, seconds)
    said = "ready" if ready else "not all ready; the first calls may go cold and say why"
    took = time.monotonic() - start  # the wait alone, not the phrase below
    slots = await anyio.to_thread.run_sync(session.slots_said)
    log.info("warm-up: %s after %.1f s%s", said, took, f" ({slots})" if slots else "")


def report_path(ctx: Context, path: str) -> Path:
    """A report path the client may read: anywhere on stdio; over HTTP only under the runs
    folder and the folders allowed at start (the answer never says whether a path exists)."""
    if not path.strip():
        raise InvalidRequestError(
            "The report path is empty.", "Give the path of a .ncu-rep file, or a run_id."
        )
    folders = state(ctx).report_folders
    if folders is not None and not http.allowed(Path(path), folders):
        raise InvalidRequestError(
            "Over HTTP this server reads reports only from its runs folder and the folders "
            "given with --allow-dir.",
            "Profile through the server (its runs are readable by run_id), or restart it with "
            "--allow-dir FOLDER.",
        )
    return Path(path)


def state(ctx: Context) -> ServerState:
    return cast(ServerState, ctx.request_context.lifespan_context)


@contextlib.contextmanager
def tool_errors(stage: str | None = None) -> Iterator[None]:
    """Our errors and malformed requests -> ToolError with message and hint; anything else
    is logged with its traceback on stderr and answered as "internal error while <stage>"
    (never the SDK's bare "Error executing tool NAME")."""
    try:
        yield
    except ToolError:
        raise
    except NsightAgentError as err:
        raise ToolError(str(err)) from err
    except ValidationError as err:
        raise ToolError(validation_text(err)) from err
    except Exception as err:
        where = stage or _failing_stage(err)
        run_id = getattr(err, "run_id", None)
        run = f" (run {run_id})" if run_id else ""
        logging.getLogger("nsight_agent").error(
            "internal error while %s%s", where, run, exc_info=err
        )
        raise ToolError(
            f"internal error while {where}: {type(err).__name__}: {err}{run}\n"
            "Hint: this is a bug in nsight-agent, not in your request; the server's log "
            "(stderr) has the traceback. Other tools and calls keep working."
        ) from err


def _failing_stage(err: BaseException) -> str:
    """The innermost function of this package the error passed through: its module names
    the pipeline stage (engine.extract, views.report, ...)."""
    found = "the tool call"
    for frame in traceback.extract_tb(err.__traceback__):
        parts = Path(frame.filename).with_suffix("").parts
        if "nsight_agent" in parts and not frame.name.startswith("<"):  # no <lambda>
            inner = parts[len(parts) - parts[::-1].index("nsight_agent") :]
            found = f"{frame.name} in {'.'.join(inner)}"
    return found


def result(model: BaseModel, text: str) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=dump(model)
    )


async def thread(fn: Callable[[], T]) -> T:
    return await anyio.to_thread.run_sync(fn)


async def load(ctx: Context, run_id: str) -> RunResult:
    return await thread(lambda: run_store.load_run(run_id, runs_root=state(ctx).runs_root))


async def execute(ctx: Context, work: Callable[[Measuring], T]) -> T:
    """Blocking measuring ``work`` in a worker thread, with progress and cancellation.

    ``work`` gets where to measure: the session's executor and workers, with this call's
    progress hook and cancel event; a cancelled call sets the event, which kills ncu's process
    group on the pipeline's next poll, and waits (shielded) for that before it unwinds.
    """
    cancel = threading.Event()
    finished = threading.Event()
    # The executor may report from its own threads, not anyio's: name the loop to report to.
    loop = anyio.lowlevel.current_token()

    shown = [0]  # MCP's progress value may not go back: a later stage says 0 calls done

    def on_progress(done: int, total: int, message: str) -> None:
        of = total or None  # 0: not known in advance (the timing path's adaptive runs)
        shown[0] = max(shown[0], done)
        with contextlib.suppress(Exception):  # a closed session must not stop the run
            anyio.from_thread.run(ctx.report_progress, shown[0], of, message, token=loop)

    where = state(ctx).session.measuring(on_progress, cancel)

    def run() -> T:
        try:
            return work(where)
        finally:
            finished.set()

    await ctx.report_progress(0, None, VALIDATION)
    try:
        return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        cancel.set()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(finished.wait, 30.0)
        raise
