"""The step view: a report of many kernels read as one step (docs/DIAGNOSIS.md, "The step").

Kernels are grouped by their place (``diagnose/places.py``). Each group has its share of the
step's GPU time, its owner, and an upper bound of what the step gains if the group ran at its
roof (Amdahl): each kernel at 100 % of its busiest unit (ncu's speed of light, max of SM and
memory throughput) takes ``t x SOL%``, so the group saves ``sum t (1 - SOL%)``. Times are per
call of the measured function (the report's calls are averaged). A kernel of 5 % or more of the
step whose own diagnosis found no cause is pointed at what covers it (``pointed``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from nsight_agent.diagnose import metrics as dm
from nsight_agent.diagnose.bound import classify
from nsight_agent.diagnose.kernel import KernelDiagnosis
from nsight_agent.diagnose.owner import owner_of
from nsight_agent.diagnose.places import Placed, call_of
from nsight_agent.diagnose.step import Launch, StepCause, host_gaps, launch_bound, unfused_chains
from nsight_agent.numbers import sig

DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
MAX_GROUPS = 10
NEVER_SILENT_PCT = 5.0  # a kernel of at least this share of the step always gets a pointer
SILENT = "no cause found"


class StepGroup(BaseModel):
    """One group of the step: where its kernels come from, whose they are, what it costs."""

    group: str = Field(description="NVTX range, torch op or kernel")
    owner: str = Field(description="yours, or whose")
    launches: int = Field(description="Per call")
    share_pct: float = Field(description="% of step GPU time")
    us: float = Field(description="GPU us per call")
    bound: str = Field(description="Of its longest kernel")
    gain_pct: float | None = Field(default=None, description="Step % saved at its roof (max)")


class StepView(BaseModel):
    """The whole step first: where the GPU time goes, whose it is, what is worth attacking."""

    gpu_us: float = Field(description="Kernel time per call")
    calls: int = Field(description="Calls averaged")
    launches: int = Field(description="Per call")
    wall_us: float | None = Field(default=None, description="Call's wall on the GPU, if timed")
    groups: list[StepGroup] = Field(description="Most time first")
    rest_pct: float | None = Field(default=None, description="Groups not listed")
    causes: list[StepCause] | None = Field(default=None, description="Step-level causes")
    how: str = "gain_pct: Amdahl bound, kernels at their roof or without their top cause"


def _bytes(r: dm.Reader, ns: float) -> float | None:
    read, write = r.get(DRAM_READ, required=False), r.get(DRAM_WRITE, required=False)
    if read is not None or write is not None:
        return (read or 0.0) + (write or 0.0)
    per_s = r.get(dm.DRAM_BYTES_PER_S, required=False)
    return per_s * ns * 1e-9 if per_s is not None else None


def launches_of(
    actions: Sequence[Any], placed: Placed, user_kernels: set[str] | None
) -> tuple[list[Launch], list[float | None], int]:
    """Every action as a ``Launch`` in report (launch) order, its SOL fraction (None where
    the report has no speed of light: how far it is from its roof is unknown, not zero), and
    the number of calls the report holds; ``placed``: ``places(actions, ranges)``."""
    out: list[Launch] = []
    sol: list[float | None] = []
    calls: set[int] = set()
    for a, (ranges, group, op) in zip(actions, placed, strict=True):
        r = dm.Reader(a)
        ns = r.get(dm.DURATION, required=False) or 0.0
        name = dm.kernel_name(a)
        call = call_of(ranges)
        if call is not None:
            calls.add(call)
        b = classify(a)
        owner = owner_of(name, user_kernels, op, dm.mangled_name(a))
        label = "yours" if owner.kind == "user" else owner.who
        launch = Launch(name, group, owner.kind, ns, _bytes(r, ns), b.bound, b.intensity, label)
        out.append(launch)
        busiest = max(b.compute_pct or 0.0, b.memory_pct or 0.0)
        sol.append(min(1.0, max(busiest, 1.0) / 100.0) if b.compute_pct is not None else None)
    return out, sol, max(1, len(calls))


def step_view(
    actions: Sequence[Any],
    placed: Placed,
    user_kernels: set[str] | None = None,
    wall_ns: float | None = None,
    cause_gain: dict[str, float] | None = None,
) -> StepView:
    """The step: groups by time, owners, Amdahl bounds, and the step-level causes.

    ``placed``: ``places(actions, ranges)``. ``cause_gain``: kernel name -> its top cause's
    estimated gain in % (the kernel diagnosis): a kernel at full speed of wasted work
    (uncoalesced sectors) is not at its roof.
    """
    launches, sol, calls = launches_of(actions, placed, user_kernels)
    gains = cause_gain or {}
    sol = [
        None if f is None else min(f, 1.0 - gains.get(x.kernel, 0.0) / 100.0)
        for f, x in zip(sol, launches, strict=True)
    ]
    total = sum(x.ns for x in launches)
    per_call = total / calls
    groups: dict[str, list[int]] = {}
    for i, x in enumerate(launches):
        groups.setdefault(x.group, []).append(i)
    rows: list[StepGroup] = []
    for label, idx in groups.items():
        ns = sum(launches[i].ns for i in idx)
        fractions = [sol[i] for i in idx]
        saved = None  # unknown when a kernel's distance from its roof is
        if all(f is not None for f in fractions):
            saved = sum(launches[i].ns * (1.0 - (sol[i] or 0.0)) for i in idx)
        longest = max(idx, key=lambda i: launches[i].ns)
        x, at = launches[longest], sol[longest]
        rows.append(
            StepGroup(
                group=label,
                owner=x.owner,
                launches=round(len(idx) / calls),
                share_pct=(sig(100.0 * ns / total, 3) or 0.0) if total else 0.0,
                us=sig(ns / calls / 1e3, 3) or 0.0,
                bound=f"{x.bound} (SOL {'-' if at is None else f'{100 * at:.0f}'}%)",
                gain_pct=sig(100.0 * saved / total, 2) if total and saved is not None else None,
            )
        )
    rows.sort(key=lambda g: -g.share_pct)
    first_call = launches[: max(1, len(launches) // calls)]
    per_call_wall = wall_ns
    causes = [
        c
        for c in (
            unfused_chains(launches, total),
            launch_bound(first_call, per_call, wall_ns=per_call_wall),
            host_gaps(per_call, per_call_wall),
        )
        if c is not None
    ]
    shown = rows[:MAX_GROUPS]
    rest = 100.0 - sum(g.share_pct for g in shown)
    return StepView(
        gpu_us=sig(per_call / 1e3, 4) or 0.0,
        calls=calls,
        launches=round(len(launches) / calls),
        wall_us=None if wall_ns is None else sig(wall_ns / 1e3, 4),
        groups=shown,
        rest_pct=sig(rest, 2) if len(rows) > MAX_GROUPS and rest > 0.05 else None,
        causes=causes or None,
    )


def pointed(d: KernelDiagnosis, name: str, op: str | None, step: StepView) -> str:
    """The headline of a kernel of >= 5 % of the step whose own diagnosis found no cause: the
    step cause that covers it (an unfused chain, a launch-bound step), else ncu's strongest
    rule for it that our checks did not measure and decline, else what a deeper pass would
    add, else that ncu's rules were checked and declined; never "no cause found" alone."""
    if SILENT not in d.headline:
        return d.headline
    bound = d.headline.split(":")[0]
    group = op or name[:60]
    cause = next((c for c in step.causes or [] if c.covers(name, group)), None)
    if cause is not None:
        return f"{bound}: part of the step's {cause.id}: {cause.actions[0]}"
    said = [u for u in d.unmapped or [] if u.split(":")[0] not in d.declined_rules()]
    if said:
        strongest = max(said, key=_gain)
        return f"{bound}: no cause of its own; ncu's strongest rule: {strongest}"
    if d.deeper:
        return f"{bound}: no cause in this pass; a deeper pass would add {', '.join(d.deeper)}"
    if d.unmapped:  # every rule ncu raised stands for a cause our checks measured and declined
        rules = ", ".join(u.split(":")[0] for u in d.unmapped)
        return f"{bound}: no cause of its own; ncu's {rules} checked here and declined"
    return d.headline


def _gain(rule: str) -> float:
    """The estimated gain an ``unmapped`` entry ends with ("RuleId: title (12%)"), else -1."""
    found = re.search(r"\((\d+(?:\.\d+)?)%\)$", rule)
    return float(found.group(1)) if found else -1.0
