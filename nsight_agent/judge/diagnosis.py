"""The diagnosis of a whole report, assembled: the report read (``judge/reading.py``), a
launch-sampled call read as every launch it made, each kernel placed (``diagnose/places.py``),
kernels ranked by share of GPU time, the top ones diagnosed in full and the next ones in brief
(``diagnose/kernel.py``), the step view first when there are several (``diagnose/
step_view.py``), and a kernel of 5 % or more of the step without a cause of its own pointed at
what covers it.

Actions of the same kernel in the same place (torch operator or NVTX range; configs, runs) are
one entry: their times add up to its share, and the longest of them is the one diagnosed (the
largest config is usually the one to fix). The same kernel under two operators is two entries,
so each can be traced to its line of code. A launch-sampled call (ncu profiled one launch per
configuration) is read as every launch, each as its configuration's profiled one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from nsight_agent.diagnose.kernel import KernelDiagnosis, diagnose_action
from nsight_agent.diagnose.places import kernels_by_time, longest, places
from nsight_agent.diagnose.step_view import NEVER_SILENT_PCT, StepView, pointed, step_view
from nsight_agent.judge.reading import ReadReport, read_run_report
from nsight_agent.judge.run import RunLike
from nsight_agent.judge.run_warnings import budget_note
from nsight_agent.numbers import sig
from nsight_agent.source_kernels import defined_by


@dataclass(frozen=True)
class JudgedKernel:
    """One kernel (per place) of the report: its share of the time and its diagnosis."""

    name: str
    op: str | None  # its torch op or NVTX range
    share_pct: float | None  # of the report's summed kernel time
    launches: int  # actions (configs x runs) of this kernel in the report
    diagnosis: KernelDiagnosis


@dataclass(frozen=True)
class JudgedReport:
    """What a report's diagnosis decided: the kernels from ``offset`` in full (at most
    ``limit``), the next ones in brief, the step view, how a sampled call was read, and for a
    run under a budget, what the budget left out."""

    report: str
    gpu: str | None
    kernels_total: int
    offset: int
    limit: int
    full: list[JudgedKernel]
    brief: list[JudgedKernel]
    step: StepView | None
    sampled: str | None
    budget: str | None = None

    @property
    def deeper_sections(self) -> list[str]:
        """The sections the kernels diagnosed in full ask a deeper pass for."""
        wanted: list[str] = []
        for k in self.full:
            wanted += list((k.diagnosis.deeper or {}).keys())
        return list(dict.fromkeys(wanted))


def diagnose_run(run: RunLike, *, timing: RunLike | None = None, **options: Any) -> JudgedReport:
    """The diagnosis of a run's report (a launch-sampled call read as every launch): its
    kernels' owners read from the run's sources, one call's wall time from ``timing`` (a
    timing run of the same call: the host-gap finding), what a budget left out;
    ``options`` as ``diagnose_report``'s."""
    said = budget_note(run)
    if said and run.facts.budget_left_out:
        said += "; what they would add: each kernel's deeper"
    wall_ns = step_wall_ns(timing) if timing is not None else None
    report = read_run_report(run)
    owners = defined_by(run.request.sources())
    judged = diagnose_report(report, user_kernels=owners, wall_ns=wall_ns, **options)
    return replace(judged, budget=said)


def diagnose_report(
    report: ReadReport,
    *,
    offset: int = 0,
    limit: int = 3,
    one_line: int = 12,
    ideal_bytes: float | None = None,
    input_dtypes: list[str] | None = None,
    user_kernels: set[str] | None = None,
    wall_ns: float | None = None,
) -> JudgedReport:
    """Diagnose the ``limit`` kernels from ``offset`` (by time share) in full, up to
    ``one_line`` more in brief; with more than one kernel, the step view first.
    ``ideal_bytes`` applies only when a single kernel is diagnosed (it describes one kernel's
    inputs and outputs). ``user_kernels``: names the user's source defines (the owner);
    ``wall_ns``: one call's time on the GPU timeline, for the host-gap finding."""
    actions = report.actions
    placed = places(actions, report.ranges)  # the kernel list and the step view both group by it
    rows = kernels_by_time(actions, placed)
    total = sum(r[2] for r in rows)
    single = len(rows) == 1

    def judged(row: tuple[str, str | None, float, list[Any]], one: bool) -> JudgedKernel:
        name, op, ns, acts = row
        diagnosis = diagnose_action(
            longest(acts),
            ideal_bytes=ideal_bytes if single and one else None,
            input_dtypes=input_dtypes,
            user_kernels=user_kernels,
            op=op,
        )
        share = sig(100.0 * ns / total, 3) if total > 0 else None
        return JudgedKernel(name, op, share, len(acts), diagnosis)

    full = [judged(r, True) for r in rows[offset : offset + limit]]
    rest = [r for i, r in enumerate(rows) if not offset <= i < offset + limit][:one_line]
    brief = [judged(r, False) for r in rest]
    step = None
    if len(actions) > 1 and not single:
        gains = {
            k.diagnosis.kernel: k.diagnosis.causes[0].gain or 0.0
            for k in full
            if k.diagnosis.causes
        }
        step = step_view(actions, placed, user_kernels, wall_ns, gains)
        for k in [*full, *brief]:
            if (k.share_pct or 0.0) >= NEVER_SILENT_PCT:
                k.diagnosis.headline = pointed(k.diagnosis, k.name, k.op, step)
    return JudgedReport(
        str(report.path), report.gpu, len(rows), offset, limit, full, brief, step, report.sampled
    )


def step_of_report(report: ReadReport) -> StepView | None:
    """The step view of a report alone (no source, no wall time); None for a single launch."""
    if len(report.actions) < 2:
        return None
    return step_view(report.actions, places(report.actions, report.ranges))


def step_wall_ns(timing: RunLike) -> float | None:
    """One call's time on the GPU timeline from a timing run: the largest config's average,
    the one the diagnosis looks at."""
    frame = timing.processed
    if frame is None or frame.empty or "AvgValue" not in frame.columns:
        return None
    values = [float(v) for v in frame["AvgValue"] if v == v]
    return max(values) if values else None
