"""Cause checks and ranking: each check triggering and not, on fake actions; the recorded GEMM."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ncu_report
import pytest

from nsight_agent.diagnose import checks as ck
from nsight_agent.diagnose import checks_compute as cc
from nsight_agent.diagnose import checks_launch as cl
from nsight_agent.diagnose import checks_memory as cm
from nsight_agent.diagnose.bound import BoundResult, classify
from nsight_agent.diagnose.cause import Cause, Context, Evidence
from nsight_agent.diagnose.findings import findings
from nsight_agent.diagnose.kernel import KernelDiagnosis, diagnose_action
from nsight_agent.diagnose.metrics import Reader
from nsight_agent.diagnose.roofline import roofline
from nsight_agent.diagnose.thresholds import DiagnosisThresholds
from nsight_agent.diagnose.vocabulary import VOCABULARY
from tests.fakes import FakeAction

FIXTURE = Path(__file__).parent / "fixtures" / "h200_bf16_matmul_sections.ncu-rep"
SKILLS = Path(__file__).parent.parent / "skills"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEM = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
DRAM = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
TENSOR = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
DURATION = "gpu__time_duration.sum"


# A healthy mid-size launch on an H200: 132 SMs, 8 full waves, 100 us, nothing wrong.
BASE: dict[str, object] = {
    SM: 40.0,
    MEM: 45.0,
    DRAM: 40.0,
    TENSOR: 0.0,
    DURATION: 100_000.0,
    "launch__grid_size": 8448.0,
    "launch__block_size": 256.0,
    "device__attribute_multiprocessor_count": 132.0,
    "device__attribute_max_warps_per_multiprocessor": 64.0,
    "launch__waves_per_multiprocessor": 8.0,
    "sm__maximum_warps_per_active_cycle_pct": 100.0,
    "sm__warps_active.avg.pct_of_peak_sustained_active": 85.0,
}


def fake(rules: list[dict[str, Any]] | None = None, **metrics: object) -> FakeAction:
    return FakeAction({**BASE, **{k.replace("__DOT__", "."): v for k, v in metrics.items()}}, rules)


def with_(extra: Mapping[str, object], rules: list[dict[str, Any]] | None = None) -> FakeAction:
    return FakeAction({**BASE, **extra}, rules)


def context(action: FakeAction, **hints: Any) -> Context:
    t = DiagnosisThresholds()
    return Context(
        r=Reader(action),
        bound=classify(action, t),
        rl=roofline(action),
        findings=findings(action),
        t=t,
        **hints,
    )


def rule(
    rule_id: str, title: str, speedup: float, kind: int = 2, message: str | None = None
) -> dict[str, Any]:
    """A rule result as ncu_report's rule_results_as_dicts gives it (kind 2: global)."""
    return {
        "rule_identifier": rule_id,
        "name": rule_id,
        "section_identifier": "X",
        "rule_message": {"title": title, "message": message or f"{title}.", "type": 2},
        "speedup_estimation": {"type": kind, "speedup": speedup},
    }


def fired(cause: Cause | None) -> Cause:
    assert cause is not None
    assert 1 <= len(cause.ev) <= 5
    assert cause.id in VOCABULARY and cause.actions and cause.skill
    return cause


# ---------------------------------------------------------------------------------------------
# Memory checks

UNCOALESCED = {
    cm.GLD_SECTORS: 32e6,
    cm.GLD_REQUESTS: 1e6,
    cm.GLD_NEEDED: 128e6,  # 4 bytes x 32 threads per request: 4 ideal sectors of 32
}


def test_uncoalesced_fires_on_excess_sectors_and_takes_ncu_gain() -> None:
    c = fired(cm.uncoalesced_global_access(context(with_(UNCOALESCED))))
    assert c.ev[0].v == pytest.approx(87.5) and c.ev[0].cmp == ">="
    assert c.gain_src is not None and c.gain_src.startswith("own:")
    ncu = [rule("UncoalescedGlobalAccess", "Uncoalesced Global Accesses", 61.0)]
    c = fired(cm.uncoalesced_global_access(context(with_(UNCOALESCED, ncu))))
    assert (c.gain, c.gain_src, c.rules) == (
        61.0,
        "ncu:UncoalescedGlobalAccess",
        ["UncoalescedGlobalAccess"],
    )


