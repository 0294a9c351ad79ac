"""``diagnose_kernel``'s answer: a report's diagnosis (``judge/diagnosis.py`` decides which
kernels, their causes and the step view) paged by kernel: the ones diagnosed in full, one line
for each of the next ones."""

from __future__ import annotations

from pydantic import BaseModel, Field

from nsight_agent.diagnose.kernel import KernelDiagnosis
from nsight_agent.diagnose.step_view import StepView
from nsight_agent.judge.diagnosis import JudgedReport
from nsight_agent.views.common import Page, page


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


def report_diagnosis(judged: JudgedReport, follow_up: str | None = None) -> ReportDiagnosis:
    """The answer of ``judged``; ``follow_up``: the call that pages on (a format string with
    ``{offset}``), by default the same report's."""
    pg = page(
        judged.kernels_total,
        judged.offset,
        judged.limit,
        follow_up or f"diagnose_kernel(report_path={judged.report!r}, offset={{offset}})",
    )
    kernels = [
        DiagnosedKernel(op=k.op, share_pct=k.share_pct, launches=k.launches, diagnosis=k.diagnosis)
        for k in judged.full
    ]
    others = [
        KernelShare(
            kernel=k.name[:80],
            op=k.op,
            share_pct=k.share_pct,
            launches=k.launches,
            headline=k.diagnosis.headline[:120],
        )
        for k in judged.brief
    ]
    return ReportDiagnosis(
        report=judged.report,
        gpu=judged.gpu,
        kernels_total=judged.kernels_total,
        step=judged.step,
        kernels=kernels,
        others=others or None,
        page=pg,
        sampled=judged.sampled,
        budget=judged.budget,
    )
