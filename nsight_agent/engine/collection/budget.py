"""A profiling budget: what one ncu run costs on this machine, and which sections fit a limit.

An ncu run costs a fixed start (ncu and the profiled process, or an attach to a pre-launched
target, and the report) plus, for every kernel it profiles, one replay of that kernel per
pass its metrics need. The fixed part and a pass's seconds are fitted to the runs this
machine made (each run keeps its ncu seconds and replay passes: ``measure.Measured.ncu_cost``);
before it has made enough, the figures recorded on the H200 stand in, and the answer says
which it used. A section's passes are those of the section alone (ncu 2025.3.1 on an H100:
``bench/results/section-costs/2026-12-06-h100-80gb-hbm3-1f031cd.json``); sections share
passes, so their sum overestimates a run of several: a plan that fits by it fits.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.engine.store.retention import run_folders

# Replay passes of one kernel with the section alone beside the time metric (ncu 2025.3.1 on
# an H100, bench/section_costs.py: results.derived.sections.<name>.passes of
# bench/results/section-costs/2026-12-06-h100-80gb-hbm3-1f031cd.json). A section not listed
# counts as UNLISTED.
SECTION_PASSES = {
    "SpeedOfLight": 10,
    "LaunchStats": 1,
    "Occupancy": 1,
    "SpeedOfLight_RooflineChart": 3,
    "SpeedOfLight_HierarchicalTensorRooflineChart": 8,
    "SourceCounters": 5,
    "MemoryWorkloadAnalysis_Tables": 30,
    "WarpStateStats": 9,
    "InstructionStats": 3,
    "ComputeWorkloadAnalysis": 11,
}
UNLISTED_PASSES = 10
# A few named counters beside the sections: one pass per this many (the memory tables'
# ten counters are not one pass, nor thirty).
METRICS_PER_PASS = 4

# What stands in until this machine has runs of its own: a cold ncu run of a small torch job,
# and a replay pass of one kernel, whose cost grows with the kernel's size (the figure here is
# for a larger kernel than the probe's). bench/section_costs.py measures both; on an H100 a
# pass of one kernel of 2^20 floats costs 0.046 s (results.derived.s_per_kernel_pass of
# bench/results/section-costs/2026-12-06-h100-80gb-hbm3-1f031cd.json).
RECORDED_START_S = 5.6
RECORDED_PASS_S = 0.08
FIT_RUNS = 30  # the newest runs the fit reads
FIT_MIN_RUNS = 3


class PassCost(BaseModel):
    """What one ncu run costs here: start_s + kernels x passes x pass_s."""

    start_s: float = Field(description="Fixed seconds of one ncu run: start or attach, report")
    pass_s: float = Field(description="Seconds of one replay pass of one kernel")
    basis: str = Field(description="Measured here (how many runs) or recorded on the H200")


RECORDED = PassCost(
    start_s=RECORDED_START_S,
    pass_s=RECORDED_PASS_S,
    basis="recorded on an H200 with ncu 2025.3.1 (no runs measured here yet)",
)


def _points(runs_root: Path) -> list[tuple[float, float]]:
    """(replay passes, ncu seconds) of the newest runs that kept them."""
    points = []
    for folder in run_folders(runs_root)[:FIT_RUNS]:
        try:
            facts = RunFacts.from_stored(json.loads((folder / "result.json").read_text()))
        except (OSError, ValueError, AttributeError):
            continue
        passes, seconds = facts.ncu_passes, facts.ncu_s
        if passes is not None and seconds is not None and passes > 0:
            points.append((passes, seconds))
    return points


def measured(runs_root: Path | None) -> PassCost | None:
    """A least-squares line through this machine's runs (seconds against replay passes), or
    None while there are too few runs, too few distinct pass counts or a line that makes no
    sense (a negative start or pass)."""
    points = _points(runs_root) if runs_root is not None else []
    if len(points) < FIT_MIN_RUNS or len({p for p, _ in points}) < 2:
        return None
    xs, ys = [p for p, _ in points], [s for _, s in points]
    slope, intercept = statistics.linear_regression(xs, ys)
    if slope <= 0 or intercept <= 0:
        return None
    return PassCost(
        start_s=round(intercept, 2),
        pass_s=round(slope, 4),
        basis=f"measured here: the newest {len(points)} ncu runs",
    )


def pass_cost(runs_root: Path | None) -> PassCost:
    return measured(runs_root) or RECORDED


def passes_of(sections: Sequence[str], metrics: int = 1) -> int:
    """Replay passes of one kernel for ``sections`` and ``metrics`` named counters (upper
    bound: each section's passes alone, summed)."""
    named = -(-max(metrics, 1) // METRICS_PER_PASS)
    return named + sum(SECTION_PASSES.get(s, UNLISTED_PASSES) for s in sections)


def estimate_s(cost: PassCost, kernels: int, sections: Sequence[str], metrics: int = 1) -> float:
    return cost.start_s + max(kernels, 1) * passes_of(sections, metrics) * cost.pass_s


class BudgetPlan(BaseModel):
    """The sections that fit a budget, and what was left out to fit it."""

    budget_s: float
    kept: list[str]
    left_out: list[str] = Field(default_factory=list)
    estimate_s: float = Field(description="Estimated seconds of the run as planned")
    full_s: float = Field(description="Estimated seconds with every section asked for")
    basis: str

    def line(self) -> str:
        """One line for an answer: the plan, what it left out and what that would cost."""
        said = f"budget {self.budget_s:g} s: est. {self.estimate_s:.1f} s ({self.basis})"
        if not self.left_out:
            if self.estimate_s > self.budget_s:
                return f"{said}; over it, with nothing left to leave out"
            return said
        extra = self.full_s - self.estimate_s
        return f"{said}; left out {', '.join(self.left_out)} (est. +{extra:.1f} s)"


def fit(
    sections: Sequence[str],
    budget_s: float,
    cost: PassCost,
    kernels: int = 1,
    metrics: int = 1,
    keep: int = 1,
) -> BudgetPlan:
    """Keep ``sections`` in the order given (most needed first) while the estimate stays
    within ``budget_s``; the first ``keep`` always stay (a run needs something to read)."""
    kept = list(sections[:keep])
    left_out = []
    for s in sections[keep:]:
        if estimate_s(cost, kernels, [*kept, s], metrics) <= budget_s:
            kept.append(s)
        else:
            left_out.append(s)
    return BudgetPlan(
        budget_s=budget_s,
        kept=kept,
        left_out=left_out,
        estimate_s=round(estimate_s(cost, kernels, kept, metrics), 2),
        full_s=round(estimate_s(cost, kernels, sections, metrics), 2),
        basis=cost.basis,
    )
