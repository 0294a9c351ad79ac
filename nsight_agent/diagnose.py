"""Diagnose one profiled kernel: roofline position, bound classification, ncu's findings.

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

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

Precision = Literal[
    "fp64",
    "fp32",
    "half",
    "tensor_fp64",
    "tensor_tf32",
    "tensor_fp16",
    "tensor_bf16",
    "tensor_fp8",
]
Bound = Literal["memory-bound", "compute-bound", "latency-bound", "unknown"]
FindingType = Literal["none", "ok", "optimization", "warning", "error"]

# ncu_report's MsgType values (tests check them against the installed ncu_report).
MESSAGE_TYPES: dict[int, FindingType] = {
    0: "none",
    1: "ok",
    2: "optimization",
    3: "warning",
    4: "error",
}
# ncu_report's SpeedupType: LOCAL = gain of the unit the rule looks at, in isolation;
# GLOBAL = reduction of the whole kernel's run time.
SPEEDUP_TYPES: dict[int, Literal["local", "global"]] = {1: "local", 2: "global"}
# ncu_report's FocusSeverity.
FOCUS_SEVERITIES: dict[int, Literal["default", "low", "high"]] = {0: "default", 1: "low", 2: "high"}


class MetricLike(Protocol):
    def value(self) -> Any: ...


class ActionLike(Protocol):
    """What this module needs of an ``ncu_report.IAction``."""

    def name(self) -> str: ...

    def metric_names(self) -> Iterable[str]: ...

    def __getitem__(self, name: str) -> MetricLike: ...

    def rule_results_as_dicts(self) -> list[dict[str, Any]]: ...


# ---------------------------------------------------------------------------------------------
# Metric names and the sections that collect them

DURATION = "gpu__time_duration.sum"
SM_THROUGHPUT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEM_THROUGHPUT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_THROUGHPUT = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
L1_THROUGHPUT = "l1tex__throughput.avg.pct_of_peak_sustained_active"
L2_THROUGHPUT = "lts__throughput.avg.pct_of_peak_sustained_elapsed"
ELAPSED_CYCLES = "gpc__cycles_elapsed.max"
SM_ACTIVE_CYCLES = "sm__cycles_active.avg"
GPC_CLOCK = "gpc__cycles_elapsed.avg.per_second"
WAVES = "launch__waves_per_multiprocessor"
SM_CLOCK = "sm__cycles_elapsed.avg.per_second"
SMSP_CLOCK = "smsp__cycles_elapsed.avg.per_second"
DRAM_CLOCK = "dram__cycles_elapsed.avg.per_second"
DRAM_BYTES = "dram__bytes.sum"
DRAM_BYTES_PER_S = "dram__bytes.sum.per_second"
DRAM_PEAK_PER_CYCLE = "dram__bytes.sum.peak_sustained"
TENSOR_PIPE = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
BREAKDOWN_SM = "breakdown:" + SM_THROUGHPUT
BREAKDOWN_MEM = "breakdown:" + MEM_THROUGHPUT

_SOL = "SpeedOfLight"
_ROOF = "SpeedOfLight_RooflineChart"
_HALF = "SpeedOfLight_HierarchicalHalfRooflineChart"
_TENSOR = "SpeedOfLight_HierarchicalTensorRooflineChart"
_LAUNCH = "LaunchStats"


def _thread_ops(prefix: str, op: str) -> str:
    return f"{prefix}__sass_thread_inst_executed_op_{op}_pred_on"


class _Work(BaseModel):
    """How one precision's achieved and peak rates are read from the report."""

    precision: Precision
    tensor_core: bool
    # (metric, FLOP per count): summed, then multiplied by the clock below.
    achieved: list[tuple[str, float]]
    achieved_clock: str
    # Alternatives for the peak rate per cycle, best first: (metric, FLOP per count).
    peaks: list[tuple[str, float]]
    section: str