def test_uncoalesced_falls_back_to_sectors_per_request() -> None:
    strided = {cm.GLD_SECTORS: 32e6, cm.GLD_REQUESTS: 1e6}
    assert fired(cm.uncoalesced_global_access(context(with_(strided)))).ev[0].cmp == ">"
    vector = {cm.GLD_SECTORS: 16e6, cm.GLD_REQUESTS: 1e6}  # 16-byte loads, coalesced
    assert cm.uncoalesced_global_access(context(with_(vector))) is None


def test_coalesced_access_does_not_fire() -> None:
    ok = {cm.GLD_SECTORS: 4e6, cm.GLD_REQUESTS: 1e6, cm.GLD_NEEDED: 128e6}
    assert cm.uncoalesced_global_access(context(with_(ok))) is None
    assert cm.uncoalesced_global_access(context(fake())) is None


def test_bank_conflicts() -> None:
    conflicted = {
        cm.SHARED_CONFLICTS[0]: 31e6,
        cm.SHARED_WAVEFRONTS[0]: 32e6,
        cm.SHARED_INST[0]: 1e6,
    }
    c = fired(cm.shared_bank_conflicts(context(with_(conflicted))))
    assert c.ev[0].v == pytest.approx(96.9, abs=0.1)
    assert c.ev[2].v == pytest.approx(32.0)
    clean = {cm.SHARED_CONFLICTS[0]: 0.5e6, cm.SHARED_WAVEFRONTS[0]: 32e6}
    assert cm.shared_bank_conflicts(context(with_(clean))) is None


def test_local_memory_spills() -> None:
    spilling = {cm.LOCAL_BYTES[0]: 40e6, cm.LOCAL_BYTES[1]: 40e6, cm.GLOBAL_BYTES[0]: 80e6}
    c = fired(cm.local_memory_spills(context(with_(spilling))))
    assert c.ev[0].v == pytest.approx(50.0)
    none = {cm.LOCAL_BYTES[0]: 0.0, cm.GLOBAL_BYTES[0]: 80e6}
    assert cm.local_memory_spills(context(with_(none))) is None


def test_excess_dram_traffic_needs_the_callers_ideal_bytes() -> None:
    moved = {cm.DRAM_RW[0]: 300e6, cm.DRAM_RW[1]: 100e6}
    c = fired(cm.excess_dram_traffic(context(with_(moved), ideal_bytes=200e6)))
    assert c.ev[0].v == pytest.approx(2.0)
    assert cm.excess_dram_traffic(context(with_(moved), ideal_bytes=390e6)) is None
    assert cm.excess_dram_traffic(context(with_(moved))) is None


def test_atomic_contention_only_at_low_throughput() -> None:
    atomics = {cm.ATOMIC_INST[1]: 1e6, cm.GLOBAL_INST: 2e6, SM: 10.0, MEM: 15.0}
    c = fired(cm.atomic_contention(context(with_(atomics))))
    assert c.ev[0].v == pytest.approx(50.0)
    busy = {**atomics, MEM: 85.0}  # scatter-add at full L2 throughput: traffic, not contention
    assert cm.atomic_contention(context(with_(busy))) is None


def test_atomic_contention_from_hardware_counters_and_a_hot_l2_slice() -> None:
    one_address = {
        cm.ATOMIC_INST_HW[1]: 262144.0,
        cm.GLOBAL_LD_ST[0][0]: 65536.0,
        cm.L2_ATOMIC.format("max"): 33.3,
        cm.L2_ATOMIC.format("avg"): 0.35,
        SM: 0.2,
        MEM: 0.9,
    }
    c = fired(cm.atomic_contention(context(with_(one_address))))
    assert c.ev[0].v == pytest.approx(80.0)
    assert c.ev[-1].m.startswith("L2 atomic unit") and c.ev[-1].v == pytest.approx(95.1, abs=0.1)
    assert diagnose_action(with_(one_address)).causes[0].id == "atomic_contention"


