"""Any report, per kernel (action): name, NVTX ranges, duration, speed of light, key
metrics, roofline and ncu's findings. Needs no GPU and no run of ours."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from nsight_agent.diagnose import findings as fd
from nsight_agent.diagnose import metrics as dm
from nsight_agent.diagnose import roofline as rl
from nsight_agent.diagnose import throughput as tp
from nsight_agent.engine import extract as extraction
from nsight_agent.views.common import Page, page, sig

# Shown for every kernel of a report when present: what a first look needs.
KEY_METRICS: tuple[str, ...] = (
    dm.DURATION,
    dm.SM_THROUGHPUT,
    dm.MEM_THROUGHPUT,
    dm.DRAM_THROUGHPUT,
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "launch__grid_size",
    "launch__block_size",
    dm.WAVES,
    "lts__t_sector_hit_rate.pct",
    "l1tex__t_sector_hit_rate.pct",
)


class MetricValue(BaseModel):
    value: float | str | None = None
    unit: str | None = None


class FindingBrief(BaseModel):
    """One ncu guided-analysis result, shortened."""

    rule: str
    title: str
    type: str
    speedup_pct: float | None = Field(
        default=None, description="ncu's estimated gain if fixed, in %"
    )
    speedup_type: str | None = Field(
        default=None, description="global: whole-kernel time; local: the one unit in isolation"
    )
    message: str


class RooflineBrief(BaseModel):
    """Where a kernel sits on this GPU's roofline (from ncu's peak metrics in the report)."""

    bound: str = Field(description="memory-bound, compute-bound, latency-bound or unknown")
    bound_reason: str
    compute_pct: float | None = Field(default=None, description="SM throughput, % of peak")
    memory_pct: float | None = Field(default=None, description="Memory throughput, % of peak")
    flops_by_precision: dict[str, float] | None = Field(
        default=None,
        description="Achieved FLOP/s per precision with work (tensor_* = tensor cores)",
    )
    peak_flops_by_precision: dict[str, float] | None = Field(
        default=None, description="This GPU's peak FLOP/s for those precisions (ncu peak metrics)"
    )
    achieved_flop_per_s: float | None = None
    dominant_precision: str | None = None
    peak_flop_per_s: float | None = Field(
        default=None, description="Peak of the dominant precision"
    )
    dram_bytes: float | None = None
    dram_bytes_per_s: float | None = None
    peak_dram_bytes_per_s: float | None = None
    dram_pct_of_peak: float | None = None
    arithmetic_intensity: float | None = Field(default=None, description="FLOP per DRAM byte")
    ridge_point: float | None = None
    pct_of_roofline: float | None = Field(
        default=None, description="Achieved FLOP/s as % of the attainable rate at this intensity"
    )
    roofline_side: str | None = None
    tensor_pipe_pct: float | None = None
    sections_to_collect: list[str] | None = Field(
        default=None, description="ncu sections that would fill the missing values"
    )
    notes: list[str] | None = None


class ActionSummary(BaseModel):
    """One profiled kernel (ncu action) of a report."""

    index: int
    kernel: str
    nvtx: dict[str, list[str]] | None = Field(
        default=None, description="NVTX domain -> ranges open at launch (any domain)"
    )
    duration_ns: float | None = None
    sol_compute_pct: float | None = None
    sol_memory_pct: float | None = None
    metrics: dict[str, MetricValue] | None = Field(
        default=None, description="Key metrics present in the report (value, unit)"
    )
    metrics_in_report: int = Field(description="How many metrics ncu stored for this kernel")
    roofline: RooflineBrief | None = None
    findings: list[FindingBrief] | None = None
    findings_total: int = 0


class ReportSummary(BaseModel):
    """Compact digest of an existing .ncu-rep (any tool, any NVTX domains, no GPU needed)."""

    report: str
    gpu: str | None = None
    kernels_total: int
    bound_rule: str = Field(description="How each kernel's bound is classified")
    page: Page
    actions: list[ActionSummary]


def metric_value(action: Any, name: str) -> MetricValue | None:
    if name not in set(action.metric_names()):
        return None
    metric = action[name]
    raw = metric.value()
    unit = str(metric.unit() or "") or None
    if isinstance(raw, str):
        return MetricValue(value=raw[:200], unit=unit)
    return MetricValue(value=sig(raw), unit=unit)


def thresholds_text(t: rl.BoundThresholds) -> str:
    return (
        f"latency-bound if compute and memory throughput are both < "
        f"{t.latency_bound_below_pct:g}% of peak; otherwise the larger names the bound "
        f"(balanced within {t.balanced_within_pct:g} points, saturated > "
        f"{t.saturated_above_pct:g}%)"
    )


def roofline_brief(r: rl.Roofline) -> RooflineBrief | None:
    """The compact form of ``rl.roofline``; None when the report has nothing to place."""
    if r.bound == "unknown" and r.achieved_flop_per_s is None and r.dram_bytes_per_s is None:
        return None
    achieved: dict[str, float] = {
        p.precision: v
        for p in r.precisions
        if (v := sig(p.achieved_flop_per_s)) is not None and v > 0
    }
    peaks: dict[str, float] = {
        p.precision: v
        for p in r.precisions
        if p.precision in achieved and (v := sig(p.peak_flop_per_s)) is not None
    }
    return RooflineBrief(
        bound=r.bound,
        bound_reason=r.bound_reason,
        compute_pct=sig(r.compute_throughput_pct),
        memory_pct=sig(r.memory_throughput_pct),
        flops_by_precision=achieved or None,
        peak_flops_by_precision=peaks or None,
        achieved_flop_per_s=sig(r.achieved_flop_per_s),
        dominant_precision=r.dominant_precision,
        peak_flop_per_s=sig(r.peak_flop_per_s),
        dram_bytes=sig(r.dram_bytes),
        dram_bytes_per_s=sig(r.dram_bytes_per_s),
        peak_dram_bytes_per_s=sig(r.peak_dram_bytes_per_s),
        dram_pct_of_peak=sig(r.dram_pct_of_peak),
        arithmetic_intensity=sig(r.arithmetic_intensity),
        ridge_point=sig(r.ridge_point),
        pct_of_roofline=sig(r.pct_of_roofline),
        roofline_side=r.roofline_side,
        tensor_pipe_pct=sig(r.tensor_pipe_pct),
        sections_to_collect=r.sections_to_collect or None,
        notes=r.notes or None,
    )


def finding_briefs(found: Sequence[fd.Finding], limit: int) -> list[FindingBrief]:
    out = []
    for f in found[: max(0, limit)]:
        message = f.message if len(f.message) <= 400 else f.message[:397] + "..."
        out.append(
            FindingBrief(
                rule=f.rule_id,
                title=f.title,
                type=f.type,
                speedup_pct=sig(f.estimated_speedup_pct, 3),
                speedup_type=f.speedup_type,
                message=message,
            )
        )
    return out


def summarize_action(
    index: int, action: Any, *, findings: int = 3, metrics: Sequence[str] = ()
) -> ActionSummary:
    # Duration and the two SOL throughputs have their own fields.
    shown_apart = {dm.DURATION, dm.SM_THROUGHPUT, dm.MEM_THROUGHPUT}
    names = [m for m in KEY_METRICS if m not in shown_apart]
    names += [m for m in metrics if m not in names]
    values = {n: v for n in names if (v := metric_value(action, n)) is not None}
    missing = [m for m in metrics if m not in values]
    for m in missing:
        values[m] = MetricValue(value=None, unit="not in report")
    sol = tp.speed_of_light(action)
    found = fd.findings(action)
    return ActionSummary(
        index=index,
        kernel=str(action.name()),
        nvtx=extraction.nvtx_ranges(action) or None,
        duration_ns=sig(sol.duration_ns),
        sol_compute_pct=sig(sol.compute_throughput_pct),
        sol_memory_pct=sig(sol.memory_throughput_pct),
        metrics=values or None,
        metrics_in_report=len(list(action.metric_names())),
        roofline=roofline_brief(rl.roofline(action)),
        findings=finding_briefs(found, findings) or None,
        findings_total=len(found),
    )


def gpu_name(actions: Sequence[Any]) -> str | None:
    """The GPU the report was recorded on, from its first action."""
    if not actions:
        return None
    name = metric_value(actions[0], "device__attribute_display_name")
    return str(name.value) if name is not None and name.value is not None else None


def summarize_report(
    path: str | Path,
    *,
    offset: int = 0,
    limit: int = 10,
    findings: int = 3,
    metrics: Sequence[str] = (),
) -> ReportSummary:
    """Digest of any ``.ncu-rep``: one entry per profiled kernel, paged."""
    report = extraction.load(path)
    actions = extraction.iter_actions(report)
    pg = page(
        len(actions),
        offset,
        limit,
        f"summarize_report(path={str(path)!r}, offset={{offset}}, limit={{limit}})",
    )
    shown = [
        summarize_action(i, a, findings=findings, metrics=metrics)
        for i, a in enumerate(actions)
        if offset <= i < offset + limit
    ]
    gpu = gpu_name(actions)
    return ReportSummary(
        report=str(path),
        gpu=gpu,
        kernels_total=len(actions),
        bound_rule=thresholds_text(rl.BoundThresholds()),
        page=pg,
        actions=shown,
    )
