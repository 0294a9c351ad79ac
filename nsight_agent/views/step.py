"""The step view: a report of many kernels read as one step (docs/DIAGNOSIS.md, "The step").

Kernels are grouped by where they come from: the user's own NVTX range when there is one,
else the torch operator range they ran in (the harness records them with
``torch.autograd.profiler.emit_nvtx`` when diagnosing), else the kernel name. Each group has
its share of the step's GPU time, its owner, and an upper bound of what the step gains if the
group ran at its roof (Amdahl): each kernel at 100 % of its busiest unit (ncu's speed of light,
max of SM and memory throughput) takes ``t x SOL%``, so the group saves ``sum t (1 - SOL%)``.
Times are per call of the measured function (the report's calls are averaged).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from nsight_agent.annotation import NVTX_DOMAIN
from nsight_agent.diagnose import metrics as dm
from nsight_agent.diagnose.bound import classify
from nsight_agent.diagnose.owner import owner_of
from nsight_agent.diagnose.step import Launch, StepCause, host_gaps, launch_bound, unfused_chains
from nsight_agent.engine.collection import extract
from nsight_agent.views.common import sig

DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
MAX_GROUPS = 10


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


# emit_nvtx names a range "aten::add, seq = 12, op_id = 7, sizes = [[4096, 4096], [4096]],
# input_op_ids = [...]"; a backward node "AddmmBackward0, seq = 12, op_id = 40, sizes = ...".
_OP_FIELD = re.compile(r",\s*(seq|op_id)\s*=\s*\d+|,\s*input_op_ids\s*=.*$")
_SIZES = re.compile(r",\s*sizes\s*=\s*(\[.*?\]\])")
_BACKWARD = re.compile(r"(?:evaluate_function:\s*)?(\w+Backward\d*)\b")
_TORCH_RANGE = re.compile(r"^(aten::|autograd::|\w+Backward\d*\b)|,\s*(seq|op_id)\s*=")


def is_torch_range(name: str) -> bool:
    """Whether an NVTX range is one of torch's operator or autograd-node ranges."""
    return bool(_TORCH_RANGE.search(name))


def clean_op(name: str) -> str:
    """A torch operator range without its sequence numbers, with its input shapes when
    recorded (they tell two calls of one op apart); backward nodes by their name."""
    back = _BACKWARD.match(name) or (
        _BACKWARD.search(name) if "evaluate_function" in name else None
    )
    if back:
        return f"{back.group(1)} (backward)"
    sizes = _SIZES.search(name)
    head = _OP_FIELD.sub("", _SIZES.sub("", name)).strip()
    return f"{head} {sizes.group(1)}" if sizes else head


def _split(ranges: dict[str, list[str]]) -> tuple[list[str], list[str]]:
    """(user ranges, torch op ranges), outermost first, without the harness's own ranges."""
    ops: list[str] = []
    user: list[str] = []
    for domain, names in ranges.items():
        if domain.startswith(NVTX_DOMAIN):
            continue  # the harness's own ranges (calls, annotations, scope)
        for n in names:
            (ops if is_torch_range(n) else user).append(n)
    return user, ops


def group_of(
    ranges: dict[str, list[str]], kernel: str, everywhere: frozenset[str] = frozenset()
) -> tuple[str, str | None]:
    """(group label, the torch op the kernel ran in): the user's outermost range that does
    not enclose the whole report (``everywhere``) and is not a torch op, else the outermost
    torch op, else the kernel name."""
    user, ops = _split(ranges)
    user = [u for u in user if u not in everywhere]
    op = clean_op(ops[0]) if ops else None
    if user:
        return user[0][:60], op
    if op:
        return op[:60], op
    return kernel[:60], None


def _call(ranges: dict[str, list[str]]) -> int | None:
    for domain, names in ranges.items():
        if domain.startswith(NVTX_DOMAIN):
            found = extract._call_index(names)
            if found is not None:
                return found
    return None


def _bytes(r: dm.Reader, ns: float) -> float | None:
    read, write = r.get(DRAM_READ, required=False), r.get(DRAM_WRITE, required=False)
    if read is not None or write is not None:
        return (read or 0.0) + (write or 0.0)
    per_s = r.get(dm.DRAM_BYTES_PER_S, required=False)
    return per_s * ns * 1e-9 if per_s is not None else None


Placed = list[tuple[dict[str, list[str]], str, str | None]]


