"""Cause checks of the launch: grid size, waves, occupancy limiters, tiny kernels.

Each check is a pure function of a ``Context``; docs/DIAGNOSIS.md gives the formulas.
"""

from __future__ import annotations

import math

from nsight_agent.diagnose.cause import Cause, Context, ev, make_cause
from nsight_agent.diagnose.metrics import DURATION, WAVES
from nsight_agent.diagnose.vocabulary import CauseId

GRID = "launch__grid_size"
BLOCK = "launch__block_size"
SMS = "device__attribute_multiprocessor_count"
MAX_WARPS = "device__attribute_max_warps_per_multiprocessor"
THEORETICAL_OCC = "sm__maximum_warps_per_active_cycle_pct"
ACHIEVED_OCC = "sm__warps_active.avg.pct_of_peak_sustained_active"
# Blocks per SM each resource allows -> the cause it names. Ties go to the first: the block
# cap is fixed hardware, registers are chosen by the compiler, and the shared-memory carveout
# follows what the kernel asks for (an empty kernel still reserves 1 KB a block for the driver).
LIMITS: dict[str, CauseId] = {
    "launch__occupancy_limit_blocks": "occupancy_block_size",
    "launch__occupancy_limit_warps": "occupancy_block_size",
    "launch__occupancy_limit_registers": "occupancy_registers",
    "launch__occupancy_limit_shared_mem": "occupancy_shared_memory",
}
DETAIL = {
    "occupancy_registers": ("launch__registers_per_thread", "register/thread"),
    "occupancy_shared_memory": ("launch__shared_mem_per_block", "byte/block"),
    "occupancy_block_size": (BLOCK, "thread"),
}
LAUNCH_RULES = ("LaunchConfiguration",)
OCCUPANCY_RULES = ("TheoreticalOccupancy",)


def _tiny(ctx: Context) -> bool:
    duration = ctx.num(DURATION)
    return duration is not None and duration <= ctx.t.tiny_duration_us * 1e3


def _idle(ctx: Context) -> float:
    """Share of the busiest unit's capacity left idle, 0-1."""
    busiest = max(ctx.bound.compute_pct or 0.0, ctx.bound.memory_pct or 0.0)
    return max(0.0, 1.0 - busiest / 100.0)


def too_few_blocks(ctx: Context) -> Cause | None:
    """Fewer blocks than SMs, or fewer than one resident wave: a grid of 2x the SMs that could
    hold 8 blocks each still leaves three quarters of every SM's warp slots empty."""
    grid, sms, waves = ctx.num(GRID), ctx.num(SMS), ctx.num(WAVES)
    if grid is None or sms is None or _tiny(ctx):
        return None
    t = ctx.t
    if grid < sms:
        evidence = [ev(GRID, grid, "block", "<", sms), ev(SMS, sms, "SM")]
        gain = 100.0 * (sms - grid) / sms
        formula = "idle SMs"
    elif waves is not None and waves < t.few_waves and _idle(ctx) > 1.0 - t.dram_roof_pct / 100:
        # Under one resident wave, unless a unit is already near its peak (more blocks
        # would only queue on it).
        evidence = [ev(WAVES, waves, None, "<", t.few_waves), ev(GRID, grid, "block")]
        achieved = ctx.num(ACHIEVED_OCC)
        if achieved is not None:
            evidence.append(ev(ACHIEVED_OCC, achieved, "%"))
        gain = 100.0 * (1.0 - waves) * _idle(ctx)
        formula = "(1-waves) x idle"
    else:
        return None
    if waves is not None and grid < sms:
        evidence.append(ev(WAVES, waves))
    return make_cause(
        "too_few_blocks", evidence, gain, formula, rule=ctx.rule(LAUNCH_RULES, "Small Grid")
    )


