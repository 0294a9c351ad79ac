"""diagnose/ held at its cuts: every threshold of thresholds.py just below and at (or just
above) its cut, through the check that uses it, on synthetic metric readers; the value of each
gain, severity and cap; the rule-title filter, the roof choice, the tensor-busy guard.

The kernel is the healthy launch of tests/test_diagnose_causes.py (132 SMs, 8 waves, SM 40 %,
memory 45 %, DRAM 40 %) with one defect dialled in. Gains are written out as the formulas of
docs/DIAGNOSIS.md give them, so changing a formula, a threshold or a comparison fails a test.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from nsight_agent.diagnose import checks as ck
from nsight_agent.diagnose import checks_compute as cc
from nsight_agent.diagnose import checks_launch as cl
from nsight_agent.diagnose import checks_memory as cm
from nsight_agent.diagnose import metrics as dm
from nsight_agent.diagnose.bound import FMA_PIPE, classify
from nsight_agent.diagnose.cause import Cause, make_cause, sig
from nsight_agent.diagnose.findings import Finding
from nsight_agent.diagnose.kernel import diagnose_action
from nsight_agent.diagnose.metrics import L1_THROUGHPUT
from nsight_agent.diagnose.thresholds import DiagnosisThresholds
from tests.test_diagnose_causes import (
    DRAM,
    DURATION,
    MEM,
    OCC,
    SM,
    TENSOR,
    UNCOALESCED,
    context,
    fp_mix,
    rule,
    with_,
)

T = DiagnosisThresholds()


def fires(check: Any, extra: dict[str, object], **hints: Any) -> Cause | None:
    return check(context(with_(extra), **hints))  # type: ignore[no-any-return]


def ids(extra: dict[str, object], **kwargs: Any) -> list[str]:
    return [c.id for c in diagnose_action(with_(extra), **kwargs).causes]


def test_the_default_thresholds() -> None:
    """The numbers docs/DIAGNOSIS.md states; a change here is a change to the product."""
    assert T.model_dump() == {
        "latency_bound_below_pct": 60.0,
        "close_within_pts": 10.0,
        "both_high_pct": 80.0,
        "tensor_busy_pct": 50.0,
        "dram_roof_pct": 80.0,
        "compute_roof_pct": 70.0,
        "min_gain_pct": 3.0,
        "max_causes": 3,
        "ncu_passthrough_pct": 20.0,
        "local_unit_busy_pct": 50.0,
        "uncoalesced_excess_pct": 40.0,
        "uncoalesced_sectors_per_request": 16.0,
        "bank_conflict_pct": 25.0,
        "spill_share_pct": 5.0,
        "excess_bytes_ratio": 1.5,
        "atomic_share_pct": 20.0,
        "latency_stall_pct": 40.0,
        "divergence_threads_below": 24.0,
        "tensor_idle_below_pct": 1.0,
        "tensor_idle_fma_share_pct": 60.0,
        "tensor_idle_min_intensity": 8.0,
        "tensor_idle_min_fp_pct": 5.0,
        "tensor_idle_starved_intensity": 64.0,
        "tensor_idle_min_loads_per_fma": 0.02,
        "tensor_idle_min_memory_pct": 10.0,
        "fp64_share_pct": 50.0,
        "occupancy_low_pct": 50.0,
        "few_waves": 1.0,
        "tail_idle_pct": 20.0,
        "tiny_duration_us": 5.0,
        "launch_overhead_us": 3.0,
    }


# --- the bound --------------------------------------------------------------------------------


def bound(extra: dict[str, object]) -> Any:
    return classify(with_(extra))


def test_latency_bound_below_60() -> None:
    b = bound({SM: 59.9, MEM: 45.0})
    assert (b.bound, b.basis) == ("latency-bound", "sol")
    assert b.why == "SM 59.9%, memory 45.0%: both < 60%"
    b = bound({SM: 60.0, MEM: 45.0})
    assert (b.bound, b.basis) == ("compute-bound", "sol")
    assert bound({SM: 45.0, MEM: 60.0}).bound == "memory-bound"


def test_close_within_10_points_goes_to_the_tiebreak() -> None:
    apart = bound({SM: 70.0, MEM: 60.0})
    assert (apart.bound, apart.why) == ("compute-bound", "SM 70.0%, memory 60.0%: SM is larger")
    close = bound({SM: 60.1, MEM: 70.0})
    assert close.why.startswith("SM 60.1%, memory 70.0% (within 10):")
    assert (close.bound, close.basis) == ("memory-bound", "sol")  # no intensity: larger SOL


def test_both_at_or_above_80_goes_to_the_tiebreak() -> None:
    high = bound({SM: 95.0, MEM: 80.0})
    assert high.why.startswith("SM 95.0%, memory 80.0% (both >= 80):")
    below = bound({SM: 95.0, MEM: 79.9})
    assert below.why == "SM 95.0%, memory 79.9%: SM is larger"


def test_a_busy_tensor_pipe_without_tensor_counts_decides_a_close_call() -> None:
    busy = bound({SM: 65.0, MEM: 70.0, TENSOR: 50.0})
    assert (busy.bound, busy.basis, busy.precision) == ("compute-bound", "tensor_pipe", "tensor")
    assert busy.why.endswith("tensor pipe 50.0% busy, tensor FLOP not counted")
    idle = bound({SM: 65.0, MEM: 70.0, TENSOR: 49.9})
    assert (idle.bound, idle.basis, idle.precision) == ("memory-bound", "sol", None)


def test_the_tensor_busy_guard_drops_an_intensity_without_tensor_work() -> None:
    mix = {**fp_mix(ffma=8448.0), SM: 65.0, MEM: 70.0}
    counted = bound({**mix, TENSOR: 1.0})  # 1 %: not busy, the fp32 intensity stands
    assert counted.basis == "roofline" and counted.intensity is not None
    assert counted.bound == "compute-bound"  # 253 FLOP/B against a ridge of 7.92
    guarded = bound({**mix, TENSOR: 1.1})
    assert guarded.intensity is None and guarded.basis == "sol"


def test_the_dram_roof_at_80() -> None:
    assert bound({DRAM: 80.0}).roof == "dram" and bound({DRAM: 80.0}).roof_pct == 80.0
    assert bound({DRAM: 79.9}).roof is None


def test_the_compute_roof_at_70_from_a_pipe() -> None:
    at = bound({FMA_PIPE: 70.0})
    assert (at.roof, at.roof_pct) == ("compute", 70.0)
    assert bound({FMA_PIPE: 69.9}).roof is None


def test_the_nearer_roof_by_ratio_wins() -> None:
    # DRAM 88/80 = 1.10 against FMA 84/70 = 1.20: compute
    both = bound({DRAM: 88.0, FMA_PIPE: 84.0})
    assert (both.roof, both.roof_pct) == ("compute", 84.0)
    # DRAM 96/80 = 1.20 against FMA 77/70 = 1.10: DRAM
    both = bound({DRAM: 96.0, FMA_PIPE: 77.0})
    assert (both.roof, both.roof_pct) == ("dram", 96.0)


# --- ranking ----------------------------------------------------------------------------------


def test_the_minimum_gain_is_inclusive_and_gates_the_residual() -> None:
    # divergence: (1 - 16/32) x SM busy; latency-bound (SM and memory under 60 %)
    at = {cc.THREADS_PER_INST: 16.0, SM: 6.0}
    assert fires(cc.warp_divergence, at).gain == 3.0  # type: ignore[union-attr]
    assert ids(at) == ["warp_divergence"]
    below = {cc.THREADS_PER_INST: 16.0, SM: 5.8}
    assert fires(cc.warp_divergence, below).gain == 2.9  # type: ignore[union-attr]
    # dropped, and with nothing specific left the residual memory-latency cause speaks
    assert ids(below) == ["memory_latency"]


def test_at_most_three_causes_and_the_top_one_in_full() -> None:
    four = {
        **OCC,
        cm.SHARED_CONFLICTS[0]: 31e6,
        cm.SHARED_WAVEFRONTS[0]: 32e6,
        cc.THREADS_PER_INST: 8.0,
        "launch__waves_per_multiprocessor": 1.01,
    }
    d = diagnose_action(with_(four))
    every = [c for c in ck.run_checks(context(with_(four))).fired if (c.gain or 0) >= 3]
    assert len(every) == 4 and len(d.causes) == 3
    assert [c.gain for c in d.causes] == sorted((c.gain or 0.0 for c in every), reverse=True)[:3]
    assert len(d.causes[0].actions) > 1 and all(len(c.actions) == 1 for c in d.causes[1:])
    assert all(len(c.ev) <= 2 for c in d.causes[1:])


def test_at_a_roof_only_relievers_rank_then_the_roof() -> None:
    # at the DRAM roof: divergence (a compute cause) and the tail are left out
    at_roof = {
        SM: 20.0,
        MEM: 90.0,
        DRAM: 90.0,
        cm.LOCAL_BYTES[0]: 40e6,
        cm.GLOBAL_BYTES[0]: 60e6,
        cc.THREADS_PER_INST: 8.0,
        "launch__waves_per_multiprocessor": 1.01,
    }
    d = diagnose_action(with_(at_roof))
    assert [c.id for c in d.causes] == ["local_memory_spills", "dram_at_roof"]
    assert d.headline.startswith("at 90% of the DRAM roof: only moving fewer bytes helps; ")
    assert d.causes[-1].sev == "high" and d.causes[-1].gain is None


def test_idle_tensor_cores_rank_above_the_operand_feeds_memory_symptoms() -> None:
    """A matmul on the FMA pipe with an uncoalesced (or bank-conflicted) operand feed: ncu's
    estimate for the feed (99 %, the cap) is above the tensor gain (93.2 %), yet the MMA
    rewrite replaces that feed, so idle tensor cores come first."""
    feeds = [
        (UNCOALESCED, rule("UncoalescedGlobalAccess", "Uncoalesced Global Accesses", 99.0)),
        (
            {cm.SHARED_CONFLICTS[0]: 31e6, cm.SHARED_WAVEFRONTS[0]: 32e6},
            rule("UncoalescedSharedAccess", "Uncoalesced Shared Accesses", 99.0),
        ),
    ]
    for metrics, estimate in feeds:
        d = diagnose_action(with_({**GEMM, **metrics}, [estimate]))
        assert (d.causes[0].id, d.causes[0].gain) == ("tensor_cores_idle", 93.2)
        assert d.causes[1].gain == 99.0 and d.causes[1].id in ck.OUTRANKS["tensor_cores_idle"]
        assert d.headline.startswith("compute-bound: tensor cores idle")


def test_precedence_moves_only_the_outranking_cause_and_only_upwards() -> None:
    def cause(cause_id: Any, gain: float) -> Cause:
        return make_cause(cause_id, [], gain, "x")

    tail = cause("tail_effect", 98.0)
    coal = cause("uncoalesced_global_access", 97.0)
    tensor = cause("tensor_cores_idle", 60.0)
    excess = cause("excess_dram_traffic", 50.0)
    assert ck.by_precedence([tail, coal, excess, tensor]) == [tail, tensor, coal, excess]
    assert ck.by_precedence([tensor, coal]) == [tensor, coal]
    assert ck.by_precedence([tail, coal]) == [tail, coal]  # no tensor cause: gains decide


def test_idle_tensor_cores_relieve_a_non_flop_pipes_roof() -> None:
    """A matmul whose per-product loads fill the LSU pipe (80 % of its issue peak): an MMA
    removes them, so idle tensor cores stay above the pipe's roof."""
    d = diagnose_action(with_({**GEMM, cc.PIPE_ISSUE.format("lsu"): 80.0}))
    assert [c.id for c in d.causes] == ["tensor_cores_idle", "pipe_at_roof"]


