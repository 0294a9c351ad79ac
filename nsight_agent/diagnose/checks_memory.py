"""Cause checks of the memory system: coalescing, bank conflicts, spills, bytes, atomics, latency.

Each check is a pure function of a ``Context``; docs/DIAGNOSIS.md gives the formulas.
"""

from __future__ import annotations

from nsight_agent.diagnose.cause import Cause, Context, ev, make_cause
from nsight_agent.diagnose.metrics import DRAM_BYTES, L1_THROUGHPUT, MEM_THROUGHPUT

GLD_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
GST_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"
GLD_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
GST_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"
GLD_NEEDED = "smsp__sass_data_bytes_mem_global_op_ld.sum"
GST_NEEDED = "smsp__sass_data_bytes_mem_global_op_st.sum"
SHARED_CONFLICTS = (
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
)
SHARED_WAVEFRONTS = (
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
)
SHARED_INST = (
    "smsp__sass_inst_executed_op_shared_ld.sum",
    "smsp__sass_inst_executed_op_shared_st.sum",
)
LOCAL_BYTES = (
    "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",
    "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",
)
GLOBAL_BYTES = (
    "l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum",
)
LOCAL_INST = (
    "smsp__sass_inst_executed_op_local_ld.sum",
    "smsp__sass_inst_executed_op_local_st.sum",
)
GLOBAL_INST = "smsp__sass_inst_executed_op_global.sum"
ATOMIC_INST = (
    "smsp__sass_inst_executed_op_global_atom.sum",
    "smsp__sass_inst_executed_op_global_red.sum",
)
# The same counts from the non-SASS counters (collected by InstructionStats-free sections).
ATOMIC_INST_HW = (
    "smsp__inst_executed_op_global_red.sum",
    "smsp__inst_executed_op_generic_atom_dot_alu.sum",
    "smsp__inst_executed_op_generic_atom_dot_cas.sum",
)
GLOBAL_LD_ST = (
    ("smsp__sass_inst_executed_op_global_ld.sum", "smsp__inst_executed_op_global_ld.sum"),
    ("smsp__sass_inst_executed_op_global_st.sum", "smsp__inst_executed_op_global_st.sum"),
)
L2_ATOMIC = "lts__d_atomic_input_cycles_active.{}.pct_of_peak_sustained_elapsed"
DRAM_RW = ("dram__bytes_read.sum", "dram__bytes_write.sum")
STALL_LONG_SB = "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
WARPS_PER_ISSUE = "smsp__average_warps_active_per_issue_active.ratio"

# What these checks read that ncu's MemoryWorkloadAnalysis_Tables section holds, by name: the
# section takes 30 replay passes alone, all ten sections of the one pass 34, on an H100
# (bench/results/section-costs/2026-12-06-h100-80gb-hbm3-1f031cd.json), and its one rule the
# checks consult (SharedMemoryConflicts) changes no planted kernel's top cause when absent.
# Not LOCAL_BYTES or GLOBAL_BYTES: the section never held them, and present they would move
# the spill check off the instruction counts it was tested on (diagnose/by_name.py).
TABLE_METRICS = (
    GLD_SECTORS, GST_SECTORS, GLD_REQUESTS, GST_REQUESTS, *SHARED_CONFLICTS, *SHARED_WAVEFRONTS,
    L2_ATOMIC.format("avg"), L2_ATOMIC.format("max"),
)  # fmt: skip
UNCOALESCED_RULES = ("UncoalescedGlobalAccess",)
BANK_RULES = ("SharedMemoryConflicts", "UncoalescedSharedAccess")


def _mem_busy(ctx: Context) -> float:
    """The busiest memory unit, % of peak (50 when not collected)."""
    m = ctx.num(MEM_THROUGHPUT)
    return m if m is not None else 50.0


