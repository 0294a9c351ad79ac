"""Every cut-off the cause diagnosis uses, in one model with its reasoning.

Defaults are set from the hardware's behaviour (H100/H200 class GPUs), not from any one kernel:
each description says why the number is where it is. Callers may pass their own.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class DiagnosisThresholds(BaseModel):
    """Cut-offs of the bound classification and of every cause check."""

    # --- bound -------------------------------------------------------------------------------
    latency_bound_below_pct: float = Field(
        default=60.0,
        description="SM and memory SOL throughput both under this % of peak: latency-bound "
        "(ncu's SOLBottleneck rule uses the same 60 %)",
    )
    close_within_pts: float = Field(
        default=10.0,
        description="SM and memory SOL within this many points: too close for SOL to decide; "
        "arithmetic intensity against the ridge point decides",
    )
    both_high_pct: float = Field(
        default=80.0,
        description="SM and memory SOL both at or above this: intensity vs ridge decides",
    )
    tensor_busy_pct: float = Field(
        default=50.0,
        description="Tensor pipe busy at least this % of cycles while tensor FLOP counters are "
        "absent: the kernel is tensor-core work, so a close call goes to compute",
    )
    dram_roof_pct: float = Field(
        default=80.0,
        description="DRAM bandwidth at or above this % of peak: at the DRAM roof (a plain copy "
        "stays under the nominal peak too, so 80 % is close to what is attainable)",
    )
    compute_roof_pct: float = Field(
        default=70.0,
        description="The precision's FLOP rate (or its pipe: tensor, FMA, FP64) at or above this "
        "% of peak: at the compute roof. Tensor GEMMs sustain 75-90 % of the dense peak at best "
        "(prologue/epilogue, wave quantisation), so 70 % is within about 20 % of attainable",
    )
    # --- ranking -----------------------------------------------------------------------------
    min_gain_pct: float = Field(
        default=3.0, description="Causes with a smaller estimated gain are dropped as noise"
    )
    max_causes: int = Field(default=3, description="Causes reported per kernel, best first")
    ncu_passthrough_pct: float = Field(
        default=20.0,
        description="When none of our checks names a cause, ncu's rules estimating at least "
        "this gain are passed through (never 'no cause found' beside a sizeable ncu estimate)",
    )
    local_unit_busy_pct: float = Field(
        default=50.0,
        description="A local ncu estimate about one FP unit (FPInstructions) is passed through "
        "only when that precision's FLOP rate is at least this % of its peak",
    )
    # --- memory checks -----------------------------------------------------------------------
    uncoalesced_excess_pct: float = Field(
        default=40.0,
        description="Global sectors beyond the ideal (bytes the threads asked for / 32 B) at or "
        "above this % of all sectors (1.67x the ideal): uncoalesced",
    )
    uncoalesced_sectors_per_request: float = Field(
        default=16.0,
        description="Without the ideal byte count: more global sectors per request than this "
        "is uncoalesced for any access width (a coalesced 16-byte-per-thread warp needs 16)",
    )
    bank_conflict_pct: float = Field(
        default=25.0,
        description="Shared-memory bank-conflict wavefronts at or above this % of all shared "
        "wavefronts: bank conflicts (a 2-way conflict on every access gives 50 %)",
    )
    spill_share_pct: float = Field(
        default=5.0,
        description="Local-memory bytes at or above this % of L1 global+local traffic: spills",
    )
    excess_bytes_ratio: float = Field(
        default=1.5,
        description="DRAM bytes at or above this multiple of the caller's ideal bytes: excess "
        "traffic (below 1.5x, cache-line granularity and L2 write-back noise dominate)",
    )
    atomic_share_pct: float = Field(
        default=20.0,
        description="Global atomic/reduction instructions at or above this % of global memory "
        "instructions while DRAM is under its roof: atomic contention",
    )
    latency_stall_pct: float = Field(
        default=40.0,
        description="Long-scoreboard stalls at or above this % of the cycles between issues: "
        "warps wait on memory (residual memory-latency cause)",
    )
    # --- compute checks ----------------------------------------------------------------------
    divergence_threads_below: float = Field(
        default=24.0,
        description="Average active threads per warp instruction under this (of 32): divergence",
    )
    tensor_idle_below_pct: float = Field(
        default=1.0, description="Tensor pipe under this % of cycles: tensor cores idle"
    )
    tensor_idle_fma_share_pct: float = Field(
        default=60.0,
        description="Multiply-accumulate FLOP (FMA, and MUL paired with ADD) at or above this % "
        "of the fp32/half FLOP: matmul-like arithmetic",
    )
    tensor_idle_min_intensity: float = Field(
        default=8.0,
        description="FLOP per DRAM byte at or above this: data reuse as in a matmul "
        "(elementwise kernels sit at 0.1-2 FLOP/B)",
    )
    tensor_idle_min_fp_pct: float = Field(
        default=5.0,
        description="fp32/half FLOP rate at or above this % of its peak: the FMA work matters",
    )
    tensor_idle_starved_intensity: float = Field(
        default=64.0,
        description="FLOP per DRAM byte at or above this: a matmul's reuse, whose FMAs are the "
        "work at any rate (a low one is its operand feed holding them back): "
        "tensor_idle_min_fp_pct does not apply",
    )
    tensor_idle_min_loads_per_fma: float = Field(
        default=0.02,
        description="Load instructions per FMA at or above this: operands stream from memory as "
        "in a matmul (register-only iterations such as fractals sit far lower)",
    )
    tensor_idle_min_memory_pct: float = Field(
        default=10.0,
        description="Memory SOL (L1/shared, L2, DRAM) at or above this %: operands stream "
        "through memory as in a matmul (register-only FMA loops sit near 0 %)",
    )
    fp64_share_pct: float = Field(
        default=50.0,
        description="FP64 FLOP at or above this % of all counted FLOP: fp64 dominates the mix",
    )
    # --- launch checks -----------------------------------------------------------------------
    occupancy_low_pct: float = Field(
        default=50.0,
        description="Theoretical occupancy at or under this % (half the warp slots): a limiter "
        "may starve latency hiding; the gain weighs it by how idle the busiest unit is",
    )
    few_waves: float = Field(
        default=1.0,
        description="Fewer resident waves than this (blocks / (SMs x blocks one SM holds)) "
        "while no roof is reached: too few blocks to fill every SM's warp slots",
    )
    tail_idle_pct: float = Field(
        default=20.0,
        description="SM time idle in the last partial wave at or above this % (uniform block "
        "times): tail effect",
    )
    tiny_duration_us: float = Field(
        default=5.0,
        description="Kernels at or under this duration are launch-bound: a launch costs a few us",
    )
    launch_overhead_us: float = Field(
        default=3.0,
        description="Launch cost assumed for the tiny-kernel gain estimate (CPU launch + ramp)",
    )
