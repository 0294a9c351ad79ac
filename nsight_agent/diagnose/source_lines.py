"""Where in the source: the hottest lines of a kernel for one cause, from ncu's source counters.

``hot_lines`` is a pure function of one ``ncu_report`` action. The SourceCounters section stores
per-instruction ("instanced") metrics: each instance value belongs to one SASS address, given by
the metric's correlation ids; ``IAction.source_info(address)`` maps an address to a file and line
when the kernel was built with line info (CUDA ``-lineinfo``; Triton always), and
``IAction.source_files()`` carries the file's text when ncu ran with ``--import-source yes``.

Each cause ranks by the per-instruction metric that shows it (``BASES``); a cause with no metric
of its own, or whose metric is empty in this report, ranks by warp stall samples. Values are
summed per source line, and a line's share is of the whole kernel's total (addresses without a
line count in the total); only when no address of the kernel has a line are SASS instructions
ranked instead. A library's inlined code (Triton's ``standard.py``, CUTLASS or CUB headers) is
counted on the user's line that called it, the library line kept as ``inlined``
(``call_sites``). Without source counters in the report the answer is ``None``, and the caller
names the section to collect (``SECTION``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from nsight_agent.diagnose.call_sites import CallSites, Where, attribute, hottest, is_library

SECTION = "SourceCounters"

STALL_SAMPLES = "smsp__pcsamp_sample_count"
INST_EXECUTED = "inst_executed"
L2_SECTORS_GLOBAL = "memory_l2_theoretical_sectors_global"
L2_SECTORS_GLOBAL_IDEAL = "memory_l2_theoretical_sectors_global_ideal"
SHARED_WAVEFRONTS = "memory_l1_wavefronts_shared"
SHARED_WAVEFRONTS_IDEAL = "memory_l1_wavefronts_shared_ideal"
DIVERGENT_BRANCHES = "smsp__branch_targets_threads_divergent"
LONG_SB_SAMPLES = "smsp__pcsamp_warps_issue_stalled_long_scoreboard"
# Metrics that only the SourceCounters section collects per instruction: their presence shows
# it ran (``inst_executed`` alone is also instanced by other sections).
SOURCE_COUNTERS_MARKERS = (STALL_SAMPLES, L2_SECTORS_GLOBAL, SHARED_WAVEFRONTS)

TEXT_CHARS = 100


class SourceActionLike(Protocol):
    """What this module needs of an ``ncu_report.IAction`` (metrics are ``IMetric``s)."""

    def metric_by_name(self, name: str) -> Any: ...

    def source_info(self, address: int) -> Any: ...

    def sass_by_pc(self, address: int) -> str: ...

    def source_files(self) -> dict[str, str]: ...


class HotLine(BaseModel):
    """One hot source line (or, without line info, one SASS instruction)."""

    line: int | None = Field(default=None, description="Line number in the file; None for SASS")
    share_pct: float = Field(description="Share of the basis (whole kernel) on this line, in %")
    text: str | None = Field(
        default=None, description="The source line, trimmed; the SASS instruction for a pc"
    )
    pc: str | None = Field(
        default=None, description="SASS address as an offset into the kernel (SASS fallback)"
    )
    file: str | None = Field(
        default=None, description="File basename, only where it differs from the answer's file"
    )
    inlined: str | None = Field(
        default=None,
        description="Library code counted on this line, e.g. 'tl.max in standard.py:170'",
    )


class SourceHotspots(BaseModel):
    """The hottest lines of one kernel for one cause."""

    basis: str = Field(description="What is ranked, e.g. 'excess global sectors'")
    metric: str = Field(description="The ncu per-instruction metric ranked")
    level: Literal["source", "sass"] = Field(
        description="source: lines of the user's file; sass: no line info, instructions"
    )
    file: str | None = Field(default=None, description="Basename of the hottest line's file")
    lines: list[HotLine] = Field(description="Hottest first")


@dataclass(frozen=True)
class Basis:
    label: str
    metric: str  # the instanced metric read
    name: str  # what the answer calls it
    ideal: str | None = None  # subtracted per instruction (excess = actual - ideal)
    opcodes: frozenset[str] = frozenset()  # keep only these SASS opcodes (without modifiers)


def _inst(label: str, *opcodes: str) -> Basis:
    name = f"{INST_EXECUTED} ({'/'.join(opcodes)})"
    return Basis(label, INST_EXECUTED, name, opcodes=frozenset(opcodes))


STALLS = Basis("warp stall samples", STALL_SAMPLES, STALL_SAMPLES)
EXCESS_SECTORS = Basis(
    "excess global sectors",
    L2_SECTORS_GLOBAL,
    "derived__memory_l2_theoretical_sectors_global_excessive",
    ideal=L2_SECTORS_GLOBAL_IDEAL,
)
BASES: dict[str, Basis] = {
    "uncoalesced_global_access": EXCESS_SECTORS,
    "excess_dram_traffic": EXCESS_SECTORS,
    "shared_bank_conflicts": Basis(
        "shared bank conflicts (excess wavefronts)",
        SHARED_WAVEFRONTS,
        "derived__memory_l1_wavefronts_shared_excessive",
        ideal=SHARED_WAVEFRONTS_IDEAL,
    ),
    "local_memory_spills": _inst("local memory instructions", "LDL", "STL"),
    "warp_divergence": Basis("divergent branches", DIVERGENT_BRANCHES, DIVERGENT_BRANCHES),
    "atomic_contention": _inst("atomic instructions", "RED", "REDG", "ATOM", "ATOMG", "ATOMS"),
    "slow_precision": _inst("fp64 instructions", "DFMA", "DADD", "DMUL"),
    "memory_latency": Basis("long-scoreboard stall samples", LONG_SB_SAMPLES, LONG_SB_SAMPLES),
}
# When the stall samples are missing too (sampling off), executed instructions still rank.
FALLBACKS = (STALLS, Basis("instructions executed", INST_EXECUTED, INST_EXECUTED))


def basis_for(cause_id: str | None) -> Basis:
    return BASES.get(cause_id or "", STALLS)


def per_pc(action: SourceActionLike, name: str) -> dict[int, float]:
    """Instance values of a source metric, by SASS address; {} where it is not instanced."""
    try:
        metric = action.metric_by_name(name)
    except Exception:  # a stand-in action without per-instruction metrics
        return {}
    if metric is None or not metric.has_correlation_ids():
        return {}
    ids = metric.correlation_ids()
    count = int(metric.num_instances())
    if ids is None or count < 1 or int(ids.num_instances()) != count:
        return {}
    values: dict[int, float] = {}
    for i in range(count):
        pc = int(ids.as_uint64(i))
        values[pc] = values.get(pc, 0.0) + float(metric.as_double(i))
    if set(values) == {0}:  # a launch-scope metric (one instance, correlation id 0)
        return {}
    return values


def opcode(sass: str) -> str:
    """The opcode of one SASS line: ``@!P0 LDL.64 R2, [R1]`` -> ``LDL.64``."""
    words = sass.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def basis_values(action: SourceActionLike, basis: Basis) -> dict[int, float]:
    """The basis per SASS address (positive values only)."""
    values = per_pc(action, basis.metric)
    if basis.ideal is not None:
        ideal = per_pc(action, basis.ideal)
        if not ideal:
            return {}
        values = {pc: v - ideal.get(pc, 0.0) for pc, v in values.items()}
    if basis.opcodes:
        values = {
            pc: v
            for pc, v in values.items()
            if opcode(action.sass_by_pc(pc)).split(".")[0] in basis.opcodes
        }
    return {pc: v for pc, v in values.items() if v > 0}


def has_source_counters(action: SourceActionLike) -> bool:
    return any(per_pc(action, name) for name in SOURCE_COUNTERS_MARKERS)


def basename(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def trim(text: str, chars: int = TEXT_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _locate(action: SourceActionLike, pc: int) -> Where | None:
    try:
        info = action.source_info(pc)
    except Exception:
        return None
    if info is None:
        return None
    line = int(info.line())
    name = str(info.file_name())
    return (name, line) if name and line > 0 else None


class _Files:
    """Source text by file name, split into lines once."""

    def __init__(self, action: SourceActionLike) -> None:
        try:
            self.files = dict(action.source_files())
        except Exception:
            self.files = {}
        self.split: dict[str, list[str]] = {}

    def content(self, name: str) -> str | None:
        content = self.files.get(name)
        if content is None:  # a path spelled differently: match by basename
            same = [c for f, c in self.files.items() if basename(f) == basename(name)]
            content = same[0] if len(same) == 1 else None
        return content

    def raw(self, name: str, line: int) -> str | None:
        if name not in self.split:
            self.split[name] = (self.content(name) or "").splitlines()
        lines = self.split[name]
        return lines[line - 1] if 0 < line <= len(lines) else None

    def text(self, name: str, line: int) -> str | None:
        raw = self.raw(name, line)
        return (trim(raw) or None) if raw is not None else None


@dataclass(frozen=True)
class Ranked:
    where: Where
    value: float
    inlined: str | None


def rank_source(
    action: SourceActionLike, values: dict[int, float], top: int, files: _Files
) -> list[Ranked] | None:
    """The hottest lines, a library's inlined code counted on the user's line that called it;
    None when no address has a line."""
    every = set(values) | set(per_pc(action, INST_EXECUTED))
    located = {pc: w for pc in every if (w := _locate(action, pc)) is not None}
    if not any(pc in located for pc in values):
        return None
    inlined_code = any(is_library(name) for name, _ in located.values())
    sites = CallSites(located if inlined_code else {}, files.raw, files.content)
    by_line, inlined = attribute(values, located, sites)
    ranked = sorted(by_line.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return [Ranked(w, v, hottest(inlined.get(w))) for w, v in ranked]


def _source_answer(
    basis: Basis, ranked: list[Ranked], total: float, files: _Files
) -> SourceHotspots:
    main = basename(ranked[0].where[0])
    lines = [
        HotLine(
            line=r.where[1],
            share_pct=round(100.0 * r.value / total, 1),
            text=files.text(*r.where),
            file=None if basename(r.where[0]) == main else basename(r.where[0]),
            inlined=r.inlined,
        )
        for r in ranked
    ]
    return SourceHotspots(
        basis=basis.label, metric=basis.name, level="source", file=main, lines=lines
    )


def _sass_answer(
    action: SourceActionLike, basis: Basis, values: dict[int, float], top: int, total: float
) -> SourceHotspots:
    start = min(values)
    every = per_pc(action, INST_EXECUTED)
    if every:
        start = min(start, min(every))
    ranked = sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    lines = [
        HotLine(
            share_pct=round(100.0 * value / total, 1),
            pc=f"0x{pc - start:04x}",
            text=trim(action.sass_by_pc(pc)) or None,
        )
        for pc, value in ranked
    ]
    return SourceHotspots(basis=basis.label, metric=basis.name, level="sass", lines=lines)


def hot_lines(action: Any, cause_id: str | None, top: int = 3) -> SourceHotspots | None:
    """The ``top`` hottest lines of the kernel for ``cause_id`` (None: warp stall samples).

    None when the report has no source counters (collect ``SECTION``) or nothing to rank.
    """
    if top < 1 or not has_source_counters(action):
        return None
    first = basis_for(cause_id)
    for basis in (first, *(b for b in FALLBACKS if b != first)):
        values = basis_values(action, basis)
        total = sum(values.values())
        if total <= 0:
            continue
        files = _Files(action)
        ranked = rank_source(action, values, top, files)
        if ranked is not None:
            return _source_answer(basis, ranked, total, files)
        return _sass_answer(action, basis, values, top, total)
    return None