def _fma_work(precision: Precision, add: str, mul: str, fma: str, fma_flop: float) -> _Work:
    per_cycle = ".sum.per_cycle_elapsed"
    other = 2.0 if precision == "half" else 1.0
    return _Work(
        precision=precision,
        tensor_core=False,
        achieved=[
            (_thread_ops("smsp", add) + per_cycle, other),
            (_thread_ops("smsp", mul) + per_cycle, other),
            (_thread_ops("smsp", fma) + per_cycle, fma_flop),
        ],
        achieved_clock=SMSP_CLOCK,
        peaks=[(_thread_ops("sm", fma) + ".sum.peak_sustained", fma_flop)],
        section=_HALF if precision == "half" else _ROOF,
    )


def _tensor_work(precision: Precision, achieved: list[str], peaks: list[str]) -> _Work:
    # Tensor "ops" are FLOPs: a 2048^3 bf16 product counted 2 * 2048^3 on an H200.
    return _Work(
        precision=precision,
        tensor_core=True,
        achieved=[(f"sm__ops_path_tensor_{m}.sum.per_cycle_elapsed", 1.0) for m in achieved],
        achieved_clock=SM_CLOCK,
        peaks=[(f"sm__ops_path_tensor_{m}.sum.peak_sustained", 1.0) for m in peaks],
        section=_TENSOR,
    )


# Dense peaks first: on gh100 the plain ``src_*`` peaks count 2:4-sparse math (twice the
# dense rate), so the warpgroup (hgmma) dense peak is preferred where the chip has one.
WORK: tuple[_Work, ...] = (
    _fma_work("fp64", "dadd", "dmul", "dfma", 2.0),
    _fma_work("fp32", "fadd", "fmul", "ffma", 2.0),
    _fma_work("half", "hadd", "hmul", "hfma", 4.0),
    _tensor_work(
        "tensor_bf16",
        ["src_bf16_dst_fp32"],
        [
            "op_hgmma_src_bf16_dst_fp32_sparsity_off",
            "op_hmma_src_bf16_dst_fp32_sparsity_off",
            "src_bf16_dst_fp32",
        ],
    ),
    _tensor_work(
        "tensor_fp16",
        ["src_fp16"],
        ["op_hgmma_src_fp16_sparsity_off", "op_hmma_src_fp16_dst_fp32_sparsity_off", "src_fp16"],
    ),
    _tensor_work(
        "tensor_tf32",
        ["src_tf32_dst_fp32"],
        [
            "op_hgmma_src_tf32_dst_fp32_sparsity_off",
            "op_hmma_src_tf32_dst_fp32_sparsity_off",
            "src_tf32_dst_fp32",
        ],
    ),
    _tensor_work(
        "tensor_fp8", ["src_fp8_sparsity_off", "src_fp8_sparsity_on"], ["src_fp8_sparsity_off"]
    ),
    _tensor_work("tensor_fp64", ["src_fp64"], ["src_fp64"]),
)

SECTION_OF: dict[str, str] = {
    DURATION: _SOL,
    SM_THROUGHPUT: _SOL,
    MEM_THROUGHPUT: _SOL,
    DRAM_THROUGHPUT: _SOL,
    L1_THROUGHPUT: _SOL,
    L2_THROUGHPUT: _SOL,
    ELAPSED_CYCLES: _SOL,
    SM_ACTIVE_CYCLES: _SOL,
    GPC_CLOCK: _SOL,
    WAVES: _LAUNCH,
    BREAKDOWN_SM: _SOL,
    BREAKDOWN_MEM: _SOL,
    TENSOR_PIPE: _SOL,
    SM_CLOCK: _ROOF,
    SMSP_CLOCK: _ROOF,
    DRAM_CLOCK: _ROOF,
    DRAM_BYTES_PER_S: _ROOF,
    DRAM_PEAK_PER_CYCLE: _ROOF,
}
for _w in WORK:
    for _m, _ in (*_w.achieved, *_w.peaks):
        SECTION_OF.setdefault(_m, _w.section)

