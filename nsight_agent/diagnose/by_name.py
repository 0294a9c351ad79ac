"""The counters the checks read, for asking ncu by name instead of the sections that hold them.

A section collects every counter of its tables and charts and runs its rules; the checks read a
few of them. Five sections serve the diagnosis only through counters (the memory tables, warp
state, the instruction mix, the compute pipes and the tensor roofline): asked for by name, what
the checks read replaces their replay passes (on an H100 the memory tables take 30 replay
passes alone, all ten sections at once 34:
``bench/results/section-costs/2026-12-06-h100-80gb-hbm3-1f031cd.json``). The cheap four keep
their sections (their rules give the bound's findings), and so does SourceCounters
(per-instruction values, from patched SASS and warp sampling, which no counter name asks for).

``COUNTERS`` is every counter the checks read that a report of those sections holds (of the
sections the one pass collects: not the half-precision roofline), and no other: a counter the
sections never held (a fallback's first choice, such as
``smsp__sass_inst_executed_op_global.sum``) asked for by name would move a check onto a branch
the planted kernels never tested. tests/test_diagnose_by_name.py holds the list to what the
diagnosis reads from the planted H200 reports, and the answers without those sections' rules to
the answers with them.
"""

from __future__ import annotations

from nsight_agent.diagnose import checks_compute as cc
from nsight_agent.diagnose import checks_launch as cl
from nsight_agent.diagnose import checks_memory as cm
from nsight_agent.diagnose import metrics as dm
from nsight_agent.diagnose.bound import FMA_PIPE, FP64_PIPE, TENSOR_MIX

# The sections whose counters go by name (the cheap four and SourceCounters stay sections).
BY_NAME_SECTIONS = (
    "MemoryWorkloadAnalysis_Tables",
    "WarpStateStats",
    "InstructionStats",
    "ComputeWorkloadAnalysis",
    dm.TENSOR_SECTION,
)
# bound_metrics() names no section report held (read only as fallbacks, or not at all).
_NOT_HELD = {
    dm.DRAM_BYTES,
    dm.GPC_CLOCK,
    dm.ELAPSED_CYCLES,
    dm.L2_THROUGHPUT,
    dm.SM_ACTIVE_CYCLES,
}
# Sections the one pass never collects: their counters by name would give the checks what the
# sections never did. Asked for by name, the half-precision roofline's counters cost two planted
# fp16-in, fp32-math matmuls their idle tensor cores (H200): half adds, likely
# the operands' conversions to fp32, dilute the MAC share under the check's threshold.
NOT_IN_ONE_PASS = (dm.HALF_SECTION,)
_PIPES = ("adu", "alu", "cbu", "lsu", "uniform", "xu")

COUNTERS: tuple[str, ...] = tuple(
    dict.fromkeys(
        [
            # the bound and the rooflines (SpeedOfLight, the roofline charts)
            *(
                m
                for m in dm.bound_metrics()
                if m not in _NOT_HELD and dm.SECTION_OF.get(m) not in NOT_IN_ONE_PASS
            ),
            *cm.DRAM_RW,
            # the memory tables
            *cm.TABLE_METRICS,
            # the instruction mix
            *cm.LOCAL_INST,
            *cm.SHARED_INST,
            *(sass for sass, _ in cm.GLOBAL_LD_ST),
            *cm.ATOMIC_INST_HW,
            # warp state and divergence
            cm.STALL_LONG_SB,
            cc.THREADS_PER_INST,
            cc.THREADS_PER_INST_PRED,
            # the pipes
            *(cc.PIPE_ISSUE.format(p) for p in _PIPES),
            FMA_PIPE,
            FP64_PIPE,
            # occupancy
            cl.THEORETICAL_OCC,
            cl.ACHIEVED_OCC,
            # tensor work by source precision (fp8's total is not held: its sparsity halves are)
            *(m for p, m in TENSOR_MIX.items() if p != "tensor_fp8"),
        ]
    )
)
