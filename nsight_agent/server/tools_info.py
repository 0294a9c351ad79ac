"""Tools that read without profiling: reports, metric names, skills, the device."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from nsight_agent.catalog import metrics as metrics_catalog
from nsight_agent.catalog import search as metric_search
from nsight_agent.catalog import skills
from nsight_agent.catalog.metrics import MetricInfo
from nsight_agent.catalog.skills import SkillBundle
from nsight_agent.server.boundary import report_path, result, state, thread, tool_errors
from nsight_agent.service import session, summaries
from nsight_agent.service.session import DeviceInfo
from nsight_agent.views import device as device_views
from nsight_agent.views import report, text


class MetricSearch(BaseModel):
    """query_metrics' answer."""

    query: str
    catalog: str = Field(description="Which list answered: live ncu query or the bundled one")
    results: list[MetricInfo]
    note: str | None = None


class SkillBrief(BaseModel):
    name: str
    description: str
    metrics: int = Field(description="How many metrics the bundle collects")
    sections: list[str]
    replay_mode: str


class SkillList(BaseModel):
    """list_skills' answer; get_skill(name) returns one bundle with its SKILL.md workflow."""

    skills: list[SkillBrief]


async def summarize_report(
    ctx: Context,
    path: Annotated[str, Field(description="A .ncu-rep on the server's machine")],
    offset: Annotated[int, Field(ge=0, description="First kernel (action) shown")] = 0,
    limit: Annotated[int, Field(ge=1, le=50, description="Longest kernels shown in full")] = 2,
    findings: Annotated[int, Field(ge=0, le=50, description="ncu findings per kernel")] = 2,
    metrics: Annotated[
        list[str] | None, Field(description="Extra metric names to show when present")
    ] = None,
) -> Annotated[CallToolResult, report.ReportSummary]:
    """Digest of any .ncu-rep (no GPU needed): per kernel NVTX ranges, duration, speed of
    light, roofline, bound, ncu's findings."""
    with tool_errors():
        where = report_path(ctx, path)
        s = await thread(
            lambda: summaries.report_summary(
                where, offset=offset, limit=limit, findings=findings, metrics=metrics or ()
            )
        )
        return result(s, text.render_report(s))


async def query_metrics(
    query: Annotated[str, Field(description="Words or a metric name, e.g. 'dram bytes'")],
    limit: Annotated[int, Field(ge=1, le=100)] = 10,
) -> Annotated[CallToolResult, MetricSearch]:
    """Search ncu metric names and descriptions (this GPU, or the bundled H100/H200 list)."""
    with tool_errors():
        found = await thread(lambda: metric_search.search_metrics(query, limit))
        source = metrics_catalog.catalog_source()
        s = MetricSearch(
            query=query,
            catalog=source.label,
            results=found,
            note=source.note or None,
        )
        lines = [f"{m.example}  ({m.type}, {m.unit or '-'}): {m.description}" for m in found]
        if not found:
            close = await thread(lambda: metric_search.close_names(query))
            lines = [
                f"No metric matches {query!r}." + (f" Close: {', '.join(close)}" if close else "")
            ]
        return result(s, "\n".join(lines))


async def list_skills() -> Annotated[CallToolResult, SkillList]:
    """Curated metric bundles (memory, compute, occupancy, roofline, ...)."""
    with tool_errors():
        bundles = await thread(skills.list_skills)
        s = SkillList(
            skills=[
                SkillBrief(
                    name=b.name,
                    description=b.description,
                    metrics=len(b.metrics),
                    sections=b.sections,
                    replay_mode=b.replay_mode,
                )
                for b in bundles
            ]
        )
        return result(s, "\n".join(f"{b.name}: {b.description}" for b in s.skills))


async def get_skill(
    name: Annotated[str, Field(description="A name from list_skills")],
) -> Annotated[CallToolResult, SkillBundle]:
    """One bundle: its metrics, sections and SKILL.md workflow."""
    with tool_errors():
        b = await thread(lambda: skills.get_skill(name))
        return result(b, b.skill_md)


async def device_info(
    ctx: Context,
    probe_counters: Annotated[
        bool,
        Field(description="Profile one tiny kernel to confirm counter access (slow)"),
    ] = False,
) -> Annotated[CallToolResult, DeviceInfo]:
    """Can this machine profile? GPU, driver, ncu, counter permission, SMs, clocks, peaks."""
    with tool_errors():
        executor, root = state(ctx).session.executor, state(ctx).runs_root
        info = await thread(lambda: session.device_info(probe_counters, executor, root))
        return result(info, device_views.render_device(info))