def test_a_folded_cause_leaves_its_number_as_second_evidence() -> None:
    spill = {cm.LOCAL_BYTES[0]: 40e6, cm.GLOBAL_BYTES[0]: 60e6, cm.DRAM_RW[0]: 900e6}
    d = diagnose_action(with_(spill), ideal_bytes=300e6)
    top = d.causes[0]
    assert [c.id for c in d.causes] == ["local_memory_spills"]
    assert top.ev[0].m == "local share of L1 traffic"
    assert (top.ev[1].m, top.ev[1].v) == ("DRAM bytes / ideal bytes", 3.0)


# --- memory checks ----------------------------------------------------------------------------


def coalescing(needed_sectors: float) -> dict[str, object]:
    return {cm.GLD_SECTORS: 100e6, cm.GLD_NEEDED: needed_sectors * 32, cm.GLD_REQUESTS: 25e6}


def test_uncoalesced_at_40_percent_excess() -> None:
    c = fires(cm.uncoalesced_global_access, coalescing(60e6))  # 40 % of sectors beyond ideal
    assert c is not None and c.ev[0].v == 40.0 and c.ev[0].thr == 40.0
    assert (c.gain, c.sev, c.gain_src) == (18.0, "medium", "own:excess sectors x mem%")
    assert [e.m for e in c.ev][-2:] == ["global sectors/request", "memory SOL"]
    assert fires(cm.uncoalesced_global_access, coalescing(60.1e6)) is None