def test_memory_latency_is_a_residual_for_latency_bound_kernels() -> None:
    waiting = {SM: 15.0, MEM: 30.0, cm.STALL_LONG_SB: 8.0, cm.WARPS_PER_ISSUE: 10.0}
    c = fired(cm.memory_latency(context(with_(waiting))))
    assert c.ev[1].v == pytest.approx(80.0)
    d = diagnose_action(with_(waiting))
    assert d.causes[0].id == "memory_latency"
    assert cm.memory_latency(context(with_({**waiting, cm.STALL_LONG_SB: 1.0}))) is None
    assert cm.memory_latency(context(with_({SM: 90.0, MEM: 30.0}))) is None


# ---------------------------------------------------------------------------------------------
# Compute checks


def test_warp_divergence() -> None:
    ncu = [rule("ThreadDivergence", "Thread Divergence", 40.0)]
    c = fired(cc.warp_divergence(context(with_({cc.THREADS_PER_INST: 12.0, SM: 70.0}, ncu))))
    assert c.gain == 40.0 and c.rules == ["ThreadDivergence"]
    assert cc.warp_divergence(context(with_({cc.THREADS_PER_INST: 31.5}))) is None


ROOF_CLOCKS = {
    "sm__cycles_elapsed.avg.per_second": 1.5e9,
    "smsp__cycles_elapsed.avg.per_second": 1.5e9,
    "dram__bytes.sum.peak_sustained": 1504.0,
    "dram__cycles_elapsed.avg.per_second": 3.2e9,
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained": 16896.0,
    "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained": 8448.0,
    "sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained": 16896.0,
}


def fp_mix(
    ffma: float = 0.0, fadd: float = 0.0, dfma: float = 0.0, dram_per_s: float = 1e11
) -> dict[str, object]:
    """Per-cycle thread instruction counts as the roofline sections record them."""
    ops = {"fadd": fadd, "fmul": 0.0, "ffma": ffma, "hadd": 0.0, "hmul": 0.0, "hfma": 0.0}
    ops |= {"dadd": 0.0, "dmul": 0.0, "dfma": dfma}
    out: dict[str, object] = {
        f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum.per_cycle_elapsed": v
        for op, v in ops.items()
    }
    return {**out, **ROOF_CLOCKS, "dram__bytes.sum.per_second": dram_per_s}


def test_tensor_cores_idle_in_a_simt_matmul() -> None:
    # fp32 FMA at half the FP32 peak, 250 FLOP per DRAM byte, operands loaded: a SIMT GEMM.
    gemm = {**fp_mix(ffma=8448.0), SM: 70.0, MEM: 60.0, cc.FFMA_TOTAL: 1e10, cc.LOAD_INST[1]: 1e8}
    c = fired(cc.tensor_cores_idle(context(with_(gemm))))
    assert c.ev[0].m == TENSOR and c.ev[2].v == pytest.approx(253.0, rel=0.01)
    assert c.skill == "tensor_cores"


def test_tensor_cores_idle_not_for_elementwise_tensor_or_register_only_work() -> None:
    elementwise = {**fp_mix(ffma=8448.0, dram_per_s=3e13), SM: 70.0}
    assert cc.tensor_cores_idle(context(with_(elementwise))) is None
    on_tensor = {**fp_mix(ffma=8448.0), TENSOR: 60.0}
    assert cc.tensor_cores_idle(context(with_(on_tensor))) is None
    fractal = {**fp_mix(ffma=8448.0), cc.FFMA_TOTAL: 1e12, cc.LOAD_INST[0]: 1e5}
    assert cc.tensor_cores_idle(context(with_(fractal))) is None
    adds = {**fp_mix(ffma=100.0, fadd=8000.0)}
    assert cc.tensor_cores_idle(context(with_(adds))) is None
    fma_loop = {**fp_mix(ffma=8448.0), SM: 90.0, MEM: 2.0}  # no operands streamed
    assert cc.tensor_cores_idle(context(with_(fma_loop))) is None


