"""Cause checks of the SM's arithmetic: divergence, idle tensor cores, fp64, the compute roof,
a non-FLOP pipe's roof.

Each check is a pure function of a ``Context``; docs/DIAGNOSIS.md gives the formulas.
"""

from __future__ import annotations

from nsight_agent.diagnose.bound import FP64_PIPE
from nsight_agent.diagnose.cause import Cause, Context, ev, make_cause
from nsight_agent.diagnose.metrics import TENSOR_PIPE
from nsight_agent.diagnose.roofline import PrecisionPoint

THREADS_PER_INST = "smsp__thread_inst_executed_per_inst_executed.ratio"
THREADS_PER_INST_PRED = "smsp__thread_inst_executed_pred_on_per_inst_executed.ratio"
FFMA_TOTAL = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"
HFMA_TOTAL = "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum"
LOAD_INST = (
    "smsp__sass_inst_executed_op_global_ld.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum",
)
DIVERGENCE_RULES = ("ThreadDivergence",)
# Dense TF32 tensor peak over FP32 FMA peak on Hopper (H100 SXM: 494.7 / 66.9 TFLOP/s).
TENSOR_OVER_FP32 = 7.4
_FP_OPS = {  # thread-instruction op -> FLOP per instruction (as ncu's roofline counts them)
    "fadd": 1.0,
    "fmul": 1.0,
    "ffma": 2.0,
    "hadd": 2.0,
    "hmul": 2.0,
    "hfma": 4.0,
}
_DTYPES_64 = ("float64", "fp64", "f64", "double", "complex128")


def _point(ctx: Context, precision: str) -> PrecisionPoint | None:
    return next((p for p in ctx.rl.precisions if p.precision == precision), None)


def _sm_busy(ctx: Context) -> float:
    return ctx.bound.compute_pct if ctx.bound.compute_pct is not None else 50.0


def warp_divergence(ctx: Context) -> Cause | None:
    threads = ctx.num(THREADS_PER_INST)
    if threads is None or threads >= ctx.t.divergence_threads_below:
        return None
    busy = _sm_busy(ctx)
    evidence = [
        ev(THREADS_PER_INST, threads, "thread", "<", ctx.t.divergence_threads_below),
        ev("SM SOL", busy, "%"),
    ]
    pred = ctx.num(THREADS_PER_INST_PRED)
    if pred is not None:
        evidence.insert(1, ev(THREADS_PER_INST_PRED, pred, "thread"))
    return make_cause(
        "warp_divergence",
        evidence,
        own_gain=(1.0 - threads / 32.0) * busy,
        own_formula="idle lanes x SM%",
        rule=ctx.rule(DIVERGENCE_RULES),
    )


