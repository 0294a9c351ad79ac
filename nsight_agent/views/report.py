"""Any report, per kernel (action): name, NVTX ranges, duration, speed of light, key
metrics, roofline and ncu's findings. Needs no GPU and no run of ours: the report comes read
(``judge/reading.py``), its values through diagnose's readers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from nsight_agent.diagnose import findings as fd
from nsight_agent.diagnose import metrics as dm
from nsight_agent.diagnose import roofline as rl
from nsight_agent.diagnose import throughput as tp
from nsight_agent.diagnose.bound import classify
from nsight_agent.judge.reading import ReadReport
from nsight_agent.numbers import sig
from nsight_agent.views.common import Page, clip, page

# Shown for every kernel of a report when present, under short labels: what a first look needs
# (duration and the two SOL throughputs have fields of their own).
KEY_METRICS: dict[str, str] = {
    "dram_pct": dm.DRAM_THROUGHPUT,
    "warps_active_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "regs_per_thread": "launch__registers_per_thread",
    "grid": "launch__grid_size",
    "block": "launch__block_size",
    "waves": dm.WAVES,
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "l1_hit_pct": "l1tex__t_sector_hit_rate.pct",
}


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
    bound_reason: str = Field(description="The comparison that decided, with its numbers")
    compute_pct: float | None = Field(default=None, description="SM throughput, % of peak")
    memory_pct: float | None = Field(default=None, description="Memory throughput, % of peak")
    dominant_precision: str | None = Field(
        default=None, description="The precision doing most FLOP/s (tensor_* = tensor cores)"
    )
    achieved_flop_per_s: float | None = None
    peak_flop_per_s: float | None = Field(
        default=None, description="Peak of the dominant precision"
    )
    dram_bytes_per_s: float | None = None
    dram_pct_of_peak: float | None = None
    arithmetic_intensity: float | None = Field(default=None, description="FLOP per DRAM byte")
    ridge_point: float | None = None
    pct_of_roofline: float | None = Field(
        default=None, description="Achieved FLOP/s as % of the attainable rate at this intensity"
    )
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
    metrics: dict[str, float | str | None] | None = Field(
        default=None,
        description="Key metrics by short label (dram_pct, grid, waves, ...), then any asked "
        "for by full name (None: not in the report)",
    )
    metrics_in_report: int = Field(description="How many metrics ncu stored for this kernel")
    roofline: RooflineBrief | None = None
    findings: list[FindingBrief] | None = None
    findings_total: int = 0


class KernelLine(BaseModel):
    """A kernel of the report not shown in full: enough to ask for it (offset)."""

    index: int
    kernel: str
    duration_ns: float | None = None
    share_pct: float | None = Field(default=None, description="% of the report's kernel time")


class ReportSummary(BaseModel):
    """Compact digest of an existing .ncu-rep (any tool, any NVTX domains, no GPU needed)."""

    report: str
    gpu: str | None = None
    kernels_total: int
    bound_rule: str = Field(description="How each kernel's bound is classified")
    page: Page = Field(description="Over the kernels by time, longest first")
    actions: list[ActionSummary] = Field(description="The longest kernels, in full")
    others: list[KernelLine] | None = Field(default=None, description="One line each")


def metric_value(action: Any, name: str) -> MetricValue | None:
    # metric_by_name: None where absent, and cheaper than building the set of a full report's names
    metric = action.metric_by_name(name)
    if metric is None:
        return None
    raw = metric.value()
    unit = str(metric.unit() or "") or None
    if isinstance(raw, str):
        return MetricValue(value=raw[:200], unit=unit)
    return MetricValue(value=sig(raw), unit=unit)


NOTE_CHARS = 240
"""Notes are kept whole up to this length, else cut at a sentence or word (``common.clip``)."""

BOUND_RULE = (
    "SM and memory throughput both < 60%: latency-bound; within 10 pts or both >= 80%: "
    "intensity vs ridge; else the larger (DIAGNOSIS.md)"
)


def roofline_brief(action: Any) -> RooflineBrief | None:
    """Roofline position and bound of one kernel; None when the report has nothing to place.

    The bound is the diagnosis' (``diagnose.bound``): the roofline decides close calls."""
    r = rl.roofline(action)
    if r.bound == "unknown" and r.achieved_flop_per_s is None and r.dram_bytes_per_s is None:
        return None
    b = classify(action)
    notes = list(r.notes)
    achieved = r.achieved_flop_per_s
    if not achieved and not r.flop_counts_complete:
        # Zero counted FLOP while some precision's counters are absent is not a measurement
        # of zero work: leave the rate out and say why (the notes name the missing counters).
        achieved = None
        if not notes:
            notes.append(
                "FLOP/s left out: the report lacks the floating-point counters of some "
                "precisions (sections_to_collect fills them)."
            )
    return RooflineBrief(
        bound=b.bound,
        bound_reason=b.why,
        compute_pct=sig(r.compute_throughput_pct),
        memory_pct=sig(r.memory_throughput_pct),
        dominant_precision=r.dominant_precision,
        achieved_flop_per_s=sig(achieved),
        peak_flop_per_s=sig(r.peak_flop_per_s),
        dram_bytes_per_s=sig(r.dram_bytes_per_s),
        dram_pct_of_peak=sig(r.dram_pct_of_peak),
        arithmetic_intensity=sig(r.arithmetic_intensity) if achieved is not None else None,
        ridge_point=sig(r.ridge_point),
        pct_of_roofline=sig(r.pct_of_roofline) if achieved is not None else None,
        tensor_pipe_pct=sig(r.tensor_pipe_pct),
        sections_to_collect=r.sections_to_collect or None,
        notes=[clip(n, NOTE_CHARS) for n in notes] or None,
    )


