"""The diagnosis of a whole report: the step first (views/step.py: groups, owners, Amdahl
bounds, fusion and launch findings), then kernels by share of GPU time, the top ones diagnosed
in full, one line for each of the rest, paged.

Actions of the same kernel in the same place (torch operator or NVTX range; configs, runs) are
one entry: their times add up to its share, and the longest of them is the one diagnosed (the
largest config is usually the one to fix). The same kernel under two operators is two entries,
so each can be traced to its line of code.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from nsight_agent.diagnose import metrics as dm
from nsight_agent.diagnose.kernel import KernelDiagnosis, diagnose_action
from nsight_agent.engine.collection import extract, launch_sampling
from nsight_agent.engine.collection.launch_sampling import PreLaunch
from nsight_agent.views.common import Page, page, sig
from nsight_agent.views.report import gpu_name
from nsight_agent.views.step import Placed, StepView, places, step_view


class KernelShare(BaseModel):
    """A kernel not diagnosed in full on this page: its share and the one line to read."""

    kernel: str
    op: str | None = Field(default=None, description="Its torch op or NVTX range")
    share_pct: float | None = Field(description="% of the report's summed kernel time")
    launches: int = Field(description="Actions (configs x runs) of this kernel in the report")
    headline: str


class DiagnosedKernel(BaseModel):
    op: str | None = Field(default=None, description="Its torch op or NVTX range")
    share_pct: float | None = Field(description="% of the report's summed kernel time")
    launches: int
    diagnosis: KernelDiagnosis


class ReportDiagnosis(BaseModel):
    """diagnose_kernel's answer: the kernels that matter, each with its cause and evidence."""

    report: str = Field(description="The report read (a path, or the run's report)")
    run_id: str | None = None
    gpu: str | None = None
    kernels_total: int = Field(description="Distinct kernels (per operator) in the report")
    step: StepView | None = Field(default=None, description="The whole step, read first")
    kernels: list[DiagnosedKernel] = Field(description="Diagnosed in full, most time first")
    others: list[KernelShare] | None = Field(default=None, description="One line each")
    passes: list[str] | None = Field(
        default=None, description="What each collection run gathered, and from which run"
    )
    sampled: str | None = Field(
        default=None, description="How a step profiled one launch per configuration was read"
    )
    budget: str | None = Field(
        default=None, description="options.budget_s: the estimate, what was left out to fit"
    )
    page: Page
    vocabulary: str = Field(
        default="docs/DIAGNOSIS.md; get_skill(<skill>) explains each cause",
        description="Where the cause ids and thresholds are documented",
    )


def _duration(action: Any) -> float:
    value = dm.Reader(action).get(dm.DURATION, required=False)
    return value or 0.0


def kernels_by_time(
    actions: Sequence[Any], placed: Placed | None = None
) -> list[tuple[str, str | None, float, list[Any]]]:
    """(name, operator or range, summed ns, actions) per kernel and place, most time first;
    ``placed``: ``places(actions)``, when the caller already read the ranges."""
    groups: dict[tuple[str, str | None], list[Any]] = {}
    for a, (_ranges, label, _op) in zip(actions, placed or places(actions), strict=True):
        name = dm.kernel_name(a)
        groups.setdefault((name, None if label == name[:60] else label), []).append(a)
    rows = [(n, op, sum(_duration(a) for a in acts), acts) for (n, op), acts in groups.items()]
    rows.sort(key=lambda r: (-r[2], r[0], r[1] or ""))
    return rows


def diagnose_report(
    path: str | Path,
    *,
    offset: int = 0,
    limit: int = 3,
    one_line: int = 12,
    ideal_bytes: float | None = None,
    input_dtypes: list[str] | None = None,
    follow_up: str | None = None,
    user_kernels: set[str] | None = None,
    wall_ns: float | None = None,
    launches: Sequence[PreLaunch] | None = None,
) -> ReportDiagnosis:
    """Diagnose the ``limit`` kernels from ``offset`` (by time share) in full, list up to
    ``one_line`` more in one line each; with more than one kernel, the step view first.
    ``ideal_bytes`` applies only when a single kernel is diagnosed (it describes one kernel's
    inputs and outputs). ``user_kernels``: names the user's source defines (the owner);
    ``wall_ns``: one call's time on the GPU timeline, for the host-gap finding;
    ``launches``: the pre-flight's launches of a launch-sampled call (launch_sampling.py)."""
    actions = extract.iter_actions(extract.load(path))
    sampled = None
    if launches is not None:
        actions, sampled = _expanded(actions, launches)
    placed = places(actions)  # read once: the kernel list and the step view both group by it
    rows = kernels_by_time(actions, placed)
    total = sum(r[2] for r in rows)
    pg = page(
        len(rows),
        offset,
        limit,
        follow_up or f"diagnose_kernel(report_path={str(path)!r}, offset={{offset}})",
    )
    single = len(rows) == 1

    def share(ns: float) -> float | None:
        return sig(100.0 * ns / total, 3) if total > 0 else None

    def diagnose(op: str | None, acts: list[Any], one: bool = False) -> KernelDiagnosis:
        return diagnose_action(
            max(acts, key=_duration),
            ideal_bytes=ideal_bytes if single and one else None,
            input_dtypes=input_dtypes,
            user_kernels=user_kernels,
            op=op,
        )

    full = [
        DiagnosedKernel(
            op=op, share_pct=share(ns), launches=len(acts), diagnosis=diagnose(op, acts, True)
        )
        for _name, op, ns, acts in rows[offset : offset + limit]
    ]
    rest = [r for i, r in enumerate(rows) if not offset <= i < offset + limit][:one_line]
    briefs = [(name, op, share(ns), len(acts), diagnose(op, acts)) for name, op, ns, acts in rest]
    step = None
    if len(actions) > 1 and not single:
        gains = {
            k.diagnosis.kernel: k.diagnosis.causes[0].gain or 0.0
            for k in full
            if k.diagnosis.causes
        }
        step = step_view(actions, user_kernels, wall_ns, gains, placed)
        for name, op, pct, diagnosis in [
            *((name, k.op, k.share_pct, k.diagnosis) for (name, *_), k in zip(rows[offset:], full)),
            *((name, op, pct, dg) for name, op, pct, _, dg in briefs),
        ]:
            if (pct or 0.0) >= NEVER_SILENT_PCT:
                diagnosis.headline = pointed(diagnosis, name, op, step)
    others = [
        KernelShare(kernel=name[:80], op=op, share_pct=pct, launches=n, headline=dg.headline[:120])
        for name, op, pct, n, dg in briefs
    ]
    return ReportDiagnosis(
        report=str(path),
        gpu=gpu_name(actions),
        kernels_total=len(rows),
        step=step,
        kernels=full,
        others=others or None,
        page=pg,
        sampled=sampled,
    )


def _expanded(actions: list[Any], launches: Sequence[PreLaunch]) -> tuple[list[Any], str | None]:
    """Every launch of a sampled call, and what the answer says of it; when the profiled
    launches cannot be mapped, the profiled ones alone, saying so."""
    try:
        every = launch_sampling.expand(actions, launches)
    except launch_sampling.SamplingMismatch as err:
        return actions, (
            f"launch-sampled, not mapped ({err}): shares and launch counts count each "
            f"profiled configuration once ({len(actions)} launches of {len(launches)})"
        )
    if len(every) == len(actions):
        return every, None  # no configuration repeated: every launch was profiled
    return every, launch_sampling.note(len(actions), len(every))


NEVER_SILENT_PCT = 5.0  # a kernel of at least this share of the step always gets a pointer
SILENT = "no cause found"


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