def test_uncoalesced_above_16_sectors_per_request_without_the_byte_count() -> None:
    strided = {cm.GLD_SECTORS: 32e6, cm.GLD_REQUESTS: 1e6}
    c = fires(cm.uncoalesced_global_access, strided)
    assert c is not None and (c.gain, c.ev[0].cmp, c.ev[0].thr) == (22.5, ">", 16.0)
    assert fires(cm.uncoalesced_global_access, {**strided, cm.GLD_SECTORS: 16e6}) is None
    assert fires(cm.uncoalesced_global_access, {**strided, cm.GLD_SECTORS: 16.1e6}) is not None


def test_stores_count_in_coalescing() -> None:
    stores = {cm.GST_SECTORS: 100e6, cm.GST_NEEDED: 60e6 * 32, cm.GST_REQUESTS: 25e6}
    c = fires(cm.uncoalesced_global_access, stores)
    assert c is not None and c.ev[0].v == 40.0


def test_bank_conflicts_at_25_percent_weighted_by_l1() -> None:
    at = {cm.SHARED_CONFLICTS[1]: 25e6, cm.SHARED_WAVEFRONTS[1]: 100e6, L1_THROUGHPUT: 80.0}
    c = fires(cm.shared_bank_conflicts, at)
    assert c is not None and (c.gain, c.sev) == (20.0, "medium")
    assert (c.ev[-1].m, c.ev[-1].v) == ("L1 busy", 80.0)
    assert fires(cm.shared_bank_conflicts, {**at, cm.SHARED_CONFLICTS[1]: 24.9e6}) is None
    no_l1 = {cm.SHARED_CONFLICTS[0]: 50e6, cm.SHARED_WAVEFRONTS[0]: 100e6}
    c = fires(cm.shared_bank_conflicts, no_l1)
    assert c is not None and c.gain == 22.5 and c.ev[-1].m == "memory SOL"