_SOL_METRICS = (
    DURATION,
    SM_THROUGHPUT,
    MEM_THROUGHPUT,
    DRAM_THROUGHPUT,
    L1_THROUGHPUT,
    L2_THROUGHPUT,
    ELAPSED_CYCLES,
    SM_ACTIVE_CYCLES,
    GPC_CLOCK,
    DRAM_CLOCK,
)


def bound_metrics() -> list[str]:
    """Every metric ``roofline`` and ``speed_of_light`` read, for ``ncu --metrics``.

    Peak alternatives are listed in full: ncu accepts names a chip lacks only where it has
    them, so on GPUs other than Hopper prefer ``bound_sections()``.
    """
    names: list[str] = [*_SOL_METRICS, TENSOR_PIPE, SM_CLOCK, SMSP_CLOCK]
    names += [DRAM_BYTES, DRAM_BYTES_PER_S, DRAM_PEAK_PER_CYCLE]
    for work in WORK:
        names += [m for m, _ in work.achieved]
        names += [m for m, _ in work.peaks]
    return list(dict.fromkeys(names))


def bound_sections() -> list[str]:
    """The ncu sections that collect everything ``roofline`` reads."""
    return [_SOL, _ROOF, _HALF, _TENSOR]


# ---------------------------------------------------------------------------------------------
# Reading metrics


class _Reader:
    """Numeric metric values of one action; remembers what was asked for and absent."""

    def __init__(self, action: ActionLike) -> None:
        self.action = action
        self.names = set(action.metric_names())
        self.missing: list[str] = []

    def has(self, name: str) -> bool:
        return name in self.names

    def get(self, name: str, required: bool = True) -> float | None:
        if name not in self.names:
            if required and name not in self.missing:
                self.missing.append(name)
            return None
        value = self.action[name].value()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        number = float(value)
        return number if math.isfinite(number) else None

    def text(self, name: str) -> str | None:
        if name not in self.names:
            return None
        value = self.action[name].value()
        return value if isinstance(value, str) else None


def _kernel_name(action: ActionLike) -> str:
    try:
        return str(action.name())
    except Exception:  # a stand-in action without a name
        return ""


def _pct(part: float | None, whole: float | None) -> float | None:
    if part is None or whole is None or whole <= 0:
        return None
    return 100.0 * part / whole


def _sections_for(missing: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(SECTION_OF.get(m, _SOL) for m in missing))


# ---------------------------------------------------------------------------------------------
# Speed of light


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


def _breakdown(reader: _Reader, name: str, top: int = 3) -> list[UnitThroughput]:
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
    r = _Reader(action)
    sol = SpeedOfLight(
        kernel=_kernel_name(action),
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
    sol.sections_to_collect = _sections_for(r.missing)
    return sol


# ---------------------------------------------------------------------------------------------
# Roofline


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


def _point(r: _Reader, work: _Work) -> PrecisionPoint:
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
        pct_of_peak=_pct(achieved, peak),
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
    r = _Reader(action)
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
    dram_pct = _pct(dram_per_s, peak_bw)

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
        kernel=_kernel_name(action),
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
        pct_of_roofline=_pct(achieved, attainable),
        roofline_side=side,
        compute_throughput_pct=compute_pct,
        memory_throughput_pct=memory_pct,
        tensor_pipe_pct=tensor_pipe,
        bound=bound,
        bound_basis=basis,
        bound_reason=reason,
        thresholds=t,
        missing_metrics=missing,
        sections_to_collect=_sections_for(missing),
        notes=notes,
    )


# ---------------------------------------------------------------------------------------------
# Findings


class FocusMetric(BaseModel):
    name: str
    value: float | None
    severity: Literal["default", "low", "high"]
    info: str


