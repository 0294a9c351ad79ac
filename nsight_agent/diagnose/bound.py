"""A bound classification that respects the roofline.

With ``c`` = SM SOL throughput (``sm__throughput``) and ``m`` = memory SOL throughput
(``gpu__compute_memory_throughput``), both % of peak:

1. ``max(c, m) < latency_bound_below_pct`` (60): **latency-bound**.
2. ``|c - m| >= close_within_pts`` (10) and not both ``>= both_high_pct`` (80): the larger names
   the bound (basis ``sol``).
3. Otherwise (close, or both high) the roofline decides (basis ``roofline``): arithmetic
   intensity ``I`` = achieved FLOP/s (all precisions, tensor work included) / DRAM bytes/s,
   against the ridge ``R`` = peak FLOP/s of the dominant precision / peak DRAM bytes/s:
   ``I >= R`` compute-bound, else memory-bound. When tensor op counters are missing but the
   tensor pipe is busy (``>= tensor_busy_pct``), the intensity would leave tensor work out, so
   the kernel is called compute-bound (basis ``tensor_pipe``); with no intensity at all the
   larger SOL value decides.

The roof: DRAM at ``>= dram_roof_pct`` of peak bandwidth, or the dominant precision's FLOP rate
(else the busiest of the tensor, FMA and FP64 pipes) at ``>= compute_roof_pct`` of its peak.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from nsight_agent.diagnose.metrics import (
    DRAM_THROUGHPUT,
    MEM_THROUGHPUT,
    SM_THROUGHPUT,
    TENSOR_PIPE,
    ActionLike,
    Bound,
    Reader,
)
from nsight_agent.diagnose.roofline import Roofline, roofline
from nsight_agent.diagnose.thresholds import DiagnosisThresholds

FMA_PIPE = "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed"
FP64_PIPE = "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed"

Basis = Literal["sol", "roofline", "tensor_pipe", "none"]
Roof = Literal["dram", "compute"]


def _r(x: float | None, digits: int = 1) -> float | None:
    return None if x is None else round(x, digits)


class BoundResult(BaseModel):
    """What bounds the kernel, with the numbers behind it."""

    bound: Bound = Field(description="memory-, compute- or latency-bound, or unknown")
    basis: Basis = Field(
        description="sol: the larger SOL throughput; roofline: intensity vs ridge; "
        "tensor_pipe: busy tensor pipe with uncounted tensor FLOP; none: no data"
    )
    why: str = Field(description="The comparison that decided, with its numbers")
    compute_pct: float | None = Field(default=None, description="sm__throughput, % of peak")
    memory_pct: float | None = Field(
        default=None, description="gpu__compute_memory_throughput, % of peak"
    )
    dram_pct: float | None = Field(default=None, description="DRAM bandwidth, % of peak")
    intensity: float | None = Field(
        default=None, description="FLOP per DRAM byte, tensor work included when counted"
    )
    ridge: float | None = Field(
        default=None, description="FLOP per byte where the precision's roof meets DRAM's"
    )
    precision: str | None = Field(
        default=None, description="Dominant precision (its peak is the compute roof)"
    )
    precision_pct: float | None = Field(
        default=None, description="Dominant precision's FLOP rate, % of its peak"
    )
    tensor_pct: float | None = Field(
        default=None, description="Tensor pipe busy, % of elapsed cycles"
    )
    roof: Roof | None = Field(default=None, description="The roof the kernel is near, if any")
    roof_pct: float | None = Field(default=None, description="How near: % of that roof's peak")


def _intensity(rl: Roofline, t: DiagnosisThresholds) -> float | None:
    tensor_counted = any(p.tensor_core and p.achieved_flop_per_s is not None for p in rl.precisions)
    tensor_busy = (rl.tensor_pipe_pct or 0.0) > 1.0
    if tensor_busy and not tensor_counted:
        return None  # the FLOP total would leave the tensor work out
    return rl.arithmetic_intensity


# Tensor op counters by source precision: plain counts (cheap, any section) or the rates the
# hierarchical tensor roofline collects. Which one is non-zero names the tensor precision.
TENSOR_MIX = {
    "tensor_bf16": "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "tensor_fp16": "sm__ops_path_tensor_src_fp16.sum",
    "tensor_tf32": "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
    "tensor_fp8": "sm__ops_path_tensor_src_fp8.sum",
    "tensor_fp64": "sm__ops_path_tensor_src_fp64.sum",
}


def tensor_precision(r: Reader, rl: Roofline) -> str:
    """The tensor precision from the instruction mix: the largest tensor op count, counted or
    from the roofline's tensor rates; "tensor" when neither was collected."""
    counts: dict[str, float] = {}
    for label, name in TENSOR_MIX.items():
        value = r.get(name, required=False)
        if value is None:
            value = r.get(name + ".per_cycle_elapsed", required=False)
        if value:
            counts[label] = value
    for p in rl.precisions:
        if p.tensor_core and p.achieved_flop_per_s:
            counts[p.precision] = max(counts.get(p.precision, 0.0), p.achieved_flop_per_s)
    return max(counts, key=lambda k: counts[k]) if counts else "tensor"


