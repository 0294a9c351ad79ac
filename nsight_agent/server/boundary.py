"""The one boundary between the tools and the library: errors, results, threads, progress.

Our own errors and malformed requests become ``ToolError`` (message and hint reach the
model); mcp 2.x would turn any other exception into a bare "Error executing tool NAME".
"""

from __future__ import annotations

import contextlib
import logging
import threading
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, ValidationError

from nsight_agent import service
from nsight_agent.engine.executors.base import Executor
from nsight_agent.engine.executors.local import LocalExecutor
from nsight_agent.engine.pipeline import Progress, RunResult
from nsight_agent.engine.store import run_status
from nsight_agent.engine.store.runs import default_runs_root
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.errors import InvalidRequestError, NsightAgentError
from nsight_agent.request import ProfileRequest, validation_text
from nsight_agent.server import http
from nsight_agent.views.common import dump

T = TypeVar("T")


@dataclass(frozen=True)
class ServerState:
    """What every tool shares, handed out through the SDK's lifespan context: where runs
    live, where profiling jobs run (the executor), and the warm workers of the timing path."""

    runs_root: Path | None
    executor: Executor | None = None
    workers: WorkerPool | None = None
    # Over HTTP, the folders reports may be read from (None: any path, as on stdio).
    report_folders: tuple[Path, ...] | None = None


def lifespan_for(
    runs_root: Path | None,
    make_executor: Callable[[WorkerPool], Executor] | None = None,
    report_folders: tuple[Path, ...] | None = None,
) -> Callable[[MCPServer[ServerState]], contextlib.AbstractAsyncContextManager[ServerState]]:
    @contextlib.asynccontextmanager
    async def lifespan(server: MCPServer[ServerState]) -> AsyncIterator[ServerState]:
        await anyio.to_thread.run_sync(mark_abandoned_runs, runs_root)
        workers = WorkerPool()  # a worker starts on the first call that needs it, not here
        if make_executor is not None:
            executor = make_executor(workers)
        else:
            executor = LocalExecutor(workers=workers)
        try:
            yield ServerState(
                runs_root=runs_root,
                executor=executor,
                workers=workers,
                report_folders=report_folders,
            )
        finally:
            await anyio.to_thread.run_sync(workers.close)
            await anyio.to_thread.run_sync(executor.close)

    return lifespan


def mark_abandoned_runs(runs_root: Path | None) -> list[str]:
    """At start-up: runs left ``running`` by a server that ended (killed, crashed) become
    ``interrupted``, and the log says which."""
    found = run_status.mark_abandoned(runs_root or default_runs_root())
    if found:
        logging.getLogger("nsight_agent").warning(
            "%d run(s) left running by a server that has ended are now marked interrupted: %s",
            len(found),
            ", ".join(found[:20]),
        )
    return found


def report_path(ctx: Context, path: str) -> Path:
    """A report path the client may read: anywhere on stdio; over HTTP only under the runs
    folder and the folders allowed at start (the answer never says whether a path exists)."""
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
    return await thread(lambda: service.load_run(run_id, runs_root=state(ctx).runs_root))


async def execute(ctx: Context, work: Callable[[Progress, threading.Event], T]) -> T:
    """Blocking profiling ``work`` in a worker thread, with progress and cancellation.

    ``work`` gets a progress callback and a cancel event; a cancelled call sets the event,
    which kills ncu's process group on the pipeline's next poll, and waits (shielded) for
    that before it unwinds.
    """
    cancel = threading.Event()
    finished = threading.Event()
    # The executor may report from its own threads, not anyio's: name the loop to report to.
    loop = anyio.lowlevel.current_token()

    def on_progress(done: int, total: int, message: str) -> None:
        with contextlib.suppress(Exception):  # a closed session must not stop the run
            anyio.from_thread.run(ctx.report_progress, done, total, message, token=loop)

    def run() -> T:
        try:
            return work(on_progress, cancel)
        finally:
            finished.set()

    await ctx.report_progress(0, None, "pre-flight: running the harness once")
    try:
        return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        cancel.set()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(finished.wait, 30.0)
        raise


async def run_profile(request: ProfileRequest, ctx: Context, method: str = "ncu") -> RunResult:
    """One request through the service layer: under ncu on the server's executor, or, with
    ``method="timing"``, timed on a warm worker without counters."""
    st = state(ctx)
    if method == "timing":
        # Queued on the executor's GPUs (the local slots, or the Ray pool's hosts) like ncu jobs.
        pool = st.workers or WorkerPool()
        return await execute(
            ctx,
            lambda say, cancel: service.time_only(
                request, pool, runs_root=st.runs_root, cancel=cancel, executor=st.executor
            ),
        )
    return await execute(
        ctx,
        lambda say, cancel: service.profile(
            request, runs_root=st.runs_root, on_progress=say, cancel=cancel, executor=st.executor
        ),
    )