def finding_briefs(found: Sequence[fd.Finding], limit: int) -> list[FindingBrief]:
    out = []
    for f in found[: max(0, limit)]:
        message = clip(f.message, 120)
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
    index: int,
    action: Any,
    ranges: dict[str, list[str]],
    *,
    findings: int = 2,
    metrics: Sequence[str] = (),
) -> ActionSummary:
    values: dict[str, float | str | None] = {
        label: v.value for label, name in KEY_METRICS.items() if (v := metric_value(action, name))
    }
    for name in metrics:
        v = metric_value(action, name)
        values[name] = v.value if v is not None else None
    sol = tp.speed_of_light(action)
    found = fd.findings(action)
    return ActionSummary(
        index=index,
        kernel=str(action.name()),
        nvtx=ranges or None,
        duration_ns=sig(sol.duration_ns),
        sol_compute_pct=sig(sol.compute_throughput_pct),
        sol_memory_pct=sig(sol.memory_throughput_pct),
        metrics=values or None,
        metrics_in_report=len(list(action.metric_names())),
        roofline=roofline_brief(action),
        findings=finding_briefs(found, findings) or None,
        findings_total=len(found),
    )


def summarize_report(
    report: ReadReport,
    *,
    offset: int = 0,
    limit: int = 2,
    findings: int = 2,
    metrics: Sequence[str] = (),
    one_line: int = 12,
) -> ReportSummary:
    """Digest of any ``.ncu-rep``: kernels by duration, ``limit`` in full from ``offset``, up to
    ``one_line`` more in one line each, paged."""
    actions = report.actions
    durations = [tp.speed_of_light(a).duration_ns or 0.0 for a in actions]
    order = sorted(range(len(actions)), key=lambda i: (-durations[i], i))
    total = sum(durations)
    pg = page(
        len(actions),
        offset,
        limit,
        f"summarize_report(path={str(report.path)!r}, offset={{offset}}, limit={{limit}})",
    )
    shown = order[offset : offset + limit]
    rest = [i for i in order if i not in shown][:one_line]
    others = [
        KernelLine(
            index=i,
            kernel=str(actions[i].name())[:80],
            duration_ns=sig(durations[i]),
            share_pct=sig(100.0 * durations[i] / total, 3) if total > 0 else None,
        )
        for i in rest
    ]
    return ReportSummary(
        report=str(report.path),
        gpu=report.gpu,
        kernels_total=len(actions),
        bound_rule=BOUND_RULE,
        page=pg,
        actions=[
            summarize_action(i, actions[i], report.ranges[i], findings=findings, metrics=metrics)
            for i in shown
        ],
        others=others or None,
    )
