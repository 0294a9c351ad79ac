"""What the diagnosis reads from a report: metric names, the sections that collect them, and a
reader over one ``ncu_report`` action that remembers which metrics were absent.

Every other module of ``nsight_agent.diagnose`` reads through ``Reader``, so a missing metric is
reported with the section that collects it instead of failing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Literal, Protocol, cast

from pydantic import BaseModel

from nsight_agent.request import TIME_METRIC

Precision = Literal[
    "fp64",
    "fp32",
    "half",
    "tensor_fp64",
    "tensor_tf32",
    "tensor_fp16",
    "tensor_bf16",
    "tensor_fp8",
]
Bound = Literal["memory-bound", "compute-bound", "latency-bound", "unknown"]


class MetricLike(Protocol):
    def value(self) -> Any: ...


class ActionLike(Protocol):
    """What this module needs of an ``ncu_report.IAction``."""

    def name(self) -> str: ...

    def metric_names(self) -> Iterable[str]: ...

    def __getitem__(self, name: str) -> MetricLike: ...

    def rule_results_as_dicts(self) -> list[dict[str, Any]]: ...


# ---------------------------------------------------------------------------------------------
# Metric names and the sections that collect them

DURATION = TIME_METRIC
SM_THROUGHPUT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEM_THROUGHPUT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_THROUGHPUT = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
L1_THROUGHPUT = "l1tex__throughput.avg.pct_of_peak_sustained_active"
L2_THROUGHPUT = "lts__throughput.avg.pct_of_peak_sustained_elapsed"
ELAPSED_CYCLES = "gpc__cycles_elapsed.max"
SM_ACTIVE_CYCLES = "sm__cycles_active.avg"
GPC_CLOCK = "gpc__cycles_elapsed.avg.per_second"
WAVES = "launch__waves_per_multiprocessor"
SM_CLOCK = "sm__cycles_elapsed.avg.per_second"
SMSP_CLOCK = "smsp__cycles_elapsed.avg.per_second"
DRAM_CLOCK = "dram__cycles_elapsed.avg.per_second"
DRAM_BYTES = "dram__bytes.sum"
DRAM_BYTES_PER_S = "dram__bytes.sum.per_second"
DRAM_PEAK_PER_CYCLE = "dram__bytes.sum.peak_sustained"
TENSOR_PIPE = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
BREAKDOWN_SM = "breakdown:" + SM_THROUGHPUT
BREAKDOWN_MEM = "breakdown:" + MEM_THROUGHPUT

SOL_SECTION = "SpeedOfLight"
ROOF_SECTION = "SpeedOfLight_RooflineChart"
HALF_SECTION = "SpeedOfLight_HierarchicalHalfRooflineChart"
TENSOR_SECTION = "SpeedOfLight_HierarchicalTensorRooflineChart"
LAUNCH_SECTION = "LaunchStats"


def _thread_ops(prefix: str, op: str) -> str:
    return f"{prefix}__sass_thread_inst_executed_op_{op}_pred_on"


class Work(BaseModel):
    """How one precision's achieved and peak rates are read from the report."""

    precision: Precision
    tensor_core: bool
    # (metric, FLOP per count): summed, then multiplied by the clock below.
    achieved: list[tuple[str, float]]
    achieved_clock: str
    # Alternatives for the peak rate per cycle, best first: (metric, FLOP per count).
    peaks: list[tuple[str, float]]
    section: str


def _fma_work(precision: Precision, add: str, mul: str, fma: str, fma_flop: float) -> Work:
    per_cycle = ".sum.per_cycle_elapsed"
    other = 2.0 if precision == "half" else 1.0
    return Work(
        precision=precision,
        tensor_core=False,
        achieved=[
            (_thread_ops("smsp", add) + per_cycle, other),
            (_thread_ops("smsp", mul) + per_cycle, other),
            (_thread_ops("smsp", fma) + per_cycle, fma_flop),
        ],
        achieved_clock=SMSP_CLOCK,
        peaks=[(_thread_ops("sm", fma) + ".sum.peak_sustained", fma_flop)],
        section=HALF_SECTION if precision == "half" else ROOF_SECTION,
    )


def _tensor_work(precision: Precision, achieved: list[str], peaks: list[str]) -> Work:
    # Tensor "ops" are FLOPs: a 2048^3 bf16 product counted 2 * 2048^3 on an H200.
    return Work(
        precision=precision,
        tensor_core=True,
        achieved=[(f"sm__ops_path_tensor_{m}.sum.per_cycle_elapsed", 1.0) for m in achieved],
        achieved_clock=SM_CLOCK,
        peaks=[(f"sm__ops_path_tensor_{m}.sum.peak_sustained", 1.0) for m in peaks],
        section=TENSOR_SECTION,
    )