def tail_effect(ctx: Context) -> Cause | None:
    waves = ctx.num(WAVES)
    if waves is None or waves < 1.0 or _tiny(ctx):
        return None
    rounded = math.ceil(waves)
    idle = 100.0 * (rounded - waves) / rounded
    if idle < ctx.t.tail_idle_pct:
        return None
    evidence = [
        ev("SM time idle in the partial last wave", idle, "%", ">=", ctx.t.tail_idle_pct),
        ev(WAVES, waves),
    ]
    grid = ctx.num(GRID)
    if grid is not None:
        evidence.append(ev(GRID, grid, "block"))
    # Our own share, not ncu's: its Tail Effect estimate is the partial wave's share of the
    # run (100 / ceil(waves)) however full that wave is: "up to 50 %" at 1.94 waves, where 3 %
    # of the SM time idles (the H200's barrier probe). ncu's rule is still absorbed here.
    cause = make_cause("tail_effect", evidence, idle, "partial-wave idle")
    rule = ctx.rule(LAUNCH_RULES, "Tail Effect")
    if rule is not None:
        cause.rules = [rule.rule_id]
    return cause


def _block_size_cause(ctx: Context, block: float) -> Cause | None:
    warps = math.ceil(block / 32.0)
    lanes = block % 32
    if lanes == 0 or warps == 0:
        return None
    gain = 100.0 / warps * (1.0 - lanes / 32.0)
    evidence = [ev(BLOCK, block, "thread"), ev("idle lanes in the last warp", 32 - lanes)]
    return make_cause(
        "occupancy_block_size",
        evidence,
        gain,
        "idle lanes/warps",
        rule=ctx.rule(LAUNCH_RULES, "Block Size"),
        note="block size is not a multiple of 32",
    )


def occupancy(ctx: Context) -> Cause | None:
    """Theoretical occupancy held low by one resource: registers, shared memory or block size."""
    theo = ctx.num(THEORETICAL_OCC)
    block = ctx.num(BLOCK)
    limits = {name: v for name in LIMITS if (v := ctx.num(name)) is not None}
    if theo is None or block is None or not limits or theo > ctx.t.occupancy_low_pct:
        return _block_size_cause(ctx, block) if block is not None else None
    binding = min(limits.values())
    limiter = next(name for name, v in limits.items() if v == binding)
    others = [v for v in limits.values() if v > binding]
    max_warps = ctx.num(MAX_WARPS) or 64.0
    block_warps = math.ceil(block / 32.0)
    potential = theo  # no other limit is looser: lifting this one gains nothing
    if others:
        potential = 100.0 * min(min(others) * block_warps, max_warps) / max_warps
    if potential <= theo:
        return None
    cause_id = LIMITS[limiter]
    detail_name, detail_unit = DETAIL[cause_id]
    evidence = [
        ev(THEORETICAL_OCC, theo, "%", "<=", ctx.t.occupancy_low_pct),
        ev(limiter, binding, "block/SM"),
    ]
    detail = ctx.num(detail_name)
    if detail is not None:
        evidence.append(ev(detail_name, detail, detail_unit))
    achieved = ctx.num(ACHIEVED_OCC)
    if achieved is not None:
        evidence.append(ev(ACHIEVED_OCC, achieved, "%"))
    gain = 100.0 * (1.0 - theo / potential) * _idle(ctx)
    return make_cause(
        cause_id,
        evidence,
        gain,
        "occupancy gap x idle",
        rule=ctx.rule(OCCUPANCY_RULES),
        note=f"occupancy {potential:.0f}% without this limit",
    )


def launch_bound_tiny(ctx: Context) -> Cause | None:
    duration = ctx.num(DURATION)
    if duration is None or not _tiny(ctx):
        return None
    waves, grid, sms = ctx.num(WAVES), ctx.num(GRID), ctx.num(SMS)
    if waves is not None and waves > 1.0:
        return None  # a full GPU's worth of blocks: a short kernel, but not a tiny grid
    if waves is None and grid is not None and sms is not None and grid > 2 * sms:
        return None
    overhead = ctx.t.launch_overhead_us * 1e3
    evidence = [ev(DURATION, duration, "ns", "<=", ctx.t.tiny_duration_us * 1e3)]
    if grid is not None:
        evidence.append(ev(GRID, grid, "block"))
    if waves is not None:
        evidence.append(ev(WAVES, waves, None, "<=", 1.0))
    return make_cause(
        "launch_bound_tiny",
        evidence,
        100.0 * overhead / (overhead + duration),
        "launch/(launch+duration)",
    )
