"""``compare_variants``' answer: a run's comparison (``judge/comparison.py`` decides every
verdict) paged by config, on its time basis (``judge/basis.py``), beside the other basis's
verdicts and where the two disagree, with the rule it applied, the run's warnings and
artifacts."""

from __future__ import annotations

from pydantic import BaseModel, Field

from nsight_agent.judge.basis import Bases, basis_text
from nsight_agent.judge.comparison import CompareConfig, Comparison
from nsight_agent.judge.run import RunLike
from nsight_agent.judge.verdicts import VariantOverall
from nsight_agent.numbers import sig
from nsight_agent.time_basis import TimeBasis
from nsight_agent.views.common import Page, page
from nsight_agent.views.kernelbench_result import KernelBenchReport
from nsight_agent.views.runs import artifact_names, problem_sizes


class OtherBasis(BaseModel):
    """The same comparison on the other time basis."""

    time_basis: TimeBasis
    basis: str
    overall: dict[str, VariantOverall]


class CompareSummary(BaseModel):
    """compare_variants' answer: per config each variant's time and a noise-aware verdict.
    ``basis``: what each time is on this run; ``other_basis``: the verdicts on the other
    time; ``disagreements``: where the two point opposite ways, and why; ``kernelbench``:
    under correctness='kernelbench', KernelBench's result fields."""

    run_id: str
    metric: str
    unit: str | None = None
    baseline: str
    time_basis: TimeBasis | None = Field(
        default=None, description="What verdicts compare: gpu (kernel) or call (per-call) time"
    )
    basis: str | None = None
    rule: str = Field(description="How verdicts are decided")
    overall: dict[str, VariantOverall]
    other_basis: OtherBasis | None = None
    disagreements: list[str] | None = None
    kernelbench: KernelBenchReport | None = None
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
    bases: Bases | None = None,
    disagreements: list[str] | None = None,
) -> CompareSummary:
    """The configs of ``comparison`` from ``offset``, every variant's overall verdict, and
    ``warnings`` (the run's); with ``bases`` (``comparison`` its main one), the basis named,
    each time on the other basis beside it, and ``disagreements``."""
    sizes = problem_sizes(run)  # a KernelBench problem's config column reads its sizes
    pg = page(
        len(comparison.configs),
        offset,
        limit,
        f"compare_variants(run_id={run.run_id!r}, offset={{offset}}, limit={{limit}})",
    )
    configs = comparison.configs[offset : offset + limit]
    other = None
    if bases is not None and bases.other is not None:
        configs = _with_other_times(configs, bases.other)
        text = basis_text(bases.other_basis, run)
        other = OtherBasis(time_basis=bases.other_basis, basis=text, overall=bases.other.overall)
    return CompareSummary(
        run_id=comparison.run_id,
        metric=comparison.metric,
        unit=comparison.unit,
        baseline=comparison.baseline,
        time_basis=bases.basis if bases is not None else None,
        basis=basis_text(bases.basis, run) if bases is not None else None,
        rule=comparison.rule,
        overall=comparison.overall,
        other_basis=other,
        disagreements=disagreements or None,
        page=pg,
        configs=[c.model_copy(update={"config": sizes | c.config}) for c in configs],
        warnings=warnings or None,
        artifacts=artifact_names(run),
        seconds=sig(run.seconds, 3),
    )


def _with_other_times(configs: list[CompareConfig], other: Comparison) -> list[CompareConfig]:
    """Each variant's time on the other basis beside its own (copies)."""
    by_index = {c.config_index: c for c in other.configs}
    out = []
    for c in configs:
        twin = by_index.get(c.config_index)
        variants = {}
        for name, timing in c.variants.items():
            there = twin.variants.get(name) if twin is not None else None
            if there is not None and there.time is not None:
                timing = timing.model_copy(update={"other_time": there.time})
            variants[name] = timing
        out.append(c.model_copy(update={"variants": variants}))
    return out