def test_spills_at_5_percent_of_l1_bytes() -> None:
    at = {cm.LOCAL_BYTES[1]: 5e6, cm.GLOBAL_BYTES[1]: 95e6}
    c = fires(cm.local_memory_spills, at)
    assert c is not None and c.ev[0].v == 5.0
    assert c.gain == pytest.approx(2.2, abs=0.05) and c.sev == "low"
    assert fires(cm.local_memory_spills, {**at, cm.LOCAL_BYTES[1]: 4.9e6}) is None


def test_spills_from_instruction_counts_when_bytes_are_missing() -> None:
    inst = {cm.LOCAL_INST[0]: 1e6, cm.GLOBAL_INST: 3e6}
    c = fires(cm.local_memory_spills, inst)
    assert c is not None and c.ev[0].v == 25.0 and c.ev[1].u == "inst"
    assert c.gain == pytest.approx(11.2, abs=0.05)


def test_excess_dram_traffic_at_one_and_a_half_times_the_ideal() -> None:
    at = {cm.DRAM_RW[0]: 150e6}
    c = fires(cm.excess_dram_traffic, at, ideal_bytes=100e6)
    # (1 - 1/1.5) x max(DRAM 40, memory 45)
    assert c is not None and (c.ev[0].v, c.gain, c.sev) == (1.5, 15.0, "medium")
    assert fires(cm.excess_dram_traffic, {cm.DRAM_RW[0]: 149e6}, ideal_bytes=100e6) is None
    dram_heavier = {**at, DRAM: 60.0, SM: 70.0}
    c = fires(cm.excess_dram_traffic, dram_heavier, ideal_bytes=100e6)
    assert c is not None and c.gain == 20.0


def test_atomics_at_20_percent_and_under_60_percent_busy() -> None:
    at = {cm.ATOMIC_INST[0]: 2e6, cm.GLOBAL_INST: 10e6}
    c = fires(cm.atomic_contention, at)
    assert c is not None and (c.ev[0].v, c.gain) == (20.0, 11.0)  # 20 x (1 - 45/100)
    assert fires(cm.atomic_contention, {**at, cm.ATOMIC_INST[0]: 1.99e6}) is None
    assert fires(cm.atomic_contention, {**at, SM: 59.9}) is not None
    assert fires(cm.atomic_contention, {**at, SM: 60.0}) is None