def _ranges(action: Any) -> dict[str, list[str]]:
    """An action's NVTX ranges; a launch-sampled launch that ran in another torch operator
    than the profiled launch it is read from has that operator in place of its ranges'."""
    ranges = extract.nvtx_ranges(action)
    own = getattr(action, "own_op", None)
    if not own:
        return ranges
    out = {}
    for domain, names in ranges.items():
        ops = [n for n in names if is_torch_range(n)]
        out[domain] = [own, *(n for n in names if n not in ops)] if ops else names
    if not any(is_torch_range(n) for names in out.values() for n in names):
        out[""] = [own, *out.get("", [])]
    return out


def places(actions: Sequence[Any]) -> Placed:
    """Each action's (NVTX ranges, group label, torch op), ranges enclosing every action left out."""
    all_ranges = [_ranges(a) for a in actions]
    user_sets = [set(_split(r)[0]) for r in all_ranges]
    everywhere = frozenset(set.intersection(*user_sets)) if user_sets else frozenset()
    return [
        (r, *group_of(r, dm.kernel_name(a), everywhere))
        for a, r in zip(actions, all_ranges, strict=True)
    ]


def launches_of(
    actions: Sequence[Any], user_kernels: set[str] | None, placed: Placed | None = None
) -> tuple[list[Launch], list[float], int]:
    """Every action as a ``Launch`` in report (launch) order, its SOL fraction, and the number
    of calls the report holds; ``placed``: ``places(actions)`` when the caller has it."""
    out: list[Launch] = []
    sol: list[float] = []
    calls: set[int] = set()
    for a, (ranges, group, op) in zip(actions, placed or places(actions), strict=True):
        r = dm.Reader(a)
        ns = r.get(dm.DURATION, required=False) or 0.0
        name = dm.kernel_name(a)
        call = _call(ranges)
        if call is not None:
            calls.add(call)
        b = classify(a)
        owner = owner_of(name, user_kernels, op, dm.mangled_name(a))
        label = "yours" if owner.kind == "user" else owner.who
        launch = Launch(name, group, owner.kind, ns, _bytes(r, ns), b.bound, b.intensity, label)
        out.append(launch)
        busiest = max(b.compute_pct or 0.0, b.memory_pct or 0.0)
        sol.append(min(1.0, max(busiest, 1.0) / 100.0) if b.compute_pct is not None else 1.0)
    return out, sol, max(1, len(calls))


def step_view(
    actions: Sequence[Any],
    user_kernels: set[str] | None = None,
    wall_ns: float | None = None,
    cause_gain: dict[str, float] | None = None,
    placed: Placed | None = None,
) -> StepView:
    """The step: groups by time, owners, Amdahl bounds, and the step-level causes.

    ``cause_gain``: kernel name -> its top cause's estimated gain in % (the kernel diagnosis):
    a kernel at full speed of wasted work (uncoalesced sectors) is not at its roof.
    ``placed``: ``places(actions)``, when the caller already read the ranges.
    """
    launches, sol, calls = launches_of(actions, user_kernels, placed)
    gains = cause_gain or {}
    sol = [
        min(f, 1.0 - gains.get(x.kernel, 0.0) / 100.0) for f, x in zip(sol, launches, strict=True)
    ]
    total = sum(x.ns for x in launches)
    per_call = total / calls
    groups: dict[str, list[int]] = {}
    for i, x in enumerate(launches):
        groups.setdefault(x.group, []).append(i)
    rows: list[StepGroup] = []
    for label, idx in groups.items():
        ns = sum(launches[i].ns for i in idx)
        saved = sum(launches[i].ns * (1.0 - sol[i]) for i in idx)
        longest = max(idx, key=lambda i: launches[i].ns)
        x = launches[longest]
        rows.append(
            StepGroup(
                group=label,
                owner=x.owner,
                launches=round(len(idx) / calls),
                share_pct=(sig(100.0 * ns / total, 3) or 0.0) if total else 0.0,
                us=sig(ns / calls / 1e3, 3) or 0.0,
                bound=f"{x.bound} (SOL {100 * sol[longest]:.0f}%)",
                gain_pct=sig(100.0 * saved / total, 2) if total else None,
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


def step_of_report(path: str | Path) -> StepView | None:
    """The step view of a report alone (no source, no wall time); None for a single launch."""
    actions = extract.iter_actions(extract.load(path))
    return step_view(actions) if len(actions) > 1 else None
