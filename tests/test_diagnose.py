"""diagnose: roofline, bound and findings from the recorded H200 fixture and measured values."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import ncu_report
import pytest

from nsight_agent.catalog import metrics as mc
from nsight_agent.diagnose import findings as fd
from nsight_agent.diagnose import metrics as dm
from nsight_agent.diagnose import roofline as rl
from nsight_agent.diagnose import throughput as tp
from tests.fakes import FakeAction

FIXTURE = Path(__file__).parent / "fixtures" / "h200_bf16_matmul_sections.ncu-rep"


@pytest.fixture(scope="module")
def action() -> Any:
    return ncu_report.load_report(str(FIXTURE)).range_by_idx(0).action_by_idx(0)


def raw(action: Any, name: str) -> float:
    return float(action[name].value())


# Values of every metric in dm.bound_metrics(), read with ncu_report from a report recorded on
# an H200 (ncu 2025.3.1, driver 580.159.04) with skills/roofline/bundle.json and
# ncu's default clock control (SM clock locked near 1.28 GHz). Three kernels of one script:
# torch.matmul of two 2048x2048 bf16 matrices (cuBLAS nvjet, tensor cores), torch.addcmul on
# three fp32 vectors of 2**24 elements (memory-bound), and add_ on 256 floats (one block).
BF16_MATMUL: dict[str, float] = {
    "gpu__time_duration.sum": 32896.0,
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": 75.50972571828957,
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": 58.82757053814694,
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": 10.733537201648225,
    "l1tex__throughput.avg.pct_of_peak_sustained_active": 65.70122168835115,
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": 26.449699998026688,
    "gpc__cycles_elapsed.max": 42747.0,
    "sm__cycles_active.avg": 37678.23484848485,
    "gpc__cycles_elapsed.avg.per_second": 1278859891.7801557,
    "dram__cycles_elapsed.avg.per_second": 3194552529.1828794,
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed": 75.50972571828957,
    "sm__cycles_elapsed.avg.per_second": 1279204527.0310104,
    "smsp__cycles_elapsed.avg.per_second": 1279204527.0310104,
    "dram__bytes.sum": 16964608.0,
    "dram__bytes.sum.per_second": 515704280155.64197,
    "dram__bytes.sum.peak_sustained": 1504.0,
    "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum.per_cycle_elapsed": 0.0,
    "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained": 8448.0,
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed": 0.0,
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained": 16896.0,
    "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum.per_cycle_elapsed": 0.0,
    "sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained": 16896.0,
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum.per_cycle_elapsed": 408259.9442355906,
    "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained": 540672.0,
    "sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained": 360448.0,
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum.peak_sustained": 1081344.0,
    "sm__ops_path_tensor_src_fp16.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_off.sum.peak_sustained": 540672.0,
    "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp32_sparsity_off.sum.peak_sustained": 360448.0,
    "sm__ops_path_tensor_src_fp16.sum.peak_sustained": 1081344.0,
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained": 270336.0,
    "sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained": 180224.0,
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum.peak_sustained": 540672.0,
    "sm__ops_path_tensor_src_fp8_sparsity_off.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_src_fp8_sparsity_on.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_src_fp8_sparsity_off.sum.peak_sustained": 1081344.0,
    "sm__ops_path_tensor_src_fp64.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_src_fp64.sum.peak_sustained": 33792.0,
}

FP32_ADDCMUL: dict[str, float] = {
    "gpu__time_duration.sum": 60128.0,
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": 7.91372848720074,
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": 88.30098549917214,
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": 88.30098549917214,
    "l1tex__throughput.avg.pct_of_peak_sustained_active": 25.458230092187588,
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": 92.63218927257533,
    "gpc__cycles_elapsed.max": 89784.0,
    "sm__cycles_active.avg": 86798.47727272728,
    "gpc__cycles_elapsed.avg.per_second": 1485655601.3837147,
    "dram__cycles_elapsed.avg.per_second": 3197755898.5275855,
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed": 0.0,
    "sm__cycles_elapsed.avg.per_second": 1485740269.2437952,
    "smsp__cycles_elapsed.avg.per_second": 1485740269.2437952,
    "dram__bytes.sum": 255349760.0,
    "dram__bytes.sum.per_second": 4246769558275.6787,
    "dram__bytes.sum.peak_sustained": 1504.0,
    "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum.per_cycle_elapsed": 0.0,
    "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained": 8448.0,
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed": 187.80201296352172,
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained": 16896.0,
    "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum.per_cycle_elapsed": 0.0,
    "sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained": 16896.0,
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained": 540672.0,
    "sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained": 360448.0,
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum.peak_sustained": 1081344.0,
    "sm__ops_path_tensor_src_fp16.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_off.sum.peak_sustained": 540672.0,
    "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp32_sparsity_off.sum.peak_sustained": 360448.0,
    "sm__ops_path_tensor_src_fp16.sum.peak_sustained": 1081344.0,
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained": 270336.0,
    "sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained": 180224.0,
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum.peak_sustained": 540672.0,
    "sm__ops_path_tensor_src_fp8_sparsity_off.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_src_fp8_sparsity_on.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_src_fp8_sparsity_off.sum.peak_sustained": 1081344.0,
    "sm__ops_path_tensor_src_fp64.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_src_fp64.sum.peak_sustained": 33792.0,
}

TINY_ADD: dict[str, float] = {
    "gpu__time_duration.sum": 2464.0,
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": 0.028608691993773402,
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": 0.6782541684920589,
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": 0.053117714757871755,
    "l1tex__throughput.avg.pct_of_peak_sustained_active": 77.59000734753857,
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": 0.6782541684920589,
    "gpc__cycles_elapsed.max": 3603.0,
    "sm__cycles_active.avg": 10.31060606060606,
    "gpc__cycles_elapsed.avg.per_second": 1461596996.7532468,
    "dram__cycles_elapsed.avg.per_second": 3121212121.2121215,
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed": 0.0008414321174639236,
    "sm__cycles_elapsed.avg.per_second": 1461592384.8878393,
    "smsp__cycles_elapsed.avg.per_second": 1461592384.8878393,
    "dram__bytes.sum": 6144.0,
    "dram__bytes.sum.per_second": 2493506493.5064936,
    "dram__bytes.sum.peak_sustained": 1504.0,
    "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum.per_cycle_elapsed": 0.0,
    "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained": 8448.0,
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed": 0.28433674113340907,
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained": 16896.0,
    "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum.per_cycle_elapsed": 0.0,
    "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum.per_cycle_elapsed": 0.07108418528335227,
    "sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained": 16896.0,
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained": 540672.0,
    "sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained": 360448.0,
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum.peak_sustained": 1081344.0,
    "sm__ops_path_tensor_src_fp16.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_off.sum.peak_sustained": 540672.0,
    "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp32_sparsity_off.sum.peak_sustained": 360448.0,
    "sm__ops_path_tensor_src_fp16.sum.peak_sustained": 1081344.0,
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained": 270336.0,
    "sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained": 180224.0,
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum.peak_sustained": 540672.0,
    "sm__ops_path_tensor_src_fp8_sparsity_off.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_src_fp8_sparsity_on.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_src_fp8_sparsity_off.sum.peak_sustained": 1081344.0,
    "sm__ops_path_tensor_src_fp64.sum.per_cycle_elapsed": 0.0,
    "sm__ops_path_tensor_src_fp64.sum.peak_sustained": 33792.0,
}

# ncu's SOLBottleneck result for the 256-element kernel of the same report.
TINY_RULES: list[dict[str, Any]] = [
    {
        "rule_identifier": "SOLBottleneck",
        "name": "Bottleneck",
        "section_identifier": "SpeedOfLight",
        "rule_message": {
            "title": "Small Grid",
            "message": "This kernel grid is too small to fill the available resources on this device, resulting in only 0.0 full waves across all SMs. Look at @section:LaunchStats:Launch Statistics@ for more details.",
            "type": 2,
        },
        "focus_metrics": [
            {
                "name": "launch__waves_per_multiprocessor",
                "value": 0.0004734848484848485,
                "severity": 2,
                "info": "Increase the number of waves per SM towards 1",
            }
        ],
    }
]


def close(a: float | None, b: float, rel: float = 1e-9) -> bool:
    return a is not None and math.isclose(a, b, rel_tol=rel)


def point(roof: rl.Roofline, precision: str) -> rl.PrecisionPoint:
    return next(p for p in roof.precisions if p.precision == precision)


# --- the recorded fixture: cuBLAS bf16 2048^3 on an H200 -------------------------------------


def test_fixture_peaks_recomputed_from_raw_metrics(action: Any) -> None:
    roof = rl.roofline(action)
    sm_clock = raw(action, "sm__cycles_elapsed.avg.per_second")
    dram_clock = raw(action, "dram__cycles_elapsed.avg.per_second")
    ffma_peak = raw(action, "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained")
    dfma_peak = raw(action, "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained")
    assert close(roof.sm_frequency_hz, sm_clock)
    assert close(point(roof, "fp32").peak_flop_per_s, 2 * ffma_peak * sm_clock)
    assert close(point(roof, "fp64").peak_flop_per_s, 2 * dfma_peak * sm_clock)
    # The same peak from the device's shape: 132 SMs x 128 fp32 lanes x 2 FLOP per FMA.
    sms = raw(action, "device__attribute_multiprocessor_count")
    assert close(point(roof, "fp32").peak_flop_per_s, sms * 128 * 2 * sm_clock)
    assert close(point(roof, "fp32").peak_flop_per_s, 43.379e12, rel=1e-3)  # at ~1.28 GHz
    ratio = raw(action, "device__attribute_single_to_double_precision_perf_ratio")
    fp32_peak = point(roof, "fp32").peak_flop_per_s
    assert fp32_peak is not None
    assert close(point(roof, "fp64").peak_flop_per_s, fp32_peak / ratio)
    # DRAM: 1504 bytes per DRAM cycle x 3.2 GHz, the H200's 4.8 TB/s.
    peak_bw = raw(action, "dram__bytes.sum.peak_sustained") * dram_clock
    assert close(roof.peak_dram_bytes_per_s, peak_bw)
    assert close(roof.peak_dram_bytes_per_s, 4.8086e12, rel=1e-3)


def test_fixture_traffic_and_bandwidth(action: Any) -> None:
    roof = rl.roofline(action)
    per_s = raw(action, "dram__bytes.sum.per_second")
    duration = raw(action, "gpu__time_duration.sum")
    assert roof.duration_ns == duration == 32800.0
    assert close(roof.dram_bytes_per_s, per_s)
    assert close(roof.dram_bytes, per_s * duration * 1e-9)
    # Our % of peak bandwidth agrees with ncu's own DRAM throughput metric.
    assert roof.dram_pct_of_peak == pytest.approx(
        raw(action, "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"), abs=0.01
    )


def test_fixture_tensor_work_is_reported_missing_not_zero(action: Any) -> None:
    roof = rl.roofline(action)
    # A bf16 matmul runs no FFMA/DFMA: those precisions are measured and zero ...
    assert point(roof, "fp32").achieved_flop_per_s == 0.0
    assert point(roof, "fp64").achieved_flop_per_s == 0.0
    # ... while its tensor-core work was not collected: None, with the names to ask for.
    bf16 = point(roof, "tensor_bf16")
    assert bf16.achieved_flop_per_s is None and bf16.peak_flop_per_s is None
    assert "sm__ops_path_tensor_src_bf16_dst_fp32.sum.per_cycle_elapsed" in roof.missing_metrics
    assert "SpeedOfLight_HierarchicalTensorRooflineChart" in roof.sections_to_collect
    assert "SpeedOfLight_HierarchicalHalfRooflineChart" in roof.sections_to_collect
    assert point(roof, "half").achieved_flop_per_s is None
    assert not roof.flop_counts_complete
    assert roof.dominant_precision is None
    assert roof.arithmetic_intensity is None and roof.pct_of_roofline is None
    # The work shows in the tensor pipe's busy share, and the notes say so.
    assert roof.tensor_pipe_pct == pytest.approx(75.465, abs=1e-3)
    assert any("tensor pipe was busy 75.5%" in n for n in roof.notes)
    assert all(mc.is_valid_metric(m, mc.bundled_catalog()) for m in roof.missing_metrics)


def test_fixture_is_compute_bound_by_speed_of_light(action: Any) -> None:
    roof = rl.roofline(action)
    assert roof.compute_throughput_pct == raw(action, dm.SM_THROUGHPUT)
    assert roof.memory_throughput_pct == raw(action, dm.MEM_THROUGHPUT)
    assert roof.bound == "compute-bound"
    assert roof.bound_basis == "speed_of_light"
    assert "compute 75.5%, memory 58.8%" in roof.bound_reason
    assert roof.thresholds.latency_bound_below_pct == 60.0
    # With a stricter latency cut-off the same kernel counts as latency-bound.
    strict = rl.roofline(action, rl.BoundThresholds(latency_bound_below_pct=80.0))
    assert strict.bound == "latency-bound"
    assert "under 80%" in strict.bound_reason


def test_fixture_speed_of_light(action: Any) -> None:
    sol = tp.speed_of_light(action)
    assert sol.duration_ns == 32800.0
    assert sol.compute_throughput_pct == pytest.approx(75.465, abs=1e-3)
    assert sol.memory_throughput_pct == pytest.approx(58.799, abs=1e-3)
    assert sol.dram_throughput_pct == pytest.approx(5.332, abs=1e-3)
    assert sol.elapsed_cycles == raw(action, "gpc__cycles_elapsed.max")
    assert sol.waves_per_sm == pytest.approx(128 / 132)
    assert sol.missing_metrics == [] and sol.sections_to_collect == []
    top = [u.metric for u in sol.top_compute_units]
    assert "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed" in top
    assert sol.top_compute_units[0].pct_of_peak == pytest.approx(75.465, abs=1e-3)
    assert sol.top_memory_units[0].metric.startswith("l1tex__")  # shared memory, not DRAM


def test_fixture_findings(action: Any) -> None:
    found = fd.findings(action)
    small = [f for f in found if f.title == "Small Grid"]
    assert len(small) == 1
    grid = small[0]
    assert (grid.rule_id, grid.section, grid.type) == (
        "LaunchConfiguration",
        "LaunchStats",
        "optimization",
    )
    assert grid.estimated_speedup_pct == pytest.approx(100 / 33)  # 4 of 132 SMs idle
    assert grid.speedup_type == "global"
    assert grid.focus_metrics[0].name == "launch__grid_size"
    assert grid.focus_metrics[0].value == 128.0
    assert grid.focus_metrics[0].severity == "high"
    assert "See the Hardware Model description" in grid.message
    assert grid.links == [
        "https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#metrics-hw-model"
    ]
    for f in found:
        assert "@" not in f.message, f.message
    bottleneck = next(f for f in found if f.rule_id == "SOLBottleneck")
    assert "Look at the Compute Workload Analysis section" in bottleneck.message
    assert bottleneck.linked_sections == ["ComputeWorkloadAnalysis"]
    occupancy = next(f for f in found if f.rule_id == "TheoreticalOccupancy")
    assert occupancy.title == "Theoretical Occupancy"  # ncu gave no title: the rule's name
    assert occupancy.speedup_type == "local"
    roof = next(f for f in found if f.rule_id == "SOLFPRoofline")
    assert roof.type == "ok"
    speedups = [f.estimated_speedup_pct for f in found]
    assert speedups == [81.25, pytest.approx(100 / 33), None, None]


# --- measured on the H200 with the roofline bundle -------------------------------------------


def test_bf16_tensor_flops_match_the_matmul_flop_count() -> None:
    roof = rl.roofline(FakeAction(BF16_MATMUL))
    bf16 = point(roof, "tensor_bf16")
    duration_s = BF16_MATMUL["gpu__time_duration.sum"] * 1e-9
    # 2 * M * N * K FLOP for a 2048^3 product, over the kernel's duration.
    assert bf16.achieved_flop_per_s == pytest.approx(2 * 2048**3 / duration_s, rel=5e-3)
    # The dense peak is 4096 bf16 FLOP per cycle per SM (132 SMs).
    assert bf16.peak_from == (
        "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained"
    )
    assert bf16.peak_flop_per_s == pytest.approx(
        132 * 4096 * BF16_MATMUL["sm__cycles_elapsed.avg.per_second"]
    )
    # % of the dense peak agrees with the tensor pipe's busy share, an independent counter.
    assert bf16.pct_of_peak == pytest.approx(BF16_MATMUL[dm.TENSOR_PIPE], abs=0.5)
    assert roof.dominant_precision == "tensor_bf16"
    assert roof.flop_counts_complete
    assert roof.bound == "compute-bound"
    assert roof.roofline_side == "compute"
    assert roof.arithmetic_intensity is not None and roof.ridge_point is not None
    assert roof.arithmetic_intensity > roof.ridge_point
    assert bf16.peak_flop_per_s is not None and roof.peak_dram_bytes_per_s is not None
    assert roof.ridge_point == pytest.approx(bf16.peak_flop_per_s / roof.peak_dram_bytes_per_s)
    # Right of the ridge the roof is the peak itself.
    assert roof.pct_of_roofline == pytest.approx(bf16.pct_of_peak)
    assert roof.missing_metrics == [] and roof.notes == []


def test_fp32_elementwise_is_memory_bound() -> None:
    roof = rl.roofline(FakeAction(FP32_ADDCMUL))
    fp32 = point(roof, "fp32")
    duration_s = FP32_ADDCMUL["gpu__time_duration.sum"] * 1e-9
    # One FMA (2 FLOP) per element of 2**24.
    assert fp32.achieved_flop_per_s is not None
    assert fp32.achieved_flop_per_s * duration_s == pytest.approx(2 * 2**24, rel=5e-3)
    assert roof.dominant_precision == "fp32"
    assert roof.bound == "memory-bound"
    assert roof.roofline_side == "memory"
    assert roof.dram_pct_of_peak == pytest.approx(
        FP32_ADDCMUL["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"], abs=0.05
    )
    # addcmul(input, t1, t2) reads three vectors and writes one: 4 x 64 MiB, 1/8 FLOP per byte.
    # DRAM saw about 5% less: part of the output was still in L2 when the kernel ended.
    assert roof.dram_bytes == pytest.approx(4 * 4 * 2**24, rel=0.1)
    assert roof.arithmetic_intensity == pytest.approx(2 / 16, rel=0.1)
    assert roof.arithmetic_intensity is not None and roof.peak_dram_bytes_per_s is not None
    attainable = roof.arithmetic_intensity * roof.peak_dram_bytes_per_s
    assert roof.attainable_flop_per_s == pytest.approx(attainable)
    assert roof.pct_of_roofline == pytest.approx(roof.dram_pct_of_peak, rel=1e-6)


def test_one_block_kernel_is_latency_bound() -> None:
    roof = rl.roofline(FakeAction(TINY_ADD))
    assert roof.bound == "latency-bound"
    assert "both under 60%" in roof.bound_reason
    found = fd.findings(FakeAction(TINY_ADD, TINY_RULES))
    assert [f.title for f in found] == ["Small Grid"]
    assert found[0].message.endswith("Look at Launch Statistics for more details.")
    assert found[0].linked_sections == ["LaunchStats"]


def test_roofline_fallback_without_speed_of_light() -> None:
    metrics = {
        k: v for k, v in BF16_MATMUL.items() if k not in (dm.SM_THROUGHPUT, dm.MEM_THROUGHPUT)
    }
    roof = rl.roofline(FakeAction(metrics))
    assert roof.bound_basis == "roofline"
    assert roof.bound == "compute-bound"
    assert "dominant precision" in roof.bound_reason
    assert set(roof.missing_metrics) == {dm.SM_THROUGHPUT, dm.MEM_THROUGHPUT}
    assert roof.sections_to_collect == ["SpeedOfLight"]


def test_empty_action_is_unknown_with_everything_missing() -> None:
    roof = rl.roofline(FakeAction({}))
    assert roof.bound == "unknown" and roof.bound_basis == "none"
    assert roof.achieved_flop_per_s is None
    assert set(roof.sections_to_collect) == {
        "SpeedOfLight",
        "SpeedOfLight_RooflineChart",
        "SpeedOfLight_HierarchicalHalfRooflineChart",
        "SpeedOfLight_HierarchicalTensorRooflineChart",
    }
    sol = tp.speed_of_light(FakeAction({"gpu__time_duration.sum": "not a number"}))
    assert sol.duration_ns is None
    assert sol.top_compute_units == []


def test_sparse_tensor_work_is_flagged() -> None:
    metrics = dict(BF16_MATMUL)
    metrics["sm__ops_path_tensor_src_bf16_dst_fp32.sum.per_cycle_elapsed"] = 540672.0 * 1.5
    roof = rl.roofline(FakeAction(metrics))
    assert point(roof, "tensor_bf16").pct_of_peak == pytest.approx(150.0)
    assert any("2:4-sparse" in n for n in roof.notes)


# --- names ----------------------------------------------------------------------------------


def test_bound_metrics_are_valid_gh100_names_and_cover_roofline() -> None:
    names = dm.bound_metrics()
    assert len(names) == len(set(names))
    mc.validate_metrics(names, mc.bundled_catalog())
    assert set(dm.bound_sections()) <= set(mc.known_sections())
    # Every metric the measured kernels needed is in the list, and nothing was missing.
    assert set(BF16_MATMUL) == set(names)


def test_enum_numbers_match_ncu_report() -> None:
    assert fd.MESSAGE_TYPES[ncu_report.MsgType_NONE] == "none"
    assert fd.MESSAGE_TYPES[ncu_report.MsgType_OK] == "ok"
    assert fd.MESSAGE_TYPES[ncu_report.MsgType_OPTIMIZATION] == "optimization"
    assert fd.MESSAGE_TYPES[ncu_report.MsgType_WARNING] == "warning"
    assert fd.MESSAGE_TYPES[ncu_report.MsgType_ERR] == "error"
    assert fd.SPEEDUP_TYPES[ncu_report.SpeedupType_LOCAL] == "local"
    assert fd.SPEEDUP_TYPES[ncu_report.SpeedupType_GLOBAL] == "global"
    assert fd.FOCUS_SEVERITIES[ncu_report.FocusSeverity_HIGH] == "high"
    assert fd.FOCUS_SEVERITIES[ncu_report.FocusSeverity_LOW] == "low"


# --- findings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "text", "sections", "links"),
    [
        ("plain words", "plain words", [], []),
        (
            "See @url:the guide:https://example.com/a:b#c@ now.",
            "See the guide now.",
            [],
            ["https://example.com/a:b#c"],
        ),
        ("Open @section:WarpStateStats:Warp State@.", "Open Warp State.", ["WarpStateStats"], []),
        ("At @sass:0x1a0:this instruction@.", "At this instruction.", [], []),
        ("In @source:C:\\k\\x.cu:42:the loop@ here", "In the loop (C:\\k\\x.cu:42) here", [], []),
        ("  spread\n  over   lines ", "spread over lines", [], []),
    ],
)
def test_plain_text(message: str, text: str, sections: list[str], links: list[str]) -> None:
    assert fd.plain_text(message) == (text, sections, links)


def test_findings_drop_empty_results_and_sort() -> None:
    def rule(
        rid: str, msg: str, kind: int, speedup: float | None = None, title: str = ""
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rule_identifier": rid,
            "name": rid.title(),
            "section_identifier": "S",
            "rule_message": {"title": title, "message": msg, "type": kind},
        }
        if speedup is not None:
            out["speedup_estimation"] = {"type": 2, "speedup": speedup}
        return out

    rules = [
        rule("empty", "", 0),
        rule("blank", "   ", 1, title=" "),
        rule("info", "fine", 1),
        rule("warn", "careful", 3),
        rule("small", "a little", 2, 2.0),
        rule("big", "a lot", 2, 40.0),
        rule("err", "broken", 4),
    ]
    found = fd.findings(FakeAction({}, rules))
    assert [f.rule_id for f in found] == ["big", "small", "err", "warn", "info"]
    assert [f.type for f in found] == ["optimization", "optimization", "error", "warning", "ok"]
    assert found[0].title == "Big"
