"""Where in the source: ``hot_lines`` names the line of the planted defect.

The planted reports (``tests/fixtures/planted``, H200, SourceCounters with imported source) come
from ``bench/planted``; the line of each defect is found by searching those sources for the
defect's code, so a test fails if a fixture and its source drift apart. Reports without source
counters answer None; a kernel without line info falls back to SASS.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ncu_report
import pytest

from nsight_agent.diagnose.source_lines import SourceHotspots, hot_lines, opcode, trim
from tests.report_stand_ins import StandInMetric

ROOT = Path(__file__).resolve().parents[1]
PLANTED = ROOT / "tests" / "fixtures" / "planted"
BENCH = ROOT / "bench" / "planted"
needs_planted = pytest.mark.skipif(
    not (PLANTED / "uncoalesced_cuda.ncu-rep").exists() or not (BENCH / "planted.cu").exists(),
    reason="planted fixtures not recorded",
)


def action(path: Path) -> Any:
    return ncu_report.load_report(str(path)).range_by_idx(0).action_by_idx(0)


def line_of(source: str, kernel: str, code: str) -> int:
    """The first line of ``bench/planted/<source>`` after ``kernel``'s name that has ``code``."""
    lines = (BENCH / source).read_text().splitlines()
    start = next(i for i, text in enumerate(lines) if f"{kernel}(" in text)
    return next(i + 1 for i in range(start, len(lines)) if code in lines[i])


# (report, cause, source file, code on the defect's line, basis, least share of the top line)
DEFECTS = [
    (
        "uncoalesced_cuda",
        "uncoalesced_global_access",
        "planted.cu",
        "out[i] = in[(i & (rows - 1u)) * 32u",
        "excess global sectors",
        99.0,
    ),
    (
        "uncoalesced_triton",
        "uncoalesced_global_access",
        "planted_triton.py",
        "v = tl.load(x_ptr + src",
        "excess global sectors",
        99.0,
    ),
    (
        "bank_conflicts_cuda",
        "shared_bank_conflicts",
        "planted.cu",
        "= tile[threadIdx.x][threadIdx.y + j]",
        "shared bank conflicts (excess wavefronts)",
        99.0,
    ),
    (
        "local_spills_cuda",
        "local_memory_spills",
        "planted.cu",
        "v[j] = fmaf(v[j], v[(j + 7) % SPILL_VALS]",
        "local memory instructions",
        90.0,
    ),
    (
        "warp_divergence_cuda",
        "warp_divergence",
        "planted.cu",
        "if (threadIdx.x & 1u) {",
        "divergent branches",
        99.0,
    ),
    (
        "atomic_cuda",
        "atomic_contention",
        "planted.cu",
        "atomicAdd(sum, in[i])",
        "atomic instructions",
        99.0,
    ),
    (
        "atomic_triton",
        "atomic_contention",
        "planted_triton.py",
        "tl.atomic_add(sum_ptr",
        "atomic instructions",
        99.0,
    ),
    (
        "occupancy_registers_cuda",
        "memory_latency",
        "planted.cu",
        "p = next[p];",
        "long-scoreboard stall samples",
        90.0,
    ),
]


@needs_planted
@pytest.mark.parametrize(
    ("report", "cause", "source", "code", "basis", "least"), DEFECTS, ids=[d[0] for d in DEFECTS]
)
def test_top_line_is_the_planted_defect(
    report: str, cause: str, source: str, code: str, basis: str, least: float
) -> None:
    kernel = action(PLANTED / f"{report}.ncu-rep")
    spots = hot_lines(kernel, cause)
    assert spots is not None
    assert spots.level == "source"
    assert spots.basis == basis
    assert spots.file == source
    top = spots.lines[0]
    assert top.line == line_of(source, kernel.name(), code)
    assert top.share_pct >= least
    assert top.text is not None and code in top.text
    assert len(spots.model_dump_json(exclude_none=True)) < 600


@needs_planted
def test_default_basis_is_warp_stall_samples() -> None:
    spots = hot_lines(action(PLANTED / "uncoalesced_cuda.ncu-rep"), None)
    assert spots is not None
    assert spots.basis == "warp stall samples"
    assert spots.metric == "smsp__pcsamp_sample_count"
    code = "out[i] = in[(i & (rows - 1u)) * 32u"
    assert spots.lines[0].line == line_of("planted.cu", "planted_strided_gather", code)
    assert 1 <= len(spots.lines) <= 3
    shares = [line.share_pct for line in spots.lines]
    assert shares == sorted(shares, reverse=True)
    assert sum(shares) <= 100.5