# Dense peaks first: on gh100 the plain ``src_*`` peaks count 2:4-sparse math (twice the
# dense rate), so the warpgroup (hgmma) dense peak is preferred where the chip has one.
WORK: tuple[Work, ...] = (
    _fma_work("fp64", "dadd", "dmul", "dfma", 2.0),
    _fma_work("fp32", "fadd", "fmul", "ffma", 2.0),
    _fma_work("half", "hadd", "hmul", "hfma", 4.0),
    _tensor_work(
        "tensor_bf16",
        ["src_bf16_dst_fp32"],
        [
            "op_hgmma_src_bf16_dst_fp32_sparsity_off",
            "op_hmma_src_bf16_dst_fp32_sparsity_off",
            "src_bf16_dst_fp32",
        ],
    ),
    _tensor_work(
        "tensor_fp16",
        ["src_fp16"],
        ["op_hgmma_src_fp16_sparsity_off", "op_hmma_src_fp16_dst_fp32_sparsity_off", "src_fp16"],
    ),
    _tensor_work(
        "tensor_tf32",
        ["src_tf32_dst_fp32"],
        [
            "op_hgmma_src_tf32_dst_fp32_sparsity_off",
            "op_hmma_src_tf32_dst_fp32_sparsity_off",
            "src_tf32_dst_fp32",
        ],
    ),
    _tensor_work(
        "tensor_fp8", ["src_fp8_sparsity_off", "src_fp8_sparsity_on"], ["src_fp8_sparsity_off"]
    ),
    _tensor_work("tensor_fp64", ["src_fp64"], ["src_fp64"]),
)

SECTION_OF: dict[str, str] = {
    DURATION: SOL_SECTION,
    SM_THROUGHPUT: SOL_SECTION,
    MEM_THROUGHPUT: SOL_SECTION,
    DRAM_THROUGHPUT: SOL_SECTION,
    L1_THROUGHPUT: SOL_SECTION,
    L2_THROUGHPUT: SOL_SECTION,
    ELAPSED_CYCLES: SOL_SECTION,
    SM_ACTIVE_CYCLES: SOL_SECTION,
    GPC_CLOCK: SOL_SECTION,
    WAVES: LAUNCH_SECTION,
    BREAKDOWN_SM: SOL_SECTION,
    BREAKDOWN_MEM: SOL_SECTION,
    TENSOR_PIPE: SOL_SECTION,
    SM_CLOCK: ROOF_SECTION,
    SMSP_CLOCK: ROOF_SECTION,
    DRAM_CLOCK: ROOF_SECTION,
    DRAM_BYTES_PER_S: ROOF_SECTION,
    DRAM_PEAK_PER_CYCLE: ROOF_SECTION,
}
for _w in WORK:
    for _m, _ in (*_w.achieved, *_w.peaks):
        SECTION_OF.setdefault(_m, _w.section)

SOL_METRICS = (
    DURATION,
    SM_THROUGHPUT,
    MEM_THROUGHPUT,
    DRAM_THROUGHPUT,
    L1_THROUGHPUT,
    L2_THROUGHPUT,
    ELAPSED_CYCLES,
    SM_ACTIVE_CYCLES,
    GPC_CLOCK,
    DRAM_CLOCK,
)


def bound_metrics() -> list[str]:
    """Every metric ``roofline`` and ``speed_of_light`` read, for ``ncu --metrics``.

    Peak alternatives are listed in full: ncu accepts names a chip lacks only where it has
    them, so on GPUs other than Hopper prefer ``bound_sections()``.
    """
    names: list[str] = [*SOL_METRICS, TENSOR_PIPE, SM_CLOCK, SMSP_CLOCK]
    names += [DRAM_BYTES, DRAM_BYTES_PER_S, DRAM_PEAK_PER_CYCLE]
    for work in WORK:
        names += [m for m, _ in work.achieved]
        names += [m for m, _ in work.peaks]
    return list(dict.fromkeys(names))


def bound_sections() -> list[str]:
    """The ncu sections that collect everything ``roofline`` reads."""
    return [SOL_SECTION, ROOF_SECTION, HALF_SECTION, TENSOR_SECTION]


# ---------------------------------------------------------------------------------------------
# Reading metrics


class Reader:
    """Numeric metric values of one action; remembers what was asked for and absent."""

    def __init__(self, action: ActionLike) -> None:
        self.action = action
        self.names = set(action.metric_names())
        self.missing: list[str] = []

    def has(self, name: str) -> bool:
        return name in self.names

    def get(self, name: str, required: bool = True) -> float | None:
        if name not in self.names:
            if required and name not in self.missing:
                self.missing.append(name)
            return None
        value = self.action[name].value()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        number = float(value)
        return number if math.isfinite(number) else None

    def text(self, name: str) -> str | None:
        if name not in self.names:
            return None
        value = self.action[name].value()
        return value if isinstance(value, str) else None


def kernel_name(action: ActionLike) -> str:
    try:
        return str(action.name())
    except Exception:  # a stand-in action without a name
        return ""


def mangled_name(action: ActionLike) -> str | None:
    """The kernel's linker name (``_ZN2at6native...`` for ATen's C++ templates; a Triton or
    ``extern "C"`` kernel's is its plain name): the namespace that ``kernel_name``, the bare
    function name, leaves out. None where the action cannot say (a stand-in)."""
    try:
        import ncu_report

        return str(cast(Any, action).name(ncu_report.IAction.NameBase_MANGLED))
    except Exception:  # no ncu_report, or a stand-in whose name() takes no base
        return None


def pct(part: float | None, whole: float | None) -> float | None:
    if part is None or whole is None or whole <= 0:
        return None
    return 100.0 * part / whole


def sections_for(missing: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(SECTION_OF.get(m, SOL_SECTION) for m in missing))