def test_uncontracted_mul_add_counts_as_multiply_accumulate() -> None:
    dot = {**fp_mix(ffma=0.0), MEM: 60.0}
    dot["smsp__sass_thread_inst_executed_op_fmul_pred_on.sum.per_cycle_elapsed"] = 8448.0
    dot["smsp__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed"] = 8448.0
    assert fired(cc.tensor_cores_idle(context(with_(dot)))).ev[1].v == pytest.approx(100.0)


def test_slow_precision_uses_the_dtype_hint() -> None:
    fp64 = {**fp_mix(dfma=4000.0), SM: 80.0}
    c = fired(cc.slow_precision(context(with_(fp64))))
    assert c.note is not None and "check it is needed" in c.note
    c = fired(cc.slow_precision(context(with_(fp64), input_dtypes=["float32"])))
    assert c.note == "fp64 math on float32 inputs"
    assert c.ev[-1].v == pytest.approx(2.0)
    assert cc.slow_precision(context(with_(fp64), input_dtypes=["float64"])) is None
    assert cc.slow_precision(context(with_(fp_mix(ffma=8000.0, dfma=10.0)))) is None


# ---------------------------------------------------------------------------------------------
# Launch checks


def test_too_few_blocks() -> None:
    small = {"launch__grid_size": 4.0, "launch__waves_per_multiprocessor": 0.004}
    ncu = [rule("LaunchConfiguration", "Small Grid", 96.97)]
    c = fired(cl.too_few_blocks(context(with_(small, ncu))))
    assert c.gain == pytest.approx(97.0) and c.gain_src == "ncu:LaunchConfiguration"
    c = fired(cl.too_few_blocks(context(with_(small))))
    assert c.gain == pytest.approx(97.0) and c.gain_src == "own:idle SMs"
    assert cl.too_few_blocks(context(fake())) is None
    assert cl.too_few_blocks(context(with_({**small, DURATION: 2000.0}))) is None


def test_few_waves_when_latency_bound() -> None:
    sparse = {
        "launch__grid_size": 264.0,
        "launch__waves_per_multiprocessor": 0.125,
        SM: 10.0,
        MEM: 20.0,
    }
    assert fired(cl.too_few_blocks(context(with_(sparse)))).ev[0].cmp == "<"
    assert cl.too_few_blocks(context(with_({**sparse, MEM: 85.0}))) is None


def test_tail_effect() -> None:
    tail = {"launch__waves_per_multiprocessor": 1.01, "launch__grid_size": 133.0}
    ncu = [
        rule("LaunchConfiguration", "Tail Effect", 50.0),
        rule("LaunchConfiguration", "Small Grid", 3.0),
    ]
    c = fired(cl.tail_effect(context(with_(tail, ncu))))
    # Our idle share is the gain; ncu's rule is absorbed, its figure not taken.
    assert c.ev[0].v == pytest.approx(49.5) and c.gain == 49.5
    assert (c.gain_src, c.rules) == ("own:partial-wave idle", ["LaunchConfiguration"])
    assert cl.tail_effect(context(with_({"launch__waves_per_multiprocessor": 7.9}))) is None


def test_ncus_tail_estimate_does_not_override_the_measured_waves() -> None:
    """ncu's Tail Effect estimate is 100 / ceil(waves), however full the last wave is: at 1.94
    waves it says "up to 50 %" while 3 % of the SM time idles (the H200's barrier probe, whose
    answer was "tail effect (est. 50% faster)" when no check of ours fired)."""
    waves = {"launch__waves_per_multiprocessor": 1.94, "launch__grid_size": 1024.0}
    quiet = {**waves, "sm__throughput.avg.pct_of_peak_sustained_elapsed": 65.0}
    d = diagnose_action(with_(quiet, [rule("LaunchConfiguration", "Tail Effect", 50.0)]))
    assert all(c.id != "tail_effect" for c in d.causes), d.headline
    # Without the waves, ncu's rule is all there is: mapped, with ncu's figure.
    no_waves = {k: v for k, v in quiet.items() if k != "launch__waves_per_multiprocessor"}
    no_waves = {**{k: v for k, v in BASE.items() if k not in waves}, **no_waves}
    d = diagnose_action(FakeAction(no_waves, [rule("LaunchConfiguration", "Tail Effect", 50.0)]))
    assert d.causes and d.causes[0].id == "tail_effect" and d.causes[0].gain == 50.0


