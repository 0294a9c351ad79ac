"""Roofline position and bound of one profiled kernel.

Pure functions of one ``ncu_report`` action (``IAction``): nothing here runs ncu. Every
number comes from metrics in the report, using the formulas of ncu's own roofline sections
(``SpeedOfLight_RooflineChart`` and the hierarchical half/tensor charts):

* achieved FLOP/s = instructions (or tensor ops) per elapsed cycle x the unit's clock, with
  2 FLOP per FMA (4 per packed half-precision HFMA, 2 per HADD/HMUL as ncu counts them);
* peak FLOP/s = ncu's ``...sum.peak_sustained`` (per cycle) x the SM clock;
* peak DRAM bandwidth = ``dram__bytes.sum.peak_sustained`` (bytes/cycle) x the DRAM clock.

The bound classification follows ncu's SOLBottleneck rule: both compute (``sm__throughput``)
and memory (``gpu__compute_memory_throughput``) under 60% of peak means latency-bound;
otherwise the higher of the two names the bound. Metrics absent from the action give None
and are listed, with the sections that collect them, so a caller can ask for them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from nsight_agent.diagnose.metrics import (
    DRAM_BYTES,
    DRAM_BYTES_PER_S,
    DRAM_CLOCK,
    DRAM_PEAK_PER_CYCLE,
    DURATION,
    MEM_THROUGHPUT,
    SM_CLOCK,
    SM_THROUGHPUT,
    TENSOR_PIPE,
    WORK,
    ActionLike,
    Bound,
    Precision,
    Reader,
    Work,
    kernel_name,
    pct,
    sections_for,
)
from nsight_agent.diagnose.metrics import TENSOR_SECTION as _TENSOR


class BoundThresholds(BaseModel):
    """The cut-offs of the bound classification (ncu's SOLBottleneck rule uses the same)."""

    latency_bound_below_pct: float = Field(
        default=60.0,
        description="Compute and memory throughput both under this % of peak: latency-bound",
    )
    balanced_within_pct: float = Field(
        default=10.0,
        description="Compute and memory within this many points of each other: nearly balanced",
    )
    saturated_above_pct: float = Field(
        default=80.0, description="A unit above this % of peak is close to its limit"
    )
    tensor_active_pct: float = Field(
        default=1.0,
        description="Tensor pipe busier than this while tensor op counts are absent: FLOP totals "
        "miss tensor-core work",
    )


class PrecisionPoint(BaseModel):
    """Achieved and peak floating-point rate of one precision (one roof)."""

    precision: Precision
    tensor_core: bool
    achieved_flop_per_s: float | None
    peak_flop_per_s: float | None
    pct_of_peak: float | None
    achieved_from: list[str] = Field(description="Metrics summed for the achieved rate")
    peak_from: str | None = Field(description="The peak-per-cycle metric used")


class Roofline(BaseModel):
    """Where one kernel sits on this GPU's roofline, and what bounds it."""

    kernel: str
    duration_ns: float | None
    sm_frequency_hz: float | None = Field(description="sm__cycles_elapsed.avg.per_second")
    dram_frequency_hz: float | None = Field(description="dram__cycles_elapsed.avg.per_second")
    precisions: list[PrecisionPoint]
    achieved_flop_per_s: float | None = Field(
        description="Sum over the precisions that were measured"
    )
    flop_counts_complete: bool = Field(
        description="False when some precision's counters were not collected"
    )
    dominant_precision: Precision | None = Field(
        description="The precision doing most FLOP/s; its peak is the relevant roof"
    )
    peak_flop_per_s: float | None = Field(description="Peak of the dominant precision")
    dram_bytes: float | None
    dram_bytes_per_s: float | None
    peak_dram_bytes_per_s: float | None = Field(
        description="dram__bytes.sum.peak_sustained x DRAM clock"
    )
    dram_pct_of_peak: float | None
    arithmetic_intensity: float | None = Field(description="Achieved FLOP per DRAM byte")
    ridge_point: float | None = Field(
        description="FLOP per DRAM byte where the dominant roof meets the DRAM roof"
    )
    attainable_flop_per_s: float | None = Field(
        description="min(peak FLOP/s, intensity x peak DRAM bandwidth)"
    )
    pct_of_roofline: float | None = Field(
        description="Achieved FLOP/s as % of the attainable rate at this intensity"
    )
    roofline_side: Literal["memory", "compute"] | None = Field(
        description="Left (memory) or right (compute) of the ridge point"
    )
    compute_throughput_pct: float | None
    memory_throughput_pct: float | None
    tensor_pipe_pct: float | None = Field(
        description="sm__pipe_tensor_cycles_active, % of elapsed cycles"
    )
    bound: Bound
    bound_basis: Literal["speed_of_light", "roofline", "none"]
    bound_reason: str
    thresholds: BoundThresholds
    missing_metrics: list[str]
    sections_to_collect: list[str]
    notes: list[str]


def _point(r: Reader, work: Work) -> PrecisionPoint:
    clock = r.get(work.achieved_clock)
    counts = [(r.get(m), flop) for m, flop in work.achieved]
    achieved: float | None = None
    if clock is not None and all(c is not None for c, _ in counts):
        achieved = sum(float(c) * flop for c, flop in counts if c is not None) * clock
    peak: float | None = None
    peak_from: str | None = None
    for metric, flop in work.peaks:
        per_cycle = r.get(metric, required=False)
        if per_cycle is not None:
            peak_from = metric
            sm_clock = r.get(SM_CLOCK)
            peak = per_cycle * flop * sm_clock if sm_clock is not None else None
            break
    else:
        r.get(work.peaks[0][0])  # records the preferred peak metric as missing
    return PrecisionPoint(
        precision=work.precision,
        tensor_core=work.tensor_core,
        achieved_flop_per_s=achieved,
        peak_flop_per_s=peak,
        pct_of_peak=pct(achieved, peak),
        achieved_from=[m for m, _ in work.achieved],
        peak_from=peak_from,
    )


def _classify(
    compute: float | None,
    memory: float | None,
    basis: Literal["speed_of_light", "roofline"],
    t: BoundThresholds,
) -> tuple[Bound, str]:
    if compute is None or memory is None:
        return "unknown", ""
    what = (
        "SM throughput and compute-memory throughput"
        if basis == "speed_of_light"
        else "the dominant precision's share of peak FLOP/s and the DRAM share of peak bandwidth"
    )
    numbers = f"compute {compute:.1f}%, memory {memory:.1f}% of peak ({what})"
    if max(compute, memory) < t.latency_bound_below_pct:
        return "latency-bound", (
            f"{numbers}: both under {t.latency_bound_below_pct:.0f}%, so neither unit is busy; "
            "the kernel waits on latency (too little parallel work, long dependency chains, "
            "a small grid or launch overhead)."
        )
    bound: Bound = "compute-bound" if compute >= memory else "memory-bound"
    top = max(compute, memory)
    detail = []
    if abs(compute - memory) < t.balanced_within_pct:
        detail.append(
            f"the two are within {t.balanced_within_pct:.0f} points, so both need to shrink"
        )
    if top >= t.saturated_above_pct:
        detail.append(f"{top:.1f}% is near the unit's limit")
    extra = f" ({'; '.join(detail)})" if detail else ""
    side = "compute" if bound == "compute-bound" else "memory"
    return bound, f"{numbers}: {side} is the busier side{extra}."


def roofline(action: ActionLike, thresholds: BoundThresholds | None = None) -> Roofline:
    """Roofline position and bound of one kernel (see the module docstring for formulas)."""
    t = thresholds or BoundThresholds()
    r = Reader(action)
    duration_ns = r.get(DURATION)
    sm_clock = r.get(SM_CLOCK)
    dram_clock = r.get(DRAM_CLOCK)
    points = [_point(r, work) for work in WORK]

    dram_per_s = r.get(DRAM_BYTES_PER_S)
    dram_bytes = r.get(DRAM_BYTES, required=False)
    if dram_bytes is None and dram_per_s is not None and duration_ns is not None:
        dram_bytes = dram_per_s * duration_ns * 1e-9
    peak_per_cycle = r.get(DRAM_PEAK_PER_CYCLE)
    peak_bw = peak_per_cycle * dram_clock if peak_per_cycle is not None and dram_clock else None

    measured = [p for p in points if p.achieved_flop_per_s is not None]
    achieved = sum(p.achieved_flop_per_s or 0.0 for p in measured) if measured else None
    complete = len(measured) == len(points)
    busy = [p for p in measured if (p.achieved_flop_per_s or 0.0) > 0]
    dominant = max(busy, key=lambda p: p.achieved_flop_per_s or 0.0) if busy else None
    peak_flops = dominant.peak_flop_per_s if dominant else None

    # An intensity of zero FLOP per byte would read as "memory-bound"; say nothing instead.
    intensity = achieved / dram_per_s if dominant is not None and achieved and dram_per_s else None
    ridge = peak_flops / peak_bw if peak_flops and peak_bw else None
    attainable = (
        min(peak_flops, intensity * peak_bw)
        if peak_flops and peak_bw and intensity is not None
        else None
    )
    side: Literal["memory", "compute"] | None = None
    if intensity is not None and ridge is not None:
        side = "memory" if intensity < ridge else "compute"

    compute_pct = r.get(SM_THROUGHPUT)
    memory_pct = r.get(MEM_THROUGHPUT)
    tensor_pipe = r.get(TENSOR_PIPE)
    dram_pct = pct(dram_per_s, peak_bw)

    basis: Literal["speed_of_light", "roofline", "none"] = "none"
    bound: Bound = "unknown"
    reason = "Neither the SpeedOfLight throughputs nor a roofline point are available."
    if compute_pct is not None and memory_pct is not None:
        basis = "speed_of_light"
        bound, reason = _classify(compute_pct, memory_pct, basis, t)
    elif dominant is not None and dominant.pct_of_peak is not None and dram_pct is not None:
        basis = "roofline"
        bound, reason = _classify(dominant.pct_of_peak, dram_pct, basis, t)

    notes: list[str] = []
    tensor_measured = any(p.tensor_core for p in measured)
    if not tensor_measured and tensor_pipe is not None and tensor_pipe > t.tensor_active_pct:
        notes.append(
            f"The tensor pipe was busy {tensor_pipe:.1f}% of elapsed cycles, but tensor op "
            f"counters were not collected: FLOP/s and intensity leave out tensor-core work. "
            f"Collect the {_TENSOR} section."
        )
    elif dominant is None and measured:
        notes.append("No floating-point work was counted in the precisions measured.")
    if any(p.pct_of_peak is not None and p.pct_of_peak > 100.0 for p in points):
        notes.append(
            "A tensor precision exceeds 100% of its dense peak: the kernel uses 2:4-sparse math."
        )
    missing = list(r.missing)
    return Roofline(
        kernel=kernel_name(action),
        duration_ns=duration_ns,
        sm_frequency_hz=sm_clock,
        dram_frequency_hz=dram_clock,
        precisions=points,
        achieved_flop_per_s=achieved,
        flop_counts_complete=complete,
        dominant_precision=dominant.precision if dominant else None,
        peak_flop_per_s=peak_flops,
        dram_bytes=dram_bytes,
        dram_bytes_per_s=dram_per_s,
        peak_dram_bytes_per_s=peak_bw,
        dram_pct_of_peak=dram_pct,
        arithmetic_intensity=intensity,
        ridge_point=ridge,
        attainable_flop_per_s=attainable,
        pct_of_roofline=pct(achieved, attainable),
        roofline_side=side,
        compute_throughput_pct=compute_pct,
        memory_throughput_pct=memory_pct,
        tensor_pipe_pct=tensor_pipe,
        bound=bound,
        bound_basis=basis,
        bound_reason=reason,
        thresholds=t,
        missing_metrics=missing,
        sections_to_collect=sections_for(missing),
        notes=notes,
    )
