"""The diagnosis of a whole report: kernels by share of GPU time, the top ones diagnosed in
full, one line for each of the rest, paged.

Actions of the same kernel (configs, runs) are one entry: their times add up to its share,
and the longest of them is the one diagnosed (the largest config is usually the one to fix).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from nsight_agent.diagnose import metrics as dm
from nsight_agent.diagnose.kernel import KernelDiagnosis, diagnose_action
from nsight_agent.engine.collection import extract
from nsight_agent.views.common import Page, page, sig
from nsight_agent.views.report import gpu_name


class KernelShare(BaseModel):
    """A kernel not diagnosed in full on this page: its share and the one line to read."""

    kernel: str
    share_pct: float | None = Field(description="% of the report's summed kernel time")
    launches: int = Field(description="Actions (configs x runs) of this kernel in the report")
    headline: str


class DiagnosedKernel(BaseModel):
    share_pct: float | None = Field(description="% of the report's summed kernel time")
    launches: int
    diagnosis: KernelDiagnosis


class ReportDiagnosis(BaseModel):
    """diagnose_kernel's answer: the kernels that matter, each with its cause and evidence."""

    report: str = Field(description="The report read (a path, or the run's report)")
    run_id: str | None = None
    gpu: str | None = None
    kernels_total: int = Field(description="Distinct kernels in the report")
    kernels: list[DiagnosedKernel] = Field(description="Diagnosed in full, most time first")
    others: list[KernelShare] | None = Field(default=None, description="One line each")
    passes: list[str] | None = Field(
        default=None, description="What each collection pass gathered (staged diagnosis)"
    )
    page: Page
    vocabulary: str = Field(
        default="docs/DIAGNOSIS.md; get_skill(<skill>) explains each cause",
        description="Where the cause ids and thresholds are documented",
    )


def _duration(action: Any) -> float:
    value = dm.Reader(action).get(dm.DURATION, required=False)
    return value or 0.0


def kernels_by_time(actions: Sequence[Any]) -> list[tuple[str, float, list[Any]]]:
    """(name, summed ns, actions) per kernel name, most time first."""
    groups: dict[str, list[Any]] = {}
    for a in actions:
        groups.setdefault(dm.kernel_name(a), []).append(a)
    rows = [(name, sum(_duration(a) for a in acts), acts) for name, acts in groups.items()]
    rows.sort(key=lambda r: (-r[1], r[0]))
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
) -> ReportDiagnosis:
    """Diagnose the ``limit`` kernels from ``offset`` (by time share) in full, list up to
    ``one_line`` more in one line each. ``ideal_bytes`` applies only when a single kernel
    is diagnosed (it describes one kernel's inputs and outputs)."""
    actions = extract.iter_actions(extract.load(path))
    rows = kernels_by_time(actions)
    total = sum(r[1] for r in rows)
    pg = page(
        len(rows),
        offset,
        limit,
        follow_up or f"diagnose_kernel(report_path={str(path)!r}, offset={{offset}})",
    )
    single = len(rows) == 1

    def share(ns: float) -> float | None:
        return sig(100.0 * ns / total, 3) if total > 0 else None

    full = []
    for _name, ns, acts in rows[offset : offset + limit]:
        longest = max(acts, key=_duration)
        d = diagnose_action(
            longest,
            ideal_bytes=ideal_bytes if single else None,
            input_dtypes=input_dtypes,
        )
        full.append(DiagnosedKernel(share_pct=share(ns), launches=len(acts), diagnosis=d))
    rest = [r for i, r in enumerate(rows) if not offset <= i < offset + limit][:one_line]
    others = [
        KernelShare(
            kernel=name[:80],
            share_pct=share(ns),
            launches=len(acts),
            headline=diagnose_action(max(acts, key=_duration)).headline[:120],
        )
        for name, ns, acts in rest
    ]
    return ReportDiagnosis(
        report=str(path),
        gpu=gpu_name(actions),
        kernels_total=len(rows),
        kernels=full,
        others=others or None,
        page=pg,
    )