@needs_planted
def test_cause_without_its_metric_falls_back_to_stalls() -> None:
    # A coalesced copy has no excess sectors: the answer ranks stall samples and says so.
    spots = hot_lines(action(PLANTED / "control_copy_cuda.ncu-rep"), "excess_dram_traffic")
    assert spots is not None
    assert spots.basis == "warp stall samples"
    code = "if (i < n4) out[i] = in[i];"
    assert spots.lines[0].line == line_of("planted.cu", "control_copy_f4", code)


@needs_planted
def test_top_limits_the_lines() -> None:
    spots = hot_lines(action(PLANTED / "control_fma_cuda.ncu-rep"), None, top=5)
    assert spots is not None and len(spots.lines) == 5
    assert hot_lines(action(PLANTED / "control_fma_cuda.ncu-rep"), None, top=0) is None


@needs_planted
def test_report_without_source_counters_is_none() -> None:
    assert hot_lines(action(PLANTED / "control_cublas_bf16.ncu-rep"), None) is None


FOREIGN = [
    *sorted((ROOT / "tests" / "fixtures" / "engine").glob("*/report.ncu-rep")),
    ROOT / "tests" / "fixtures" / "h200_bf16_matmul_sections.ncu-rep",
]


@pytest.mark.parametrize("path", FOREIGN, ids=[p.parent.name for p in FOREIGN])
def test_reports_without_source_counters_are_none(path: Path) -> None:
    # h200_bf16_matmul_sections has inst_executed per instruction (another section), but no
    # source counters: still None.
    for cause in (None, "uncoalesced_global_access", "local_memory_spills"):
        assert hot_lines(action(path), cause) is None


# ---------------------------------------------------------------------------------------------
# A stand-in action: a kernel without line info


BASE = 0x7F00_0000_0000


class _NoLineInfo:
    def __init__(self) -> None:
        self.sass = {BASE: "LDC R1, c[0x0][0x28]", BASE + 0x10: "@!P0 LDL.64 R2, [R1+0x8]"}
        pcs = [BASE, BASE + 0x10, BASE + 0x20]
        self.metrics = {
            "smsp__pcsamp_sample_count": StandInMetric([5.0, 80.0, 15.0], pcs),
            "inst_executed": StandInMetric([10.0, 40.0, 10.0], pcs),
        }

    def metric_by_name(self, name: str) -> StandInMetric | None:
        return self.metrics.get(name)

    def source_info(self, address: int) -> None:
        return None

    def sass_by_pc(self, address: int) -> str:
        return self.sass.get(address, "STL [R1], R4")

    def source_files(self) -> dict[str, str]:
        return {}


def test_sass_fallback_without_line_info() -> None:
    spots = hot_lines(_NoLineInfo(), None)
    assert isinstance(spots, SourceHotspots)
    assert spots.level == "sass" and spots.file is None
    assert [(h.pc, h.share_pct) for h in spots.lines] == [
        ("0x0010", 80.0),
        ("0x0020", 15.0),
        ("0x0000", 5.0),
    ]
    assert spots.lines[0].text == "@!P0 LDL.64 R2, [R1+0x8]"
    assert spots.lines[0].line is None


def test_sass_fallback_local_instructions() -> None:
    spots = hot_lines(_NoLineInfo(), "local_memory_spills")
    assert spots is not None and spots.basis == "local memory instructions"
    assert [(h.pc, h.share_pct) for h in spots.lines] == [("0x0010", 80.0), ("0x0020", 20.0)]


def test_stand_in_without_source_api_is_none() -> None:
    class Bare:
        def metric_names(self) -> list[str]:
            return []

    assert hot_lines(Bare(), None) is None


def test_helpers() -> None:
    assert opcode("@!P0 LDL.64 R2, [R1]") == "LDL.64"
    assert opcode("  EXIT ") == "EXIT"
    assert opcode("") == ""
    assert trim("  a   b ") == "a b"
    assert len(trim("x" * 300)) == 100