def test_a_rule_for_a_cause_our_check_measured_and_declined_is_not_passed_through() -> None:
    """The tail case above, for any mapped rule: our check read every metric it asks for and
    did not fire, so ncu's estimate for that cause is not made a cause of its own. Where the
    check lacked an input, or the bound is unknown, ncu's rule is still all there is."""
    small_grid = [rule("LaunchConfiguration", "Small Grid", 40.0)]
    quiet = {SM: 65.0}
    measured = context(with_(quiet, small_grid))
    checked = ck.run_checks(measured)
    assert not checked.fired and "too_few_blocks" in checked.declined
    assert diagnose_action(with_(quiet, small_grid)).causes == []
    no_waves = {
        k: v for k, v in {**BASE, **quiet}.items() if k != "launch__waves_per_multiprocessor"
    }
    assert "too_few_blocks" not in ck.run_checks(context(FakeAction(no_waves, small_grid))).declined
    d = diagnose_action(FakeAction(no_waves, small_grid))
    assert [(c.id, c.gain) for c in d.causes] == [("too_few_blocks", 40.0)]
    unknown = {k: v for k, v in BASE.items() if k not in (SM, MEM, DRAM)}
    assert ck.run_checks(context(FakeAction(unknown, small_grid))).declined == frozenset()
    # A cause that fired under min_gain_pct was measured too: declined, not left to ncu.
    divergent = {SM: 5.8, cc.THREADS_PER_INST: 16.0}
    assert "warp_divergence" in ck.run_checks(context(with_(divergent))).declined


def test_every_check_names_causes_of_the_vocabulary() -> None:
    for check in (*ck.CHECKS, *ck.RESIDUAL):
        assert set(ck.names_of(check)) <= set(VOCABULARY), check.__name__


OCC = {
    "sm__maximum_warps_per_active_cycle_pct": 12.5,
    "launch__occupancy_limit_registers": 1.0,
    "launch__occupancy_limit_shared_mem": 8.0,
    "launch__occupancy_limit_warps": 8.0,
    "launch__occupancy_limit_blocks": 32.0,
    "launch__registers_per_thread": 255.0,
    SM: 20.0,
    MEM: 30.0,
}


def test_occupancy_limited_by_registers() -> None:
    c = fired(cl.occupancy(context(with_(OCC))))
    assert c.id == "occupancy_registers"
    assert c.ev[1].m == "launch__occupancy_limit_registers"
    assert c.gain == pytest.approx(100 * (1 - 12.5 / 100) * 0.7, abs=0.1)


def test_occupancy_limited_by_shared_memory() -> None:
    smem = {
        **OCC,
        "launch__occupancy_limit_registers": 8.0,
        "launch__occupancy_limit_shared_mem": 1.0,
    }
    assert fired(cl.occupancy(context(with_(smem)))).id == "occupancy_shared_memory"


def test_occupancy_limited_by_block_size() -> None:
    tiny_blocks = {
        **OCC,
        "launch__block_size": 32.0,
        "sm__maximum_warps_per_active_cycle_pct": 25.0,
        "launch__occupancy_limit_registers": 64.0,
        "launch__occupancy_limit_shared_mem": 64.0,
        "launch__occupancy_limit_warps": 64.0,
        "launch__occupancy_limit_blocks": 16.0,
    }
    assert fired(cl.occupancy(context(with_(tiny_blocks)))).id == "occupancy_block_size"
    at_half = {**tiny_blocks, "launch__occupancy_limit_blocks": 32.0}
    at_half["sm__maximum_warps_per_active_cycle_pct"] = 50.0  # 32 one-warp blocks of 64 slots
    assert fired(cl.occupancy(context(with_(at_half)))).id == "occupancy_block_size"
    odd = fired(cl.occupancy(context(with_({"launch__block_size": 48.0}))))
    assert odd.id == "occupancy_block_size" and odd.note is not None