def _compute_roof(r: Reader, rl: Roofline) -> tuple[float | None, str | None]:
    """How near the compute roof, and whose roof: the dominant precision's FLOP rate or the
    busiest pipe, labelled by what that pipe ran (a busy tensor pipe is a tensor roof, whatever
    fp32 epilogue work the FLOP counters saw)."""
    best: tuple[float, str] | None = None
    for p in rl.precisions:
        if p.precision == rl.dominant_precision and p.pct_of_peak is not None:
            best = (p.pct_of_peak, p.precision)
    for name, label in ((TENSOR_PIPE, ""), (FMA_PIPE, "FMA pipe"), (FP64_PIPE, "fp64")):
        value = r.get(name, required=False)
        if value is not None and (best is None or value > best[0]):
            best = (value, label or tensor_precision(r, rl))
    return best if best is not None else (None, None)


def _roof(
    dram: float | None, compute: float | None, t: DiagnosisThresholds
) -> tuple[Roof | None, float | None]:
    near: list[tuple[float, Roof]] = []
    if dram is not None and dram >= t.dram_roof_pct:
        near.append((dram / t.dram_roof_pct, "dram"))
    if compute is not None and compute >= t.compute_roof_pct:
        near.append((compute / t.compute_roof_pct, "compute"))
    if not near:
        return None, None
    _, which = max(near)
    return which, _r(dram if which == "dram" else compute)


def _close_call(
    c: float,
    m: float,
    intensity: float | None,
    ridge: float | None,
    tensor: float | None,
    t: DiagnosisThresholds,
) -> tuple[Bound, Basis, str]:
    if intensity is not None and ridge is not None:
        bound: Bound = "compute-bound" if intensity >= ridge else "memory-bound"
        side = ">=" if intensity >= ridge else "<"
        return bound, "roofline", f"intensity {intensity:.3g} {side} ridge {ridge:.3g} FLOP/B"
    if tensor is not None and tensor >= t.tensor_busy_pct:
        return (
            "compute-bound",
            "tensor_pipe",
            f"tensor pipe {tensor:.1f}% busy, tensor FLOP not counted",
        )
    bound = "compute-bound" if c >= m else "memory-bound"
    return bound, "sol", "no intensity measured: the larger SOL decides"


def classify(action: ActionLike, thresholds: DiagnosisThresholds | None = None) -> BoundResult:
    """The bound of one kernel with the numbers behind it (see the module docstring)."""
    t = thresholds or DiagnosisThresholds()
    r = Reader(action)
    rl = roofline(action)
    c = r.get(SM_THROUGHPUT, required=False)
    m = r.get(MEM_THROUGHPUT, required=False)
    dram = r.get(DRAM_THROUGHPUT, required=False)
    if dram is None:
        dram = rl.dram_pct_of_peak
    tensor = rl.tensor_pipe_pct
    intensity = _intensity(rl, t)
    ridge = rl.ridge_point
    dominant = next((p for p in rl.precisions if p.precision == rl.dominant_precision), None)
    compute_roof_pct, roof_label = _compute_roof(r, rl)
    roof, roof_pct = _roof(dram, compute_roof_pct, t)
    tensor_busy = tensor is not None and tensor >= t.tensor_busy_pct
    counted_tensor = any(p.tensor_core and p.achieved_flop_per_s for p in rl.precisions)
    precision: str | None = rl.dominant_precision
    if roof == "compute":
        precision = roof_label
    elif tensor_busy and not counted_tensor:
        precision = tensor_precision(r, rl)  # the FLOP counters left the tensor work out
    out = BoundResult(
        bound="unknown",
        basis="none",
        why="SpeedOfLight throughputs not collected",
        compute_pct=_r(c),
        memory_pct=_r(m),
        dram_pct=_r(dram),
        intensity=_r(intensity, 2),
        ridge=_r(ridge, 2),
        precision=precision,
        precision_pct=_r(dominant.pct_of_peak) if dominant else None,
        tensor_pct=_r(tensor),
        roof=roof,
        roof_pct=roof_pct,
    )
    if c is None or m is None:
        return out
    numbers = f"SM {c:.1f}%, memory {m:.1f}%"
    if max(c, m) < t.latency_bound_below_pct:
        out.bound, out.basis = "latency-bound", "sol"
        out.why = f"{numbers}: both < {t.latency_bound_below_pct:.0f}%"
        return out
    close = abs(c - m) < t.close_within_pts
    both_high = min(c, m) >= t.both_high_pct
    if not close and not both_high:
        out.bound = "compute-bound" if c > m else "memory-bound"
        out.basis = "sol"
        out.why = f"{numbers}: {'SM' if c > m else 'memory'} is larger"
        return out
    out.bound, out.basis, detail = _close_call(c, m, intensity, ridge, tensor, t)
    why = "within" if close else "both >="
    limit = t.close_within_pts if close else t.both_high_pct
    out.why = f"{numbers} ({why} {limit:.0f}): {detail}"
    return out