def uncoalesced_global_access(ctx: Context) -> Cause | None:
    sectors = ctx.total(GLD_SECTORS, GST_SECTORS)
    needed = ctx.total(GLD_NEEDED, GST_NEEDED)
    requests = ctx.total(GLD_REQUESTS, GST_REQUESTS)
    if not sectors:
        return None
    per_request = sectors / requests if requests else None
    t = ctx.t
    evidence = []
    if needed:
        ideal = needed / 32.0
        excess = max(0.0, 1.0 - ideal / sectors) * 100.0
        if excess < t.uncoalesced_excess_pct:
            return None
        evidence = [
            ev("excess global sectors", excess, "%", ">=", t.uncoalesced_excess_pct),
            ev("l1tex__t_sectors_pipe_lsu_mem_global_op_{ld,st}.sum", sectors, "sector"),
            ev("smsp__sass_data_bytes_mem_global_op_{ld,st}.sum / 32", ideal, "sector"),
        ]
    elif per_request is not None and per_request > t.uncoalesced_sectors_per_request:
        excess = (1.0 - t.uncoalesced_sectors_per_request / per_request) * 100.0
    else:
        return None
    if per_request is not None:
        evidence.append(
            ev("global sectors/request", per_request, None, ">", t.uncoalesced_sectors_per_request)
            if not needed
            else ev("global sectors/request", per_request)
        )
    busy = _mem_busy(ctx)
    evidence.append(ev("memory SOL", busy, "%"))
    return make_cause(
        "uncoalesced_global_access",
        evidence,
        own_gain=excess * busy / 100.0,
        own_formula="excess sectors x mem%",
        rule=ctx.rule(UNCOALESCED_RULES),
    )


def shared_bank_conflicts(ctx: Context) -> Cause | None:
    conflicts = ctx.total(*SHARED_CONFLICTS)
    wavefronts = ctx.total(*SHARED_WAVEFRONTS)
    if not conflicts or not wavefronts:
        return None
    share = 100.0 * conflicts / wavefronts
    if share < ctx.t.bank_conflict_pct:
        return None
    evidence = [
        ev("bank-conflict wavefronts", share, "%", ">=", ctx.t.bank_conflict_pct),
        ev("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}.sum", conflicts),
    ]
    inst = ctx.total(*SHARED_INST)
    if inst:
        evidence.append(ev("shared wavefronts/instruction", wavefronts / inst))
    l1 = ctx.num(L1_THROUGHPUT)
    busy = l1 if l1 is not None else _mem_busy(ctx)
    evidence.append(ev("L1 busy" if l1 is not None else "memory SOL", busy, "%"))
    return make_cause(
        "shared_bank_conflicts",
        evidence,
        own_gain=share * busy / 100.0,
        own_formula="conflicts x L1%",
        rule=ctx.rule(BANK_RULES),
    )


def local_memory_spills(ctx: Context) -> Cause | None:
    local = ctx.total(*LOCAL_BYTES)
    other = ctx.total(*GLOBAL_BYTES)
    name = "l1tex__t_bytes_pipe_lsu_mem_local_op_{ld,st}.sum"
    unit: str | None = "byte"
    if local is None:
        local, other = ctx.total(*LOCAL_INST), ctx.num(GLOBAL_INST)
        name, unit = "smsp__sass_inst_executed_op_local_{ld,st}.sum", "inst"
    if not local:
        return None
    share = 100.0 * local / (local + (other or 0.0))
    if share < ctx.t.spill_share_pct:
        return None
    busy = _mem_busy(ctx)
    evidence = [
        ev("local share of L1 traffic", share, "%", ">=", ctx.t.spill_share_pct),
        ev(name, local, unit),
        ev("memory SOL", busy, "%"),
    ]
    return make_cause(
        "local_memory_spills",
        evidence,
        own_gain=share * busy / 100.0,
        own_formula="local share x mem%",
    )


def dram_bytes(ctx: Context) -> float | None:
    moved = ctx.total(*DRAM_RW)
    if moved is None:
        moved = ctx.num(DRAM_BYTES)
    return moved if moved is not None else ctx.rl.dram_bytes


def excess_dram_traffic(ctx: Context) -> Cause | None:
    ideal = ctx.ideal_bytes
    moved = dram_bytes(ctx)
    if not ideal or not moved:
        return None
    ratio = moved / ideal
    if ratio < ctx.t.excess_bytes_ratio:
        return None
    weight = max(ctx.bound.dram_pct or 0.0, _mem_busy(ctx))
    evidence = [
        ev("DRAM bytes / ideal bytes", ratio, "x", ">=", ctx.t.excess_bytes_ratio),
        ev("dram__bytes_{read,write}.sum", moved, "byte"),
        ev("ideal_bytes (caller)", ideal, "byte"),
        ev("DRAM % of peak", ctx.bound.dram_pct or 0.0, "%"),
    ]
    return make_cause(
        "excess_dram_traffic",
        evidence,
        own_gain=(1.0 - 1.0 / ratio) * weight,
        own_formula="(1-ideal/moved) x mem%",
    )


