"""ncu's GPU Speed Of Light summary of one kernel: compute and memory throughput as % of peak."""

from __future__ import annotations

from pydantic import BaseModel, Field

from nsight_agent.diagnose.metrics import (
    BREAKDOWN_MEM,
    BREAKDOWN_SM,
    DRAM_CLOCK,
    DRAM_THROUGHPUT,
    DURATION,
    ELAPSED_CYCLES,
    GPC_CLOCK,
    L1_THROUGHPUT,
    L2_THROUGHPUT,
    MEM_THROUGHPUT,
    SM_ACTIVE_CYCLES,
    SM_THROUGHPUT,
    WAVES,
    ActionLike,
    Reader,
    kernel_name,
    sections_for,
)


class UnitThroughput(BaseModel):
    metric: str
    pct_of_peak: float


class SpeedOfLight(BaseModel):
    """ncu's GPU Speed Of Light summary for one kernel."""

    kernel: str
    duration_ns: float | None = Field(description="gpu__time_duration.sum")
    compute_throughput_pct: float | None = Field(
        description="sm__throughput: the busiest SM unit, % of its peak"
    )
    memory_throughput_pct: float | None = Field(
        description="gpu__compute_memory_throughput: the busiest memory unit (L1, L2, DRAM), % of peak"
    )
    dram_throughput_pct: float | None
    l1tex_throughput_pct: float | None
    l2_throughput_pct: float | None
    elapsed_cycles: float | None
    sm_active_cycles: float | None
    sm_frequency_hz: float | None
    dram_frequency_hz: float | None
    waves_per_sm: float | None = Field(description="Full waves the grid needs (launch stats)")
    top_compute_units: list[UnitThroughput] = Field(
        description="Largest parts of sm__throughput's breakdown, busiest first"
    )
    top_memory_units: list[UnitThroughput] = Field(
        description="Largest parts of gpu__compute_memory_throughput's breakdown, busiest first"
    )
    missing_metrics: list[str]
    sections_to_collect: list[str]


def _breakdown(reader: Reader, name: str, top: int = 3) -> list[UnitThroughput]:
    listing = reader.text(name)
    if not listing:
        return []
    parts: list[UnitThroughput] = []
    for metric in listing.split(","):
        metric = metric.strip()
        value = reader.get(metric, required=False)
        if metric and value is not None:
            parts.append(UnitThroughput(metric=metric, pct_of_peak=value))
    parts.sort(key=lambda p: (-p.pct_of_peak, p.metric))
    return parts[:top]


def speed_of_light(action: ActionLike) -> SpeedOfLight:
    """The Speed Of Light summary: compute and memory throughput as % of peak, and duration."""
    r = Reader(action)
    sol = SpeedOfLight(
        kernel=kernel_name(action),
        duration_ns=r.get(DURATION),
        compute_throughput_pct=r.get(SM_THROUGHPUT),
        memory_throughput_pct=r.get(MEM_THROUGHPUT),
        dram_throughput_pct=r.get(DRAM_THROUGHPUT),
        l1tex_throughput_pct=r.get(L1_THROUGHPUT),
        l2_throughput_pct=r.get(L2_THROUGHPUT),
        elapsed_cycles=r.get(ELAPSED_CYCLES),
        sm_active_cycles=r.get(SM_ACTIVE_CYCLES),
        sm_frequency_hz=r.get(GPC_CLOCK),
        dram_frequency_hz=r.get(DRAM_CLOCK),
        waves_per_sm=r.get(WAVES, required=False),
        top_compute_units=_breakdown(r, BREAKDOWN_SM),
        top_memory_units=_breakdown(r, BREAKDOWN_MEM),
        missing_metrics=[],
        sections_to_collect=[],
    )
    sol.missing_metrics = list(r.missing)
    sol.sections_to_collect = sections_for(r.missing)
    return sol
