"""Tools and resources over earlier runs: more detail later, without profiling again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from mcp.server.mcpserver import Context, Image
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.types import CallToolResult
from pydantic import Field

from nsight_agent.errors import NsightAgentError
from nsight_agent.server.boundary import load, result, state, thread, tool_errors
from nsight_agent.service import baselines as baseline_store
from nsight_agent.service import runs as run_store
from nsight_agent.service import summaries
from nsight_agent.views import rows, runs, text
from nsight_agent.views.common import dump
from nsight_agent.views.run_diff import render_diff


async def get_run(
    ctx: Context,
    run_id: Annotated[str, Field(description="From an earlier profiling answer")],
    metrics: Annotated[list[str] | None, Field(description="Only these metrics")] = None,
    offset: Annotated[int, Field(ge=0)] = 0,
    limit: Annotated[int, Field(ge=1, le=500)] = 20,
    against: Annotated[
        str | None, Field(description="Baseline NAME or run_id to compare with")
    ] = None,
    baseline: Annotated[
        str | None, Field(description="Then save as baseline NAME[@variant]")
    ] = None,
) -> CallToolResult:
    """A run again: another metric or page; or vs a baseline."""
    with tool_errors():
        root = state(ctx).runs_root
        if against is None and baseline is None:
            run = await load(ctx, run_id)
            s = summaries.profile_summary(run, metrics=metrics, offset=offset, limit=limit)
            return result(s, text.render_profile(s, runs.metric_labels(run)))
        d = await thread(lambda: baseline_store.diff(run_id, against, root)) if against else None
        named = None
        if baseline is not None:
            name, _, variant = baseline.partition("@")
            named = await thread(
                lambda: baseline_store.set_baseline(name, run_id, variant or None, root)
            )
        if d is not None:
            note = f"\nnow baseline {named.name} = this run" if named else ""
            return result(d, render_diff(d) + note)
        if named is None:  # unreachable: one of the two was given
            raise NsightAgentError("get_run: nothing to do", "Pass against= or baseline=.")
        line = f"baseline {named.name} = run {named.run_id} [{named.variant}]"
        return result(named, f"{line}, {named.method} on {named.gpu or '?'}")


async def get_run_rows(
    ctx: Context,
    run_id: str,
    table: Annotated[
        Literal["processed", "raw"],
        Field(description="processed: per variant/metric/config; raw: per run"),
    ] = "processed",
    metric: str | None = None,
    offset: Annotated[int, Field(ge=0)] = 0,
    limit: Annotated[int, Field(ge=1, le=1000)] = 50,
) -> Annotated[CallToolResult, rows.RowsPage]:
    """A run's nsight-python table rows (processed or raw), paged."""
    with tool_errors():
        run = await load(ctx, run_id)
        s = rows.rows_page(run, table, metric=metric, offset=offset, limit=limit)
        text = f"{len(s.rows)} of {s.page.total} {table} rows; columns {s.columns}"
        return result(s, text + (f"\n{s.page.truncated}" if s.page.truncated else ""))


async def plot_run(
    ctx: Context,
    run_id: str,
    metric: Annotated[str | None, Field(description="Metric to plot (default: the first)")] = None,
) -> Image:
    """PNG of one metric of a run over its configs, a line per variant."""
    with tool_errors():
        run = await load(ctx, run_id)
        png = await thread(lambda: run_store.plot_run(run, metric))
        return Image(data=png.read_bytes(), format="png")


async def run_artifact(run_id: str, artifact: str, ctx: Context) -> str | bytes:
    try:
        run = await load(ctx, run_id)
    except NsightAgentError as err:
        raise ResourceNotFoundError(str(err)) from err
    path = run_store.artifact_path(run, artifact)
    if path is None:
        names = ", ".join(sorted(run.artifacts))
        raise ResourceNotFoundError(f"Run {run_id} has no artifact {artifact!r}; it has {names}.")
    if path.suffix in {".json", ".csv", ".log", ".py", ".txt", ".md", ".cu", ".toml"}:
        return path.read_text(errors="replace")
    return path.read_bytes()


def baselines_json(runs_root: Path | None) -> str:
    """The baselines resource: name, run, variant, source hash, GPU, method, dates."""
    found = baseline_store.list_baselines(runs_root)
    return json.dumps([b.model_dump(exclude={"checks"}) for b in found])


async def history(key: str, ctx: Context) -> str:
    """The history resource: one kernel's runs against its baseline (or oldest run), JSON."""
    root = state(ctx).runs_root
    try:
        h = await thread(lambda: baseline_store.history(key, root))
    except NsightAgentError as err:
        raise ResourceNotFoundError(str(err)) from err
    return json.dumps(dump(h))