def _fma_share(ctx: Context) -> float | None:
    """Multiply-accumulate FLOP as % of fp32 + half FLOP (the roofline sections' counts)."""
    flop: dict[str, float] = {}
    for op, per in _FP_OPS.items():
        value = ctx.num(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum.per_cycle_elapsed")
        if value is None and op.startswith("f"):
            return None  # the fp32 counts are the ones that matter
        flop[op] = (value or 0.0) * per  # the half-precision chart may not have been collected
    total = sum(flop.values())
    # A MUL feeding an ADD (a dot product the compiler did not contract) counts as a MAC.
    mac = flop["ffma"] + flop["hfma"] + 2 * min(flop["fmul"], flop["fadd"])
    mac += 2 * min(flop["hmul"], flop["hadd"])
    return 100.0 * mac / total if total > 0 else None


def _loads_per_fma(ctx: Context) -> float | None:
    fma = ctx.total(FFMA_TOTAL, HFMA_TOTAL)
    loads = ctx.total(*LOAD_INST)
    if not fma or loads is None:
        return None
    return loads * 32.0 / fma  # warp instructions -> thread instructions


def tensor_cores_idle(ctx: Context) -> Cause | None:
    t = ctx.t
    tensor = ctx.bound.tensor_pct
    fp = [p for p in (_point(ctx, "fp32"), _point(ctx, "half")) if p and p.pct_of_peak]
    share = _fma_share(ctx)
    intensity = ctx.rl.arithmetic_intensity
    if tensor is None or tensor >= t.tensor_idle_below_pct or not fp or share is None:
        return None
    fp_pct = max(p.pct_of_peak or 0.0 for p in fp)
    # A matmul's reuse (>= tensor_idle_starved_intensity FLOP per DRAM byte of MAC work) makes
    # its FMAs the kernel's work however slowly they run: a low FMA rate is its operand feed
    # holding them back, by a saturated unit (broadcast products staged through shared memory)
    # or by latency (a strided, uncoalesced load per product). An MMA is still the fix: it
    # replaces that feed with tiles. Below that reuse, the FMA rate must show the work matters.
    starved = intensity is not None and intensity >= t.tensor_idle_starved_intensity
    slow = fp_pct < t.tensor_idle_min_fp_pct
    if (slow and not starved) or share < t.tensor_idle_fma_share_pct:
        return None
    if intensity is None or intensity < t.tensor_idle_min_intensity:
        return None
    streamed = ctx.bound.memory_pct
    if streamed is not None and streamed < t.tensor_idle_min_memory_pct:
        return None  # FMA loops on registers: no operand streaming, nothing for an MMA
    reuse = _loads_per_fma(ctx)
    if reuse is not None and reuse < t.tensor_idle_min_loads_per_fma:
        return None  # arithmetic on registers (iterations), not operands streamed as in a matmul
    least = t.tensor_idle_starved_intensity if slow else t.tensor_idle_min_intensity
    evidence = [
        ev(TENSOR_PIPE, tensor, "%", "<", t.tensor_idle_below_pct),
        ev("MAC share of fp32/half FLOP", share, "%", ">=", t.tensor_idle_fma_share_pct),
        ev("FLOP per DRAM byte", intensity, "FLOP/B", ">=", least),
        ev("fp32/half FLOP rate % of peak", fp_pct, "%")
        if slow
        else ev("fp32/half FLOP rate % of peak", fp_pct, "%", ">=", t.tensor_idle_min_fp_pct),
    ]
    if reuse is not None:
        evidence.append(ev("loads per FMA", reuse, None, ">=", t.tensor_idle_min_loads_per_fma))
    elif streamed is not None:
        evidence.append(ev("memory SOL", streamed, "%", ">=", t.tensor_idle_min_memory_pct))
    return make_cause(
        "tensor_cores_idle",
        evidence,
        own_gain=_tensor_gain(ctx, fp, intensity),
        own_formula=f"1 - FP rate / min({TENSOR_OVER_FP32}x FP32 peak, I x DRAM peak)",
    )


def _tensor_gain(ctx: Context, fp: list[PrecisionPoint], intensity: float) -> float | None:
    """Run time saved if the same FLOP ran at the TF32 tensor roof at this intensity.

    The TF32 dense rate is taken as 7.4x the FP32 FMA peak (fp16/bf16 inputs would allow 2x
    more), capped by the DRAM roof at the kernel's intensity.
    """
    achieved = sum(p.achieved_flop_per_s or 0.0 for p in fp)
    fp32 = _point(ctx, "fp32")
    peak_bw = ctx.rl.peak_dram_bytes_per_s
    if not achieved or fp32 is None or not fp32.peak_flop_per_s:
        return None
    roof = fp32.peak_flop_per_s * TENSOR_OVER_FP32
    if peak_bw:
        roof = min(roof, intensity * peak_bw)
    return 100.0 * max(0.0, 1.0 - achieved / roof)


def slow_precision(ctx: Context) -> Cause | None:
    t = ctx.t
    fp64 = _point(ctx, "fp64")
    fp32 = _point(ctx, "fp32")
    total = ctx.rl.achieved_flop_per_s
    dtypes = [d.strip().lower().removeprefix("torch.") for d in ctx.input_dtypes or []]
    if any(d in _DTYPES_64 for d in dtypes):
        return None  # a genuine fp64 workload
    if fp64 is None or fp64.achieved_flop_per_s is None or not total:
        return None
    share = 100.0 * fp64.achieved_flop_per_s / total
    if share < t.fp64_share_pct:
        return None
    ratio = 2.0
    if fp32 and fp32.peak_flop_per_s and fp64.peak_flop_per_s:
        ratio = fp32.peak_flop_per_s / fp64.peak_flop_per_s
    busy = max(_sm_busy(ctx), ctx.bound.memory_pct or 0.0)
    evidence = [ev("fp64 share of FLOP", share, "%", ">=", t.fp64_share_pct)]
    pipe = ctx.num(FP64_PIPE)
    if pipe is not None:
        evidence.append(ev(FP64_PIPE, pipe, "%"))
    evidence.append(ev("fp32/fp64 peak ratio", ratio, "x"))
    note = (
        f"fp64 math on {', '.join(dtypes)} inputs"
        if dtypes
        else "fp64 arithmetic dominates: check it is needed"
    )
    return make_cause(
        "slow_precision",
        evidence,
        own_gain=busy * (1.0 - 1.0 / ratio),
        own_formula="busy% x (1-fp64/fp32 rate)",
        note=note,
    )


def compute_at_roof(ctx: Context) -> Cause | None:
    b = ctx.bound
    if b.roof != "compute" or b.roof_pct is None:
        return None
    what = b.precision or "compute"
    evidence = [ev(f"{what} % of peak", b.roof_pct, "%", ">=", ctx.t.compute_roof_pct)]
    if b.tensor_pct is not None:
        evidence.append(ev(TENSOR_PIPE, b.tensor_pct, "%"))
    if b.intensity is not None and b.ridge is not None:
        evidence.append(ev("FLOP per DRAM byte", b.intensity, "FLOP/B", ">=", b.ridge))
    cause = make_cause(
        "compute_at_roof",
        evidence,
        own_gain=None,
        own_formula="",
        note=f"at {b.roof_pct:.0f}% of the {what} roof: only less or cheaper math helps",
    )
    if what.startswith("tensor"):
        # "Use tensor cores" to a kernel at the tensor roof says more than the report knows.
        move = _cheaper_tensor_math(what)
        cause.actions = [*([move] if move else []), *cause.actions[1:]]
    return cause


def _cheaper_tensor_math(precision: str) -> str | None:
    """The cheaper math left to a kernel at the tensor roof, by the precision it runs."""
    if precision == "tensor_fp8":
        return None  # the cheapest tensor math already: only less arithmetic helps
    if precision in ("tensor_bf16", "tensor_fp16"):
        return (
            f"It runs {precision} on the tensor cores already: fp8 inputs (scaled, fp32 "
            "accumulation) are the cheaper math left, where accuracy allows"
        )
    if precision == "tensor_tf32":
        return (
            "It runs tf32 on the tensor cores: bf16/fp16 inputs (fp32 accumulation) double "
            "the rate, where accuracy allows"
        )
    if precision == "tensor_fp64":
        return (
            "fp64 on the tensor cores: check fp64 is needed; bf16/fp16/tf32 tensor math is "
            "many times the rate"
        )
    return (
        "It runs on the tensor cores already; which precision, the report does not say "
        "(SpeedOfLight_HierarchicalTensorRooflineChart would): a narrower input type (tf32 to "
        "bf16/fp16, bf16/fp16 to fp8) where accuracy allows"
    )


# ComputeWorkloadAnalysis's instruction-issue utilisation of the SM pipes the FLOP roofline does
# not see (FMA, FP64 and tensor work are compute_at_roof's): what each runs, and what helps.
PIPE_ISSUE = "sm__inst_executed_pipe_{}.avg.pct_of_peak_sustained_active"
NON_FLOP_PIPES: dict[str, tuple[str, str, str]] = {  # pipe -> (name, what it runs, what helps)
    "alu": (
        "ALU",
        "integer, logic, conversions",
        "Fewer integer/logic instructions: hoist index math out of loops, power-of-two sizes "
        "(shifts and masks), fewer type conversions",
    ),
    "xu": (
        "XU",
        "sin, exp, rsqrt; conversions",
        "Fewer special-function instructions: hoist them out of loops, replace them with "
        "polynomial/FMA approximations or table look-ups, fewer type conversions",
    ),
    "lsu": (
        "LSU",
        "loads, stores, shuffles",
        "Fewer, wider memory instructions: 128-bit vector loads, keep reused values in "
        "registers, fewer shared-memory round trips and shuffles",
    ),
    "adu": (
        "ADU",
        "block barriers, branch targets, constant loads",
        "Fewer block barriers (__syncthreads, tl.debug_barrier) and indirect branches in the "
        "inner loop: more work between two barriers",
    ),
    "cbu": (
        "CBU",
        "warp convergence, warp syncs, branches",
        "Fewer divergent branches and warp-level syncs in the inner loop: uniform control flow, "
        "unrolled loops",
    ),
    "uniform": (
        "uniform",
        "warp-uniform work",
        "Less warp-uniform scalar work in the inner loop (hoist loop-invariant values)",
    ),
}


def pipe_at_roof(ctx: Context) -> Cause | None:
    """A compute-bound kernel whose busiest non-FLOP pipe issues at or above the compute
    roof's share of its peak (``compute_roof_pct``), when no FLOP roof was found: an
    SFU-bound or integer-bound kernel is at a roof the FLOP counters cannot see."""
    b = ctx.bound
    if b.bound != "compute-bound" or b.roof is not None:
        return None
    busy = {p: ctx.num(PIPE_ISSUE.format(p)) for p in NON_FLOP_PIPES}
    measured = {p: v for p, v in busy.items() if v is not None}
    if not measured:
        return None
    pipe = max(measured, key=lambda p: measured[p])
    pct = measured[pipe]
    if pct < ctx.t.compute_roof_pct:
        return None
    name, runs, helps = NON_FLOP_PIPES[pipe]
    evidence = [
        ev(PIPE_ISSUE.format(pipe), pct, "%", ">=", ctx.t.compute_roof_pct),
        ev("SM SOL", _sm_busy(ctx), "%"),
    ]
    cause = make_cause(
        "pipe_at_roof",
        evidence,
        own_gain=None,
        own_formula="",
        note=f"at {pct:.0f}% of the {name} pipe's issue roof ({runs}): only fewer "
        "instructions on it help",
    )
    cause.actions = [helps, *cause.actions[1:]]
    return cause