def test_atomics_against_loads_and_stores_when_the_total_is_missing() -> None:
    parts = {cm.ATOMIC_INST[1]: 1e6, cm.GLOBAL_LD_ST[0][1]: 2e6, cm.GLOBAL_LD_ST[1][0]: 1e6}
    c = fires(cm.atomic_contention, parts)
    assert c is not None and c.ev[0].v == 25.0  # 1 of 1 + 2 + 1


def test_memory_latency_at_40_percent_long_scoreboard() -> None:
    at = {SM: 15.0, MEM: 30.0, cm.STALL_LONG_SB: 4.0, cm.WARPS_PER_ISSUE: 10.0}
    c = fires(cm.memory_latency, at)
    # 1 - max(memory 30, DRAM 40)/80
    assert c is not None and (c.gain, c.sev) == (50.0, "high")
    assert fires(cm.memory_latency, {**at, cm.STALL_LONG_SB: 3.99}) is None
    assert fires(cm.memory_latency, {**at, SM: 60.0}) is None  # not latency-bound


# --- compute checks ---------------------------------------------------------------------------


def test_divergence_under_24_threads() -> None:
    c = fires(cc.warp_divergence, {cc.THREADS_PER_INST: 23.9})
    assert c is not None and c.gain == pytest.approx((1 - 23.9 / 32) * 40, abs=0.05)
    assert fires(cc.warp_divergence, {cc.THREADS_PER_INST: 24.0}) is None


GEMM = {**fp_mix(ffma=8448.0), SM: 70.0, MEM: 60.0, cc.FFMA_TOTAL: 1e10, cc.LOAD_INST[1]: 1e8}


def test_tensor_cores_idle_gain_against_the_tf32_roof() -> None:
    c = fires(cc.tensor_cores_idle, GEMM)
    # achieved = half the FP32 peak; roof = min(7.4 x FP32 peak, intensity x DRAM peak)
    ctx = context(with_(GEMM))
    fp32 = next(p for p in ctx.rl.precisions if p.precision == "fp32")
    assert fp32.pct_of_peak == pytest.approx(50.0)
    intensity, bw = ctx.rl.arithmetic_intensity, ctx.rl.peak_dram_bytes_per_s
    assert intensity is not None and bw is not None and fp32.peak_flop_per_s is not None
    roof = min(7.4 * fp32.peak_flop_per_s, intensity * bw)
    expected = 100 * (1 - 0.5 * fp32.peak_flop_per_s / roof)
    assert c is not None and c.gain == pytest.approx(expected, abs=0.05)
    assert c.gain == pytest.approx(93.2, abs=0.05) and c.sev == "high"


def _edges(value: float) -> tuple[float, float]:
    """A threshold at ``value`` (the check's >= passes) and one just above (it fails)."""
    return value, value * (1 + 1e-9) + 1e-12


@pytest.mark.parametrize(
    ("field", "measure"),
    [
        ("tensor_idle_fma_share_pct", lambda ctx: cc._fma_share(ctx)),
        ("tensor_idle_min_intensity", lambda ctx: ctx.rl.arithmetic_intensity),
        ("tensor_idle_min_fp_pct", lambda ctx: max(p.pct_of_peak or 0 for p in ctx.rl.precisions)),
        ("tensor_idle_min_loads_per_fma", lambda ctx: cc._loads_per_fma(ctx)),
        ("tensor_idle_min_memory_pct", lambda ctx: ctx.bound.memory_pct),
    ],
)
def test_tensor_cores_idle_at_each_cut(field: str, measure: Any) -> None:
    action = with_(GEMM)
    value = measure(context(action))
    at, above = _edges(value)
    # A matmul's reuse passes a low FP rate on its own; off here, tested below.
    off = {"tensor_idle_starved_intensity": 1e30} if field == "tensor_idle_min_fp_pct" else {}
    for threshold, expected in ((at, True), (above, False)):
        t = DiagnosisThresholds(**{field: threshold, **off})
        ctx = context(action)
        ctx.t = t
        assert (cc.tensor_cores_idle(ctx) is not None) is expected, (field, threshold)


