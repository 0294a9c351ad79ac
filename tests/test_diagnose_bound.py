"""bound: the roofline-aware bound classification, on fake actions and the recorded H200 GEMM."""

from __future__ import annotations

from pathlib import Path

import ncu_report
import pytest

from nsight_agent.diagnose.bound import classify
from nsight_agent.diagnose.kernel import diagnose_action
from nsight_agent.diagnose.thresholds import DiagnosisThresholds
from nsight_agent.service.diagnose import diagnose_file
from tests.fakes import FakeAction

FIXTURE = Path(__file__).parent / "fixtures" / "h200_bf16_matmul_sections.ncu-rep"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEM = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
TENSOR = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"


SM_CLOCK = 1.755e9
DRAM_PEAK = {
    "dram__bytes.sum.peak_sustained": 1504.0,
    "dram__cycles_elapsed.avg.per_second": 3.2e9,
    "sm__cycles_elapsed.avg.per_second": SM_CLOCK,
    "smsp__cycles_elapsed.avg.per_second": SM_CLOCK,
}
BF16_PEAK_PER_CYCLE = 4096.0 * 132  # dense hgmma bf16 FLOP per cycle, whole GPU


def bf16_gemm(sm: float, mem: float, pct_of_tensor_peak: float, intensity: float) -> FakeAction:
    """A tensor-core GEMM: its bf16 FLOP rate and DRAM bytes set from the numbers given."""
    per_cycle = BF16_PEAK_PER_CYCLE * pct_of_tensor_peak / 100.0
    flops = per_cycle * SM_CLOCK
    return FakeAction(
        {
            SM: sm,
            MEM: mem,
            TENSOR: pct_of_tensor_peak,
            "gpu__time_duration.sum": 1e6,
            "dram__bytes.sum.per_second": flops / intensity,
            "sm__ops_path_tensor_src_bf16_dst_fp32.sum.per_cycle_elapsed": per_cycle,
            "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained": (
                BF16_PEAK_PER_CYCLE
            ),
            **DRAM_PEAK,
        }
    )


def test_both_low_is_latency_bound() -> None:
    b = classify(FakeAction({SM: 30.0, MEM: 41.0}))
    assert b.bound == "latency-bound" and b.basis == "sol"
    assert "both < 60" in b.why


def test_clear_gap_goes_to_the_larger_side() -> None:
    assert classify(FakeAction({SM: 90.0, MEM: 40.0})).bound == "compute-bound"
    b = classify(FakeAction({SM: 35.0, MEM: 88.0}))
    assert (b.bound, b.basis) == ("memory-bound", "sol")


def test_cublas_gemm_close_call_is_decided_by_the_roofline() -> None:
    # A bf16 GEMM at 93 % of the tensor peak, 809 FLOP/B; SOL alone said memory-bound.
    b = classify(bf16_gemm(sm=93.6, mem=94.8, pct_of_tensor_peak=93.0, intensity=809.0))
    assert b.bound == "compute-bound"
    assert b.basis == "roofline"
    assert b.intensity == pytest.approx(809.0, rel=1e-3)
    assert b.ridge is not None and b.ridge < 809.0
    assert b.precision == "tensor_bf16"
    assert b.roof == "compute" and b.roof_pct == pytest.approx(93.0, abs=0.1)


def test_close_call_left_of_the_ridge_is_memory_bound() -> None:
    b = classify(bf16_gemm(sm=70.0, mem=75.0, pct_of_tensor_peak=30.0, intensity=20.0))
    assert (b.bound, b.basis) == ("memory-bound", "roofline")


def test_both_high_uses_the_roofline_even_when_apart() -> None:
    b = classify(bf16_gemm(sm=99.0, mem=82.0, pct_of_tensor_peak=90.0, intensity=500.0))
    assert (b.bound, b.basis) == ("compute-bound", "roofline")


def test_busy_tensor_pipe_without_tensor_counters_is_compute() -> None:
    b = classify(FakeAction({SM: 85.0, MEM: 90.0, TENSOR: 80.0}))
    assert (b.bound, b.basis) == ("compute-bound", "tensor_pipe")
    assert b.roof == "compute"


def test_close_call_without_intensity_falls_back_to_sol() -> None:
    b = classify(FakeAction({SM: 70.0, MEM: 75.0}))
    assert (b.bound, b.basis) == ("memory-bound", "sol")
    assert "no intensity" in b.why


def test_dram_roof_and_thresholds_are_configurable() -> None:
    fake = FakeAction(
        {SM: 20.0, MEM: 92.0, "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": 90.0}
    )
    assert classify(fake).roof == "dram"
    assert classify(fake, DiagnosisThresholds(dram_roof_pct=95.0)).roof is None


def test_missing_sol_is_unknown() -> None:
    assert classify(FakeAction({})).bound == "unknown"


def test_recorded_cublas_bf16_gemm_is_compute_bound_near_the_tensor_roof() -> None:
    action = ncu_report.load_report(str(FIXTURE)).range_by_idx(0).action_by_idx(0)
    b = classify(action)
    assert b.bound == "compute-bound"
    assert b.roof == "compute"
    assert b.tensor_pct is not None and b.tensor_pct > 70.0
    assert b.dram_pct is not None and b.dram_pct < 10.0


def test_a_kernel_at_the_tensor_roof_is_not_told_to_use_tensor_cores() -> None:
    """compute_at_roof's first move follows the precision the report shows: fp8 for a bf16
    kernel already on the tensor cores, an admitted unknown where the tensor counts are absent
    (the planted Triton tl.dot control), tensor cores only where the roof is the FMA pipe."""
    gemm = bf16_gemm(sm=93.6, mem=40.0, pct_of_tensor_peak=93.0, intensity=809.0)
    mine = diagnose_action(gemm, user_kernels={"kernel"})
    assert [c.id for c in mine.causes] == ["compute_at_roof"]
    assert mine.causes[0].actions[0].startswith("It runs tensor_bf16 on the tensor cores already")
    assert not any("Use a faster precision/unit" in a for a in mine.causes[0].actions)
    planted = Path(__file__).parent / "fixtures" / "planted"
    dot = diagnose_file(planted / "control_dot_triton.ncu-rep", limit=1, one_line=0)
    move = dot.kernels[0].diagnosis.causes[0].actions[0]
    assert move.startswith("It runs on the tensor cores already; which precision, the report")
    fma = diagnose_file(planted / "control_fma_cuda.ncu-rep", limit=1, one_line=0)
    assert fma.kernels[0].diagnosis.causes[0].actions[0].startswith("Use a faster precision/unit")
