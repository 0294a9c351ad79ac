"""Budgeted: a job with a profiling budget (``budget_s``) keeps the sections that fit it,
weighed by the kernels the pre-flight counted (``budget.py``: what one ncu run costs here),
then collects the way chosen for it. So its collect stage never starts beside the pre-flight:
its sections are known only after it. The run says what the budget kept and left out
(``RunFacts.budget``, ``budget_left_out``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from nsight_agent.engine.collection import budget
from nsight_agent.engine.collection.collect.attached import Attached
from nsight_agent.engine.collection.collect.cold import Cold
from nsight_agent.engine.collection.collect.plain import PlainServed
from nsight_agent.engine.collection.collect.strategy import (
    Collected,
    RunPlace,
    Strategy,
    counted,
    dropped,
)
from nsight_agent.engine.store.runs import PreflightResult


@dataclass
class Budgeted(Strategy):
    """``way`` (one that starts after the pre-flight) with the sections that fit
    ``budget_s``; the first ``keep`` always stay."""

    way: Cold | Attached | PlainServed
    budget_s: float
    keep: int

    def preflight(self, run: RunPlace, preflight: Callable[[], PreflightResult]) -> PreflightResult:
        return self.way.preflight(run, preflight)

    def collect(self, run: RunPlace, pre: PreflightResult) -> Collected:
        plan = self.plan(pre, run)
        fitted = replace(self.way, job=self.way.job.with_sections(plan.kept))
        return replace(fitted.collect(run, pre), budget=plan)

    def plan(self, pre: PreflightResult, run: RunPlace) -> budget.BudgetPlan:
        """The sections that fit, for the calls left after the pre-flight: each counts its
        kernels as the pre-flight did (a call it did not count, as on a CPU, counts as one)."""
        skip, counts, job = dropped(pre), counted(pre), self.way.job
        kernels = sum(
            max(counts.get((v, c), 1), 1)
            for v in job.variants
            if v not in skip
            for c in range(job.configs)
        )
        return budget.fit(
            job.options.sections,
            self.budget_s,
            budget.pass_cost(run.runs_root),
            kernels=kernels * job.runs,
            metrics=len(job.options.metrics),
            keep=self.keep,
        )