def test_tensor_cores_idle_defaults_at_their_cuts() -> None:
    # fp32 rate at 5 % of peak (the FMA count scaled), intensity scaled with it
    slow = {**GEMM, **fp_mix(ffma=8448.0 * 0.1)}
    slow |= {SM: 70.0, MEM: 60.0}
    assert fires(cc.tensor_cores_idle, slow) is not None
    slower = {**slow, **fp_mix(ffma=8448.0 * 0.099)} | {SM: 70.0, MEM: 60.0}
    assert fires(cc.tensor_cores_idle, slower) is None
    assert fires(cc.tensor_cores_idle, {**GEMM, MEM: 10.0}) is not None
    assert fires(cc.tensor_cores_idle, {**GEMM, MEM: 9.9}) is None
    assert fires(cc.tensor_cores_idle, {**GEMM, cc.LOAD_INST[1]: 1e10 * 0.02 / 32}) is not None
    assert fires(cc.tensor_cores_idle, {**GEMM, cc.LOAD_INST[1]: 1e10 * 0.0199 / 32}) is None
    # the tensor pipe is read as the bound rounds it (0.1 %)
    assert fires(cc.tensor_cores_idle, {**GEMM, TENSOR: 0.9}) is not None
    assert fires(cc.tensor_cores_idle, {**GEMM, TENSOR: 1.0}) is None


def starved_gemm(sm: float, mem: float, fraction: float = 1 / 20) -> dict[str, object]:
    """A matmul at 2 % of its FMA peak whose operands come from L1/shared (DRAM bytes/s
    ``fraction`` of the GEMM's), the SM and memory SOL as given."""
    slow = {**GEMM, **fp_mix(ffma=8448.0 * 0.02)} | {SM: sm, MEM: mem}
    dram = context(with_(slow)).r.get(dm.DRAM_BYTES_PER_S)
    assert dram is not None
    return slow | {dm.DRAM_BYTES_PER_S: dram * fraction}


def test_tensor_cores_idle_when_the_operand_feed_holds_the_fmas_back() -> None:
    """A matmul at 2 % of its FMA peak still wants an MMA at >= 64 FLOP per DRAM byte, whether
    its operand feed saturates a memory unit (fp16_nodot_triton: memory SOL 97 %) or waits on
    latency (a strided load per product: SM and memory both under 60 %, latency-bound)."""
    for sm, mem in ((10.0, 60.0), (10.0, 59.9), (15.0, 25.0)):
        fed = starved_gemm(sm, mem)
        ctx = context(with_(fed))
        intensity = ctx.rl.arithmetic_intensity
        assert intensity is not None and intensity >= 64 and ctx.bound.memory_pct == mem
        c = fires(cc.tensor_cores_idle, fed)
        assert c is not None, (sm, mem)
        assert (c.ev[2].m, c.ev[2].thr) == ("FLOP per DRAM byte", 64.0)
        assert (c.ev[3].m, c.ev[3].v, c.ev[3].thr) == ("fp32/half FLOP rate % of peak", 1.0, None)
    # The cut: 64 FLOP per DRAM byte, at the slow rate.
    at = starved_gemm(15.0, 25.0)
    intensity = context(with_(at)).rl.arithmetic_intensity
    assert intensity is not None
    fraction = intensity / 64.0 / 20  # DRAM bytes/s scaled to 64 FLOP per byte
    assert fires(cc.tensor_cores_idle, starved_gemm(15.0, 25.0, fraction * 0.999)) is not None
    assert fires(cc.tensor_cores_idle, starved_gemm(15.0, 25.0, fraction * 1.001)) is None