class Finding(BaseModel):
    """One result of ncu's guided analysis (a rule), in plain text."""

    rule_id: str
    rule_name: str
    section: str
    title: str = Field(description="The message title, or the rule name when ncu gave none")
    message: str = Field(description="ncu's message with its link markup turned into plain text")
    type: FindingType
    estimated_speedup_pct: float | None = Field(
        description="ncu's estimate of the gain if the issue were fixed, in %"
    )
    speedup_type: Literal["local", "global"] | None = Field(
        description="global: less run time of the whole kernel; local: better use of the one "
        "unit the rule looks at, in isolation"
    )
    focus_metrics: list[FocusMetric]
    linked_sections: list[str] = Field(description="Section identifiers the message points to")
    links: list[str] = Field(description="URLs the message points to")


_MARKUP = re.compile(r"@(url|section|sass|source):([^@]*)@")
_URL_BODY = re.compile(r"^(?P<text>.*?):(?P<link>[A-Za-z][A-Za-z0-9+.-]*://.*)$")
_SOURCE_BODY = re.compile(r"^(?P<file>.*?):(?P<line>\d+):(?P<text>.*)$")


def plain_text(message: str) -> tuple[str, list[str], list[str]]:
    """(text, section identifiers, URLs) from a message with ncu's ``@kind:...@`` links."""
    sections: list[str] = []
    links: list[str] = []

    def replace(match: re.Match[str]) -> str:
        kind, body = match.group(1), match.group(2)
        if kind == "url":
            url = _URL_BODY.match(body)
            if url:
                links.append(url["link"])
                return url["text"]
            return body
        if kind == "source":
            source = _SOURCE_BODY.match(body)
            if source:
                return f"{source['text']} ({source['file']}:{source['line']})"
            return body
        target, _, text = body.partition(":")
        if kind == "section":
            sections.append(target)
        return text or target

    text = _MARKUP.sub(replace, message)
    return " ".join(text.split()), list(dict.fromkeys(sections)), list(dict.fromkeys(links))


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(float(value)) else None


def _as_int(value: object) -> int:
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return -1


def _finding(raw: Mapping[str, Any]) -> Finding | None:
    msg = raw.get("rule_message") or {}
    text, sections, links = plain_text(str(msg.get("message", "")))
    rule_name = str(raw.get("name", ""))
    title = " ".join(str(msg.get("title", "")).split())
    if not text and not title:
        return None
    speedup = raw.get("speedup_estimation") or {}
    focus = [
        FocusMetric(
            name=str(f.get("name", "")),
            value=_number(f.get("value")),
            severity=FOCUS_SEVERITIES.get(_as_int(f.get("severity")), "default"),
            info=str(f.get("info", "")),
        )
        for f in raw.get("focus_metrics") or []
    ]
    return Finding(
        rule_id=str(raw.get("rule_identifier", "")),
        rule_name=rule_name,
        section=str(raw.get("section_identifier", "")),
        title=title or rule_name,
        message=text,
        type=MESSAGE_TYPES.get(_as_int(msg.get("type")), "none"),
        estimated_speedup_pct=_number(speedup.get("speedup")),
        speedup_type=SPEEDUP_TYPES.get(_as_int(speedup.get("type"))),
        focus_metrics=focus,
        linked_sections=sections,
        links=links,
    )


_TYPE_ORDER: dict[FindingType, int] = {
    "error": 0,
    "warning": 1,
    "optimization": 2,
    "ok": 3,
    "none": 4,
}


def findings(action: ActionLike) -> list[Finding]:
    """ncu's rule results for one kernel, largest estimated speedup first.

    Results with neither a title nor a message are dropped. Results without an estimate
    follow, errors and warnings before optimizations and plain information.
    """
    out = [f for f in map(_finding, action.rule_results_as_dicts()) if f is not None]
    out.sort(
        key=lambda f: (
            f.estimated_speedup_pct is None,
            -(f.estimated_speedup_pct or 0.0),
            _TYPE_ORDER[f.type],
            f.rule_id,
        )
    )
    return out