def _global_instructions(ctx: Context, atomics: float) -> float | None:
    total = ctx.num(GLOBAL_INST)
    if total is not None:
        return total
    parts = [ctx.total(*names) for names in GLOBAL_LD_ST]
    return atomics + sum(p for p in parts if p is not None)


def atomic_contention(ctx: Context) -> Cause | None:
    atomics = ctx.total(*ATOMIC_INST)
    if atomics is None:
        atomics = ctx.total(*ATOMIC_INST_HW)
    if not atomics:
        return None
    global_inst = _global_instructions(ctx, atomics)
    if not global_inst:
        return None
    share = 100.0 * atomics / global_inst
    t = ctx.t
    busiest = max(ctx.bound.compute_pct or 0.0, ctx.bound.memory_pct or 0.0)
    if share < t.atomic_share_pct or busiest >= t.latency_bound_below_pct:
        return None  # plentiful atomics at high throughput are traffic, not contention
    evidence = [
        ev("atomic share of global instructions", share, "%", ">=", t.atomic_share_pct),
        ev("global atomic/reduction instructions", atomics, "inst"),
        ev("max(SM, memory) SOL", busiest, "%", "<", t.latency_bound_below_pct),
    ]
    hot, mean = ctx.num(L2_ATOMIC.format("max")), ctx.num(L2_ATOMIC.format("avg"))
    if hot is not None and mean:
        evidence.append(ev("L2 atomic unit: busiest slice / mean", hot / mean, "x"))
    return make_cause(
        "atomic_contention",
        evidence,
        own_gain=share * (1.0 - busiest / 100.0),
        own_formula="atomics x idle",
    )


def memory_latency(ctx: Context) -> Cause | None:
    """Residual cause: called only when no specific cause explains a latency-bound kernel."""
    b, t = ctx.bound, ctx.t
    if b.bound != "latency-bound":
        return None
    stalled = ctx.num(STALL_LONG_SB)
    per_issue = ctx.num(WARPS_PER_ISSUE)
    share = 100.0 * stalled / per_issue if stalled is not None and per_issue else None
    if share is not None and share < t.latency_stall_pct:
        return None
    if share is None and (b.memory_pct or 0.0) < (b.compute_pct or 0.0):
        return None
    busy = max(b.memory_pct or 0.0, b.dram_pct or 0.0)
    evidence = [
        ev(
            "max(SM, memory) SOL",
            max(b.compute_pct or 0.0, busy),
            "%",
            "<",
            t.latency_bound_below_pct,
        )
    ]
    if share is not None:
        evidence.append(
            ev("long-scoreboard share of stalls", share, "%", ">=", t.latency_stall_pct)
        )
    return make_cause(
        "memory_latency",
        evidence,
        own_gain=100.0 * (1.0 - busy / t.dram_roof_pct) if busy < t.dram_roof_pct else 0.0,
        own_formula="1 - mem%/DRAM roof",
    )


def dram_at_roof(ctx: Context) -> Cause | None:
    b = ctx.bound
    if b.roof != "dram" or b.dram_pct is None:
        return None
    evidence = [ev("DRAM % of peak", b.dram_pct, "%", ">=", ctx.t.dram_roof_pct)]
    moved = dram_bytes(ctx)
    if moved:
        evidence.append(ev("dram__bytes_{read,write}.sum", moved, "byte"))
    if moved and ctx.ideal_bytes:
        evidence.append(ev("DRAM bytes / ideal bytes", moved / ctx.ideal_bytes, "x"))
    return make_cause(
        "dram_at_roof",
        evidence,
        own_gain=None,
        own_formula="",
        note=f"at {b.dram_pct:.0f}% of the DRAM roof: only moving fewer bytes helps",
    )