def test_tensor_cores_idle_at_the_intensity_and_mac_share_cuts() -> None:
    # intensity = 2 x 8448 x 4 SMSP... : scale DRAM bytes/s so the intensity is 8 FLOP/B
    ctx = context(with_(GEMM))
    intensity = ctx.rl.arithmetic_intensity
    assert intensity is not None
    per_s = 1e11 * intensity / 8.0
    at = {**GEMM, "dram__bytes.sum.per_second": per_s}
    assert context(with_(at)).rl.arithmetic_intensity == pytest.approx(8.0)
    assert fires(cc.tensor_cores_idle, {**GEMM, "dram__bytes.sum.per_second": per_s * 0.999})
    assert (
        fires(cc.tensor_cores_idle, {**GEMM, "dram__bytes.sum.per_second": per_s * 1.001}) is None
    )
    # MAC share: FMA FLOP 2f against adds a; 2f / (2f + a) = 60 % at a = 4f/3
    f = 3000.0
    at_share = {**GEMM, **fp_mix(ffma=f, fadd=4 * f / 3)} | {SM: 70.0, MEM: 60.0}
    assert cc._fma_share(context(with_(at_share))) == pytest.approx(60.0)
    assert fires(cc.tensor_cores_idle, at_share) is not None
    below = {**GEMM, **fp_mix(ffma=f, fadd=4.01 * f / 3)} | {SM: 70.0, MEM: 60.0}
    assert fires(cc.tensor_cores_idle, below) is None


def test_slow_precision_at_half_the_flop_and_its_gain() -> None:
    # dfma counts 2 FLOP like ffma: equal instruction rates give a 50 % fp64 share
    half = {**fp_mix(ffma=1000.0, dfma=1000.0), SM: 80.0}
    c = fires(cc.slow_precision, half)
    # max(SM 80, memory 45) x (1 - 1/2): the fp32/fp64 peak ratio is 2 here
    assert c is not None and (c.ev[0].v, c.gain, c.sev) == (50.0, 40.0, "high")
    assert fires(cc.slow_precision, {**half, **fp_mix(ffma=1001.0, dfma=1000.0)}) is None
    for dtype in ("float64", "FP64", "double", "complex128", "f64"):
        assert fires(cc.slow_precision, half, input_dtypes=[dtype]) is None
    c = fires(cc.slow_precision, half, input_dtypes=["bfloat16", "float32"])
    assert c is not None and c.note == "fp64 math on bfloat16, float32 inputs"


# --- launch checks ----------------------------------------------------------------------------


def launch(grid: float, waves: float, **extra: object) -> dict[str, object]:
    return {"launch__grid_size": grid, "launch__waves_per_multiprocessor": waves, **extra}


def test_too_few_blocks_below_one_per_sm() -> None:
    c = fires(cl.too_few_blocks, launch(100.0, 0.76))  # between sms/2 and sms
    assert c is not None and c.gain == pytest.approx(100 * 32 / 132, abs=0.05)
    assert (c.ev[0].cmp, c.ev[0].thr, c.gain_src) == ("<", 132.0, "own:idle SMs")
    assert fires(cl.too_few_blocks, launch(131.0, 0.99)) is not None
    assert fires(cl.too_few_blocks, launch(132.0, 1.0)) is None


def test_too_few_resident_waves_under_one() -> None:
    """More blocks than SMs, but under one resident wave: warp slots stay empty."""
    c = fires(cl.too_few_blocks, launch(264.0, 0.99))
    # (1 - 0.99) x idle, idle = 1 - 45/100
    assert c is not None and c.gain == pytest.approx(0.55, abs=0.051)
    assert c.gain_src == "own:(1-waves) x idle"
    c = fires(cl.too_few_blocks, launch(528.0, 0.5))
    assert c is not None and c.gain == pytest.approx(27.5, abs=0.051)
    assert fires(cl.too_few_blocks, launch(264.0, 1.0)) is None


def test_the_launch_rule_counts_only_under_its_own_title() -> None:
    tail_rule = [rule("LaunchConfiguration", "Tail Effect", 70.0)]
    c = too_few = cl.too_few_blocks(context(with_(launch(100.0, 0.76), tail_rule)))
    assert too_few is not None and c is not None and c.gain_src == "own:idle SMs"
    grid_rule = [rule("LaunchConfiguration", "Small Grid", 70.0)]
    c = cl.too_few_blocks(context(with_(launch(100.0, 0.76), grid_rule)))
    assert c is not None and (c.gain, c.gain_src) == (70.0, "ncu:LaunchConfiguration")


def test_tail_effect_at_20_percent_idle() -> None:
    c = fires(cl.tail_effect, launch(317.0, 2.4))  # (3 - 2.4)/3
    assert c is not None and c.gain == 20.0 and c.sev == "medium"
    assert fires(cl.tail_effect, launch(318.0, 2.41)) is None
    assert fires(cl.tail_effect, launch(100.0, 0.99)) is None  # under one wave: not a tail