def test_occupancy_tie_with_the_block_cap_names_the_block_size() -> None:
    # 32-thread blocks: 32 blocks/SM by the hardware cap and by the 1 KB driver carveout.
    small_blocks = {
        **OCC,
        "launch__block_size": 32.0,
        "sm__maximum_warps_per_active_cycle_pct": 50.0,
        "launch__occupancy_limit_blocks": 32.0,
        "launch__occupancy_limit_shared_mem": 32.0,
        "launch__occupancy_limit_registers": 64.0,
        "launch__occupancy_limit_warps": 64.0,
    }
    assert fired(cl.occupancy(context(with_(small_blocks)))).id == "occupancy_block_size"


def test_no_occupancy_cause_when_high_or_no_looser_limit() -> None:
    assert cl.occupancy(context(fake())) is None
    tied = {**OCC, "launch__occupancy_limit_shared_mem": 1.0, "launch__occupancy_limit_warps": 1.0}
    tied["launch__occupancy_limit_blocks"] = 1.0
    assert cl.occupancy(context(with_(tied))) is None


def test_launch_bound_tiny() -> None:
    tiny = {DURATION: 2000.0, "launch__grid_size": 1.0, "launch__waves_per_multiprocessor": 0.001}
    c = fired(cl.launch_bound_tiny(context(with_(tiny))))
    assert c.gain == pytest.approx(60.0)
    assert cl.launch_bound_tiny(context(fake())) is None
    short_but_full = {**tiny, "launch__waves_per_multiprocessor": 4.0, "launch__grid_size": 4096.0}
    assert cl.launch_bound_tiny(context(with_(short_but_full))) is None
    d = diagnose_action(with_(tiny))
    assert d.causes[0].id == "launch_bound_tiny"


# ---------------------------------------------------------------------------------------------
# Roofs and ranking


def test_dram_roof_says_so_first_and_invents_nothing() -> None:
    copy = {
        SM: 20.0,
        MEM: 91.0,
        DRAM: 91.0,
        "sm__maximum_warps_per_active_cycle_pct": 25.0,
        "launch__occupancy_limit_registers": 2.0,
        "launch__occupancy_limit_shared_mem": 32.0,
        "launch__occupancy_limit_warps": 8.0,
        "launch__occupancy_limit_blocks": 32.0,
    }
    d = diagnose_action(
        with_(copy, [rule("TheoreticalOccupancy", "Theoretical Occupancy", 75.0, 1)])
    )
    assert [c.id for c in d.causes] == ["dram_at_roof"]
    assert d.headline.startswith("at 91% of the DRAM roof: only moving fewer bytes helps")
    assert d.bound.bound == "memory-bound"


def test_at_the_dram_roof_a_byte_saving_cause_comes_first() -> None:
    gather = {SM: 20.0, MEM: 90.0, DRAM: 88.0, **UNCOALESCED}
    d = diagnose_action(with_(gather))
    assert [c.id for c in d.causes] == ["uncoalesced_global_access", "dram_at_roof"]
    assert d.headline.startswith("at 88% of the DRAM roof")


def test_symptoms_fold_into_the_cause() -> None:
    rules = [
        rule("HighPipeUtilization", "Low Utilization", 95.0, 1),
        rule("SharedMemoryConflicts", "Shared Load Bank Conflicts", 45.0),
        rule("CPIStallShortScoreboard", "Short Scoreboard", 30.0, 1),
        rule("WorkloadImbalance", "Imbalance", 5.0),
    ]
    conflicted = {cm.SHARED_CONFLICTS[0]: 31e6, cm.SHARED_WAVEFRONTS[0]: 32e6, SM: 55.0}
    d = diagnose_action(with_(conflicted, rules))
    top = d.causes[0]
    assert top.id == "shared_bank_conflicts" and top.gain == 45.0
    assert top.rules == ["SharedMemoryConflicts", "HighPipeUtilization", "CPIStallShortScoreboard"]
    assert d.unmapped == ["WorkloadImbalance: Imbalance (5%)"]


