"""``compare_variants``' answer: a run's comparison (``judge/comparison.py`` decides every
verdict) paged by config, with the rule it applied, the run's warnings and artifacts."""

from __future__ import annotations

from pydantic import BaseModel, Field

from nsight_agent.judge.comparison import CompareConfig, Comparison
from nsight_agent.judge.run import RunLike
from nsight_agent.judge.verdicts import VariantOverall
from nsight_agent.numbers import sig
from nsight_agent.views.common import Page, page
from nsight_agent.views.runs import artifact_names, problem_sizes


class CompareSummary(BaseModel):
    """compare_variants' answer: per config each variant's time and a noise-aware verdict."""

    run_id: str
    metric: str
    unit: str | None = None
    baseline: str
    rule: str = Field(description="How verdicts are decided")
    overall: dict[str, VariantOverall]
    page: Page
    configs: list[CompareConfig]
    warnings: list[str] | None = None
    artifacts: list[str] | None = None
    seconds: float | None = None


def compare_summary(
    comparison: Comparison,
    run: RunLike,
    warnings: list[str],
    *,
    offset: int = 0,
    limit: int = 20,
) -> CompareSummary:
    """The configs of ``comparison`` from ``offset``, every variant's overall verdict, and
    ``warnings`` (the run's)."""
    sizes = problem_sizes(run)  # a KernelBench problem's config column reads its sizes
    pg = page(
        len(comparison.configs),
        offset,
        limit,
        f"compare_variants(run_id={run.run_id!r}, offset={{offset}}, limit={{limit}})",
    )
    return CompareSummary(
        run_id=comparison.run_id,
        metric=comparison.metric,
        unit=comparison.unit,
        baseline=comparison.baseline,
        rule=comparison.rule,
        overall=comparison.overall,
        page=pg,
        configs=[
            c.model_copy(update={"config": sizes | c.config})
            for c in comparison.configs[offset : offset + limit]
        ],
        warnings=warnings or None,
        artifacts=artifact_names(run),
        seconds=sig(run.seconds, 3),
    )
