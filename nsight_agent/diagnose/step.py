"""Causes of a whole step that no single kernel shows: unfused chains, launch-bound steps,
host gaps. Pure functions over the step's launches in launch order (``Launch``).

- Fusion: a run of >= ``min_chain`` consecutive framework kernels (ATen, Inductor) of low
  arithmetic intensity (< 4 FLOP per DRAM byte, or none counted: passes over memory, whether
  the SOL rule calls them memory-, latency- or, for broadcast index arithmetic, compute-bound),
  longer than a launch-bound tiny kernel, each moving a similar number of DRAM bytes (within 4x
  of the run's median: the same tensors, pass after pass). Fused, they would move about the bytes of the
  largest pass, so the bytes saved are at most sum - max, and the time saved at most the run's
  time x (1 - max/sum).
- Launch-bound: >= ``min_tiny`` launches per step of <= ``tiny_us`` each and at least half of
  the launches: each costs a few microseconds of CPU launch work however little it computes.
- Host gaps: when the step's wall time on the GPU is known (the timing path's CUDA events
  around one call), 1 - summed kernel time / wall is the share the GPU sat idle between kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Literal

from pydantic import BaseModel, Field, PrivateAttr

StepCauseId = Literal["unfused_chain", "launch_bound_step", "host_gaps"]


@dataclass(frozen=True)
class Launch:
    """One kernel launch of the step, in launch order."""

    kernel: str
    group: str
    owner_kind: str
    ns: float
    dram_bytes: float | None
    bound: str
    intensity: float | None = None  # FLOP per DRAM byte, when FLOP were counted
    owner: str = ""  # for people: "yours", "ATen", "cuBLAS", ...


class StepCause(BaseModel):
    """A cause of the whole step, with the share of the step it could save."""

    id: StepCauseId
    title: str
    gain_pct: float | None = Field(default=None, description="Step % saved, at most")
    detail: str
    groups: list[str]
    actions: list[str]
    # (kernel, group) of every launch the cause covers: a kernel with no cause of its own
    # points here (views/diagnosis.py); not part of the answer.
    _covers: set[tuple[str, str]] = PrivateAttr(default_factory=set)

    def covers(self, kernel: str, group: str) -> bool:
        return (kernel, group) in self._covers

    def covering(self, launches: list[Launch]) -> StepCause:
        self._covers = {(x.kernel, x.group) for x in launches}
        return self


_FUSABLE_OWNERS = ("framework", "compiler")
PASS_INTENSITY = 4.0  # FLOP per DRAM byte under which a kernel is a pass over memory
TINY_NS = 5e3  # launch-bound kernels are the launch rule's, not the fusion rule's


def _fusable(x: Launch) -> bool:
    low = x.intensity is None or x.intensity < PASS_INTENSITY
    return x.owner_kind in _FUSABLE_OWNERS and low and x.ns > TINY_NS and bool(x.dram_bytes)


def _runs(launches: list[Launch], min_chain: int) -> list[list[Launch]]:
    runs: list[list[Launch]] = []
    current: list[Launch] = []
    for x in [*launches, None]:
        if x is not None and _fusable(x):
            mid = median([c.dram_bytes or 0.0 for c in current]) if current else None
            if mid is None or 0.25 <= (x.dram_bytes or 0.0) / mid <= 4.0:
                current.append(x)
                continue
        if len(current) >= min_chain:
            runs.append(current)
        current = [x] if x is not None and _fusable(x) else []
    return runs


def unfused_chains(launches: list[Launch], total_ns: float, min_chain: int = 3) -> StepCause | None:
    """Consecutive memory-bound framework kernels over tensors of the same size: fuse them."""
    runs = _runs(launches, min_chain)
    if not runs or total_ns <= 0:
        return None
    saved_ns = moved = fused = 0.0
    for run in runs:
        sizes = [x.dram_bytes or 0.0 for x in run]
        run_ns = sum(x.ns for x in run)
        saved_ns += run_ns * (1.0 - max(sizes) / sum(sizes))
        moved += sum(sizes)
        fused += max(sizes)
    longest = max(runs, key=len)
    ops = " -> ".join(dict.fromkeys(x.group for x in longest))
    kernels = sum(len(r) for r in runs)
    cause = StepCause(
        id="unfused_chain",
        title=f"{kernels} framework kernels in {len(runs)} unfused chain(s) over the same tensors",
        gain_pct=round(100.0 * saved_ns / total_ns, 1),
        detail=f"they move {moved / 1e6:.0f} MB from DRAM, pass after pass; fused, about "
        f"{fused / 1e6:.0f} MB (saves <= {saved_ns / 1e3:.0f} us per step); longest: {ops}"[:300],
        groups=list(dict.fromkeys(x.group for r in runs for x in r))[:8],
        actions=[
            "torch.compile the function (Inductor fuses pointwise and reduction chains)",
            "or write the chain as one Triton kernel: read the inputs once, write the output once",
            "drop needless casts and copies inside the chain (.to(), .contiguous())",
        ],
    )
    return cause.covering([x for r in runs for x in r])


def launch_bound(
    launches: list[Launch],
    total_ns: float,
    tiny_us: float = 5.0,
    min_tiny: int = 20,
    launch_us: float = 3.0,
    wall_ns: float | None = None,
) -> StepCause | None:
    """Many tiny launches: the step is bound by launch cost, not by the GPU."""
    tiny = [x for x in launches if x.ns <= tiny_us * 1e3]
    if len(tiny) < min_tiny or 2 * len(tiny) < len(launches) or total_ns <= 0:
        return None
    floor_ns = len(launches) * launch_us * 1e3  # the CPU cannot launch them faster than this
    step_ns = max(total_ns, floor_ns, wall_ns or 0.0)
    gain = 100.0 * (1.0 - total_ns / step_ns) if step_ns > total_ns else None
    cause = StepCause(
        id="launch_bound_step",
        title=f"launch-bound: {len(tiny)} of {len(launches)} launches take <= {tiny_us:g} us",
        gain_pct=None if gain is None else round(gain, 1),
        detail=f"median launch {median(x.ns for x in tiny) / 1e3:.1f} us of GPU work; at "
        f"~{launch_us:g} us of CPU per launch the step needs >= {floor_ns / 1e3:.0f} us "
        f"against {total_ns / 1e3:.0f} us of kernel time",
        groups=list(dict.fromkeys(x.group for x in tiny))[:8],
        actions=[
            "capture the step in a CUDA graph (torch.cuda.graphs, torch.compile(mode="
            "'reduce-overhead'))",
            "batch the small ops: torch._foreach_* / fused optimizers (foreach=True, fused=True)",
            "fuse the small kernels into fewer, larger ones",
        ],
    )
    return cause.covering(tiny)


def host_gaps(
    total_ns: float, wall_ns: float | None, min_idle_pct: float = 20.0
) -> StepCause | None:
    """The GPU idles between kernels: the host (Python, launches, syncs) is the bottleneck."""
    if wall_ns is None or wall_ns <= 0 or total_ns >= wall_ns:
        return None
    idle = 100.0 * (1.0 - total_ns / wall_ns)
    if idle < min_idle_pct:
        return None
    return StepCause(
        id="host_gaps",
        title=f"the GPU idles {idle:.0f}% of the step",
        gain_pct=round(idle, 1),
        detail=f"kernels {total_ns / 1e3:.0f} us of a {wall_ns / 1e3:.0f} us step (CUDA events "
        "around one call, without ncu)",
        groups=[],
        actions=[
            "remove host syncs inside the step (.item(), .cpu(), printing tensors)",
            "CUDA graphs or torch.compile for launch overhead; overlap data loading",
        ],
    )
