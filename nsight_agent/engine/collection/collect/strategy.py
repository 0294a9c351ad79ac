"""What every way of collecting shares: the job (what the collect stage needs of a request,
taken from it once), the run it writes into, what it did, and the interface each way keeps.

    way = choose.choose(request, targets, os.environ)   # before the pre-flight, once
    pre = way.preflight(run, run_preflight)              # with what the way overlaps with it
    done = way.collect(run, pre)                         # every call under ncu, one process
    done.record(result.facts)                            # the path taken, and why
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from nsight_agent.engine.collection import check, preflight_run
from nsight_agent.engine.collection.budget import BudgetPlan
from nsight_agent.engine.collection.call_markers import KernelCounts
from nsight_agent.engine.collection.ncu_args import NcuOptions
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.engine.store.runs import PreflightResult
from nsight_agent.request import ProfileRequest

PRELAUNCHED = "pre-launched"


@dataclass(frozen=True)
class CollectJob:
    """What the collect stage needs of a request: what ncu collects and how (``options``),
    whether the harness opens torch operator ranges (NVTX), the calls it makes (variants x
    configs x runs), and its time limit; ``plain``: collected without the ranges and launch
    sampling the request asked for (``plain.py``)."""

    options: NcuOptions
    op_ranges: bool
    variants: tuple[str, ...]
    configs: int
    runs: int
    timeout_s: float
    plain: bool = False

    @classmethod
    def of(cls, request: ProfileRequest) -> CollectJob:
        options = NcuOptions(
            metrics=check.collected_metrics(request),
            sections=request.sections,
            replay_mode=request.replay_mode,
            cache_control=request.cache_control,
            clock_control=request.clock_control,
            sample_launches=request.sample_launches,
        )
        return cls(
            options=options,
            op_ranges=request.torch_ranges,
            variants=tuple(v.name for v in request.effective_variants()),
            configs=len(request.expanded_configs()),
            runs=request.runs,
            timeout_s=request.timeout_s,
        )

    def as_plain(self) -> CollectJob:
        """The job without torch operator ranges and launch sampling (``plain.py``)."""
        options = replace(self.options, sample_launches=False)
        return replace(self, options=options, op_ranges=False, plain=True)

    def with_sections(self, sections: Sequence[str]) -> CollectJob:
        """The job with only these sections (what a budget kept: ``budgeted.py``)."""
        return replace(self, options=replace(self.options, sections=tuple(sections)))


@dataclass(frozen=True)
class RunPlace:
    """The run a job collects into: its folder and id, and the hook a long wait calls (progress;
    a cancel raises there)."""

    run_dir: Path
    run_id: str
    poll: Callable[[], None]

    @property
    def runs_root(self) -> Path:
        return self.run_dir.parent


@dataclass(frozen=True)
class Collected:
    """What the collect stage did: ncu's wall time and the path it took ("pre-launched", or
    "cold: <why>"), why torch operator ranges were left out (``plain.py``), and the budget's
    plan (``budgeted.py``); kept in the run's facts."""

    seconds: float
    path: str
    plain: str | None = None
    budget: BudgetPlan | None = None

    def record(self, facts: RunFacts) -> None:
        facts.collection, facts.collected_plain = self.path, self.plain
        if self.budget is not None:
            facts.budget, facts.budget_left_out = self.budget.line(), self.budget.left_out


class Strategy(ABC):
    """One way of collecting a job, chosen before its pre-flight (``choose.py``): what it
    overlaps with the pre-flight, how it collects, where it falls back to, and the path the
    answer reports (``Collected.path``)."""

    def preflight(self, run: RunPlace, preflight: Callable[[], PreflightResult]) -> PreflightResult:
        """``preflight()`` beside what this way starts with it (nothing, unless it says so);
        a broken source raises here (``raise_if_broken``)."""
        pre = preflight()
        preflight_run.raise_if_broken(pre)
        return pre

    @abstractmethod
    def collect(self, run: RunPlace, pre: PreflightResult) -> Collected:
        """Every call of the run under ncu in one process, once the pre-flight passed: the
        variants it dropped are not run; the report, the manifest and the logs land in
        ``run.run_dir``."""


def dropped(pre: PreflightResult) -> list[str]:
    """The variants the pre-flight dropped: the collect stage leaves them out."""
    return sorted(pre.dropped)


def counted(pre: PreflightResult) -> KernelCounts:
    """The pre-flight's kernels per call by (variant, config index): what an attached run's
    call markers must bracket, and what a budget and a time limit's estimate weigh."""
    return preflight_run.expected_kernels(pre)