def test_excess_bytes_fold_into_uncoalesced_access() -> None:
    extra = {**UNCOALESCED, cm.DRAM_RW[0]: 900e6}
    d = diagnose_action(with_(extra), ideal_bytes=100e6)
    ids = [c.id for c in d.causes]
    assert ids[0] == "uncoalesced_global_access" and "excess_dram_traffic" not in ids
    assert any(e.m == "DRAM bytes / ideal bytes" for e in d.causes[0].ev)


def test_ranking_by_gain_and_small_gains_dropped() -> None:
    both = {
        **OCC,
        SM: 10.0,
        cc.THREADS_PER_INST: 23.0,  # divergent: 9/32 idle lanes x 10 % SM busy = 2.8 % gain
        "launch__waves_per_multiprocessor": 1.01,  # tail: 49.5 %
    }
    # The divergence check fires on its own; only the minimum-gain rule (3 %) drops it.
    small = fired(cc.warp_divergence(context(with_(both))))
    assert small.gain == pytest.approx(2.8)
    d = diagnose_action(with_(both))
    assert [c.id for c in d.causes] == ["occupancy_registers", "tail_effect"]
    assert d.causes[0].gain == pytest.approx(61.2) and d.causes[1].gain == pytest.approx(49.5)
    kept = diagnose_action(with_(both), thresholds=DiagnosisThresholds(min_gain_pct=2.8))
    assert [c.id for c in kept.causes] == ["occupancy_registers", "tail_effect", "warp_divergence"]


def everything() -> FakeAction:
    metrics: dict[str, object] = {
        **UNCOALESCED,
        **OCC,
        cm.SHARED_CONFLICTS[0]: 31e6,
        cm.SHARED_WAVEFRONTS[0]: 32e6,
        cm.LOCAL_BYTES[0]: 40e6,
        cm.GLOBAL_BYTES[0]: 80e6,
        cc.THREADS_PER_INST: 8.0,
        "launch__waves_per_multiprocessor": 1.01,
        cm.DRAM_RW[0]: 900e6,
    }
    rules = [
        rule(f"Rule{i}", "A rule with a rather long title for its size" * 2, 10.0 + i)
        for i in range(8)
    ]
    return with_(metrics, rules)


def test_one_kernel_fits_in_two_kilobytes() -> None:
    d = diagnose_action(everything(), ideal_bytes=100e6, input_dtypes=["bfloat16"])
    assert len(d.causes) == 3
    size = len(d.model_dump_json(exclude_none=True))
    assert size <= 2048, size


def test_every_field_is_described() -> None:
    for model in (KernelDiagnosis, Cause, Evidence, BoundResult):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name}"


def test_vocabulary_is_complete_and_skills_exist_or_are_planned() -> None:
    planned = {"tensor_cores", "launch_config"}
    for entry in VOCABULARY.values():
        assert 2 <= len(entry.actions) <= 4, entry.id
        assert (SKILLS / entry.skill).is_dir() or entry.skill in planned


def test_sections_collected_and_deeper_pass() -> None:
    d = diagnose_action(fake())
    assert "SpeedOfLight" in d.collected and "LaunchStats" in d.collected
    assert d.deeper is not None and "SourceCounters" in d.deeper


# ---------------------------------------------------------------------------------------------
# The recorded cuBLAS bf16 GEMM (H200): compute-bound, near the tensor roof, no invented defect


def test_recorded_gemm_is_at_the_tensor_roof_with_no_defect() -> None:
    action = ncu_report.load_report(str(FIXTURE)).range_by_idx(0).action_by_idx(0)
    d = diagnose_action(action)
    assert d.bound.bound == "compute-bound"
    assert [c.id for c in d.causes] == ["compute_at_roof"]
    assert d.headline.startswith("at 75% of the tensor roof") or d.headline.startswith(
        "at 76% of the tensor roof"
    )
    assert d.deeper is not None and "SpeedOfLight_HierarchicalTensorRooflineChart" in d.deeper
    assert len(d.model_dump_json(exclude_none=True)) <= 2048