def test_occupancy_at_or_under_half() -> None:
    half = {**OCC, "sm__maximum_warps_per_active_cycle_pct": 50.0}
    half["launch__occupancy_limit_registers"] = 4.0  # 4 blocks of 8 warps of 64: 50 %
    c = fires(cl.occupancy, half)
    # (1 - 50/100) x (1 - 30/100)
    assert c is not None and (c.id, c.gain) == ("occupancy_registers", 35.0)
    assert c.note == "occupancy 100% without this limit"
    above = {**half, "sm__maximum_warps_per_active_cycle_pct": 50.1}
    assert fires(cl.occupancy, above) is None


def test_block_size_not_a_multiple_of_32() -> None:
    c = fires(cl.occupancy, {"launch__block_size": 48.0})
    # 2 warps, the last with 16 of 32 lanes idle: 100/2 x 16/32
    assert c is not None and (c.id, c.gain) == ("occupancy_block_size", 25.0)
    assert c.ev[1].v == 16.0


def test_tiny_launch_at_5_us() -> None:
    at = {DURATION: 5000.0, **launch(1.0, 1.0)}
    c = fires(cl.launch_bound_tiny, at)
    assert c is not None and c.gain == 37.5  # 3 us / (3 us + 5 us)
    assert fires(cl.launch_bound_tiny, {**at, DURATION: 5001.0}) is None
    assert fires(cl.launch_bound_tiny, {**at, "launch__waves_per_multiprocessor": 1.01}) is None
    no_waves = {
        DURATION: 5000.0,
        "launch__grid_size": 264.0,
        "launch__waves_per_multiprocessor": None,
    }
    assert fires(cl.launch_bound_tiny, no_waves) is not None
    no_waves["launch__grid_size"] = 265.0
    assert fires(cl.launch_bound_tiny, no_waves) is None
    # a tiny kernel is not also called short of blocks or tailed
    assert fires(cl.too_few_blocks, {**at, "launch__grid_size": 4.0}) is None


# --- gains: ncu's, capped, clamped; severity ---------------------------------------------------


def finding(speedup: float, kind: str) -> Finding:
    return Finding(
        rule_id="R",
        rule_name="R",
        section="X",
        type="optimization",
        title="t",
        message="m",
        estimated_speedup_pct=speedup,
        speedup_type=kind,  # type: ignore[arg-type]
        focus_metrics=[],
        linked_sections=[],
        links=[],
    )


@pytest.mark.parametrize(
    ("own", "ncu", "kind", "gain", "src"),
    [
        (18.0, 61.0, "global", 61.0, "ncu:R"),
        (18.0, 80.0, "local", 18.0, "ncu-local-capped:R"),
        (18.0, 10.0, "local", 10.0, "ncu-local-capped:R"),
        (18.0, 150.0, "global", 99.0, "ncu:R"),
        (-5.0, None, None, 0.0, "own:f"),
        (12.34, None, None, 12.3, "own:f"),
    ],
)
def test_gain_source_cap_and_clamp(
    own: float, ncu: float | None, kind: str | None, gain: float, src: str
) -> None:
    f = finding(ncu, kind or "global") if ncu is not None else None
    c = make_cause("warp_divergence", [], own, "f", rule=f)
    assert (c.gain, c.gain_src) == (gain, src)
    assert c.rules == (["R"] if f else None)


@pytest.mark.parametrize(
    ("gain", "sev"), [(30.0, "high"), (29.9, "medium"), (10.0, "medium"), (9.9, "low")]
)
def test_severity_cuts(gain: float, sev: str) -> None:
    assert make_cause("tail_effect", [], gain, "f").sev == sev


def test_a_roof_is_high_with_no_gain_and_evidence_is_capped_at_five() -> None:
    roof = make_cause("dram_at_roof", [], None, "")
    assert (roof.sev, roof.gain, roof.gain_src, roof.kind) == ("high", None, None, "roof")
    from nsight_agent.diagnose.cause import ev

    many = make_cause("tail_effect", [ev(str(i), i) for i in range(7)], 1.0, "f")
    assert [e.m for e in many.ev] == ["0", "1", "2", "3", "4"]


def test_sig_keeps_three_digits() -> None:
    assert sig(123456.0) == 123000.0 and sig(0.0012345) == 0.00123 and sig(0.0) == 0.0
    assert math.isnan(sig(math.nan))
