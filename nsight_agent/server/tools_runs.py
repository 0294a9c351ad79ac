"""Tools and resources over earlier runs: more detail later, without profiling again."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import Context, Image
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.types import CallToolResult
from pydantic import Field

from nsight_agent import service
from nsight_agent.errors import NsightAgentError
from nsight_agent.server.boundary import load, result, thread, tool_errors
from nsight_agent.views import runs, text


async def get_run(
    ctx: Context,
    run_id: Annotated[str, Field(description="From an earlier profiling answer")],
    metrics: Annotated[
        list[str] | None, Field(description="Only these metrics (default: all)")
    ] = None,
    offset: Annotated[int, Field(ge=0)] = 0,
    limit: Annotated[int, Field(ge=1, le=500)] = 20,
) -> CallToolResult:
    """A run's statistics again: another metric, more pages (profile_kernel's shape)."""
    with tool_errors():
        run = await load(ctx, run_id)
        s = runs.profile_summary(run, metrics=metrics, offset=offset, limit=limit)
        return result(s, text.render_profile(s))


async def get_run_rows(
    ctx: Context,
    run_id: Annotated[str, Field(description="From an earlier profiling answer")],
    table: Annotated[
        Literal["processed", "raw"],
        Field(description="processed: per variant/metric/config; raw: per run"),
    ] = "processed",
    metric: Annotated[str | None, Field(description="Only this metric")] = None,
    offset: Annotated[int, Field(ge=0)] = 0,
    limit: Annotated[int, Field(ge=1, le=1000)] = 50,
) -> Annotated[CallToolResult, runs.RowsPage]:
    """Rows of a run's nsight-python tables (processed or raw), paged."""
    with tool_errors():
        run = await load(ctx, run_id)
        s = runs.rows_page(run, table, metric=metric, offset=offset, limit=limit)
        text = f"{len(s.rows)} of {s.page.total} {table} rows; columns {s.columns}"
        return result(s, text + (f"\n{s.page.truncated}" if s.page.truncated else ""))


async def plot_run(
    ctx: Context,
    run_id: Annotated[str, Field(description="From an earlier profiling answer")],
    metric: Annotated[str | None, Field(description="Metric to plot (default: the first)")] = None,
) -> Image:
    """A PNG of one metric of a run over its configs, a line per variant."""
    with tool_errors():
        run = await load(ctx, run_id)
        png = await thread(lambda: service.plot_run(run, metric))
        return Image(data=png.read_bytes(), format="png")


async def run_artifact(run_id: str, artifact: str, ctx: Context) -> str | bytes:
    try:
        run = await load(ctx, run_id)
    except NsightAgentError as err:
        raise ResourceNotFoundError(str(err)) from err
    path = service.artifact_path(run, artifact)
    if path is None:
        names = ", ".join(sorted(run.artifacts))
        raise ResourceNotFoundError(f"Run {run_id} has no artifact {artifact!r}; it has {names}.")
    if path.suffix in {".json", ".csv", ".log", ".py", ".txt", ".md", ".cu", ".toml"}:
        return path.read_text(errors="replace")
    return path.read_bytes()
