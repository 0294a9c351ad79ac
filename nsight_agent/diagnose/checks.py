"""The cause checks, in one registry, and how ncu's rules map onto the cause vocabulary.

``run_checks`` calls every check on one kernel's ``Context`` and returns what fired, and which
causes were looked at and declined: their check read every metric it asked for and did not
fire, or fired under ``min_gain_pct``. ncu's rule for a declined cause is not passed through
(``kernel._from_ncu``): our measurement answered it (ncu's Tail Effect estimate is
``100 / ceil(waves)`` however full the last wave). The memory latency check is a residual: it
runs only when no specific cause fired. ``SYMPTOM_RULES`` are
ncu rules that describe a symptom (a unit's utilisation, stall reasons, achieved occupancy, the
bound itself): they are folded into the top cause rather than listed above it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from nsight_agent.diagnose import checks_compute as cc
from nsight_agent.diagnose import checks_launch as cl
from nsight_agent.diagnose import checks_memory as cm
from nsight_agent.diagnose.cause import Cause, Context
from nsight_agent.diagnose.findings import Finding
from nsight_agent.diagnose.thresholds import DiagnosisThresholds
from nsight_agent.diagnose.vocabulary import CauseId

Check = Callable[[Context], Cause | None]

CHECKS: tuple[Check, ...] = (
    cm.uncoalesced_global_access,
    cm.shared_bank_conflicts,
    cm.local_memory_spills,
    cm.excess_dram_traffic,
    cm.atomic_contention,
    cc.warp_divergence,
    cc.tensor_cores_idle,
    cc.slow_precision,
    cl.too_few_blocks,
    cl.tail_effect,
    cl.occupancy,
    cl.launch_bound_tiny,
    cm.dram_at_roof,
    cc.compute_at_roof,
    cc.pipe_at_roof,
)
RESIDUAL: tuple[Check, ...] = (cm.memory_latency,)
# The causes a check may name, where that is not the one its own name spells.
NAMES: dict[Check, tuple[CauseId, ...]] = {
    cl.occupancy: ("occupancy_registers", "occupancy_shared_memory", "occupancy_block_size"),
}

# ncu rule id -> the causes it may stand for (the first that fired absorbs it).
RULE_CAUSES: dict[str, tuple[CauseId, ...]] = {
    "UncoalescedGlobalAccess": ("uncoalesced_global_access",),
    "UncoalescedSharedAccess": ("shared_bank_conflicts",),
    "SharedMemoryConflicts": ("shared_bank_conflicts",),
    "MemoryCacheAccessPattern": (
        "uncoalesced_global_access",
        "shared_bank_conflicts",
        "excess_dram_traffic",
    ),
    "ThreadDivergence": ("warp_divergence",),
    "TheoreticalOccupancy": (
        "occupancy_registers",
        "occupancy_shared_memory",
        "occupancy_block_size",
    ),
    # FPInstructions is not here: its titles ("FP32/FP64 Non-Fused Instructions") count FADD
    # and FMUL that could be one FFMA, which is neither a precision nor a tensor-core cause
    # (mapped so, it called ATen's fp32 elementwise kernels "a slower precision than needed").
}
# LaunchConfiguration says several things; its message title names which.
LAUNCH_TITLES: dict[str, CauseId] = {
    "small grid": "too_few_blocks",
    "tail effect": "tail_effect",
    "block size": "occupancy_block_size",
}
SYMPTOM_RULES = frozenset(
    {
        "SOLBottleneck",
        "SOLFPRoofline",
        "HighPipeUtilization",
        "IssueSlotUtilization",
        "AchievedOccupancy",
        "SlowPipeLimiter",
    }
)
# A cause relieves a roof when fixing it means less of the work that roof limits.
RELIEVES: dict[CauseId, tuple[CauseId, ...]] = {
    "dram_at_roof": (
        "uncoalesced_global_access",
        "excess_dram_traffic",
        "local_memory_spills",
        "slow_precision",
    ),
    "compute_at_roof": ("tensor_cores_idle", "slow_precision", "warp_divergence"),
    # Idle lanes still issue; conflicting shared accesses replay on the LSU; fp64 in a float
    # kernel brings F2F conversions, which issue on the XU. The pipe's rate is over the SMs'
    # active cycles: SMs idle in a partial last wave or a short grid add to it.
    # An MMA replaces a matmul's per-product instructions: their operand loads and shuffles
    # (LSU), index math and conversions (ALU, XU) go with them.
    "pipe_at_roof": (
        "tensor_cores_idle",
        "warp_divergence",
        "slow_precision",
        "shared_bank_conflicts",
        "atomic_contention",
        "tail_effect",
        "too_few_blocks",
    ),
}
# A cause whose fix rewrites the code another cause's evidence comes from ranks above it when
# both fire, whatever their gains. Moving a matmul's products to tensor cores (tl.dot,
# mma/wgmma) replaces its operand feed (2D tiles staged through shared memory in an MMA
# layout), so the feed's memory symptoms go with it: fixing them first tunes code the fix
# removes, and their estimates (ncu's, capped at 99 % like the tensor gain) cannot say so.
OUTRANKS: dict[CauseId, tuple[CauseId, ...]] = {
    "tensor_cores_idle": (
        "uncoalesced_global_access",
        "shared_bank_conflicts",
        "excess_dram_traffic",
    ),
}
# Broader causes folded into a more specific one when both fire (their evidence is kept).
FOLDS: dict[CauseId, tuple[CauseId, ...]] = {
    "excess_dram_traffic": ("uncoalesced_global_access", "local_memory_spills"),
    # A kernel that is all launch cost has no occupancy worth tuning.
    "occupancy_registers": ("launch_bound_tiny",),
    "occupancy_shared_memory": ("launch_bound_tiny",),
    "occupancy_block_size": ("launch_bound_tiny",),
}


def is_symptom(rule_id: str) -> bool:
    return rule_id in SYMPTOM_RULES or rule_id.startswith("CPIStall")


def causes_of(finding: Finding) -> tuple[CauseId, ...]:
    """The causes one ncu rule result may stand for (empty when none)."""
    if finding.rule_id == "LaunchConfiguration":
        title = finding.title.lower()
        return tuple(c for key, c in LAUNCH_TITLES.items() if key in title)
    return RULE_CAUSES.get(finding.rule_id, ())


def fallback_of(finding: Finding) -> tuple[CauseId, ...]:
    """Symptom rules with an unambiguous cause, used only when no check of ours fired."""
    if finding.rule_id == "CPIStall" and "long scoreboard" in finding.title.lower():
        return ("memory_latency",)
    return ()


def is_ranked_defect(cause: Cause, t: DiagnosisThresholds) -> bool:
    """A defect (not a roof) whose estimated gain is worth ranking (``min_gain_pct``)."""
    return cause.kind is None and (cause.gain or 0.0) >= t.min_gain_pct


def by_precedence(causes: list[Cause]) -> list[Cause]:
    """``causes`` (ranked by gain) with each cause that ``OUTRANKS`` others moved above the
    first of them; the rest keep their order."""
    out = list(causes)
    for first in [c for c in causes if c.id in OUTRANKS]:
        below = [i for i, c in enumerate(out) if c.id in OUTRANKS[first.id]]
        at = out.index(first)
        if below and below[0] < at:
            out.insert(below[0], out.pop(at))
    return out


def names_of(check: Check) -> tuple[CauseId, ...]:
    return NAMES.get(check, (cast(CauseId, check.__name__),))


@dataclass
class Checked:
    """What the checks found: the causes that fired (unranked) and the causes declined."""

    fired: list[Cause]
    declined: frozenset[CauseId]


def run_checks(ctx: Context) -> Checked:
    """Every check on this kernel; the residual only when no specific cause fired. Nothing is
    declined when the bound is unknown: the checks then read fallbacks, not measurements."""
    fired: list[Cause] = []
    declined: set[CauseId] = set()

    def run(checks: tuple[Check, ...]) -> None:
        for check in checks:
            ctx.missing.clear()
            cause = check(ctx)
            if cause is not None:
                fired.append(cause)
                if cause.kind is None and not is_ranked_defect(cause, ctx.t):
                    declined.add(cause.id)
            elif not ctx.missing:
                declined.update(names_of(check))

    run(CHECKS)
    if not any(is_ranked_defect(c, ctx.t) for c in fired):
        run(RESIDUAL)
    known = ctx.bound.bound != "unknown"
    return Checked(fired, frozenset(declined) if known else frozenset())
