"""Renderers: short text for people and for clients that show only the text content.

Builders (the other view modules) turn data into models; these turn models into text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nsight_agent.diagnose.step_view import StepView
from nsight_agent.judge.emulated import label as label
from nsight_agent.views.common import Page
from nsight_agent.views.compare import CompareSummary
from nsight_agent.views.diagnosis import ReportDiagnosis
from nsight_agent.views.kernelbench import render_kernelbench
from nsight_agent.views.report import ReportSummary, RooflineBrief
from nsight_agent.views.roofline import RooflineSummary
from nsight_agent.views.runs import ProfileSummary, Stat

# (unit as ncu or our models spell it) -> steps of (scale, readable unit), largest first.
_SCALES: dict[str, tuple[tuple[float, str], ...]] = {
    "ns": ((1e9, "s"), (1e6, "ms"), (1e3, "us"), (1.0, "ns")),
    "nsecond": ((1e9, "s"), (1e6, "ms"), (1e3, "us"), (1.0, "ns")),
    "B": ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB"), (1.0, "B")),
    "byte": ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB"), (1.0, "B")),
    "B/s": ((1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1.0, "B/s")),
    "byte/second": ((1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1.0, "B/s")),
    "FLOP/s": ((1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s"), (1.0, "FLOP/s")),
}


def readable(value: float | None, unit: str | None = None) -> str:
    """A number with a unit people read: 32.8 us, 4.07 TB/s, 35.5 TFLOP/s (JSON keeps SI)."""
    if value is None:
        return "-"
    for scale, name in _SCALES.get(unit or "", ()):
        if abs(value) >= scale or scale == 1.0:
            return f"{value / scale:.3g} {name}"
    text = f"{value:.4g}"
    return f"{text} {unit}" if unit else text


_fmt = readable


def _closing(lines: list[str], warnings: list[str] | None, page: Page) -> str:
    """The end every answer's text shares: its warnings, then how to get the rest."""
    lines = [*lines, *(f"warning: {w}" for w in warnings or [])]
    if page.truncated:
        lines.append(page.truncated)
    return "\n".join(lines)


def _cfg(config: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items()) or "()"


def render_report(s: ReportSummary) -> str:
    lines = [f"{s.report}: {s.kernels_total} kernel(s) on {s.gpu or 'unknown GPU'}"]
    for a in s.actions:
        ranges = "; ".join(f"{d}:{'/'.join(r)}" for d, r in (a.nvtx or {}).items())
        lines.append(
            f"[{a.index}] {a.kernel}  {_fmt(a.duration_ns, 'ns')}  SOL compute "
            f"{_fmt(a.sol_compute_pct)}% memory {_fmt(a.sol_memory_pct)}%"
            + (f"  nvtx {ranges}" if ranges else "")
        )
        if a.roofline is not None:
            lines.append(f"    {roofline_line(a.roofline)}")
            lines += [f"    note: {n}" for n in (a.roofline.notes or [])[:1]]
        for f in a.findings or []:
            gain = (
                f" (~{f.speedup_pct:g}% {f.speedup_type or ''})".rstrip() if f.speedup_pct else ""
            )
            lines.append(f"    - {f.title}{gain}")
    for o in s.others or []:
        share = f" {o.share_pct:.3g}%" if o.share_pct is not None else ""
        lines.append(f"[{o.index}] {o.kernel}  {_fmt(o.duration_ns, 'ns')}{share}")
    return _closing(lines, None, s.page)


def roofline_line(rf: RooflineBrief) -> str:
    """Bound, FLOP/s, DRAM and % of roofline: only the figures the report holds (a missing
    one is left out, and said so, never shown as 0 or -)."""
    parts = [rf.bound]
    if rf.achieved_flop_per_s is not None:
        precision = f" ({rf.dominant_precision})" if rf.dominant_precision else ""
        parts.append(f"{_fmt(rf.achieved_flop_per_s, 'FLOP/s')}{precision}")
    if rf.dram_bytes_per_s is not None:
        of_peak = (
            f" ({rf.dram_pct_of_peak:.3g}% of peak)" if rf.dram_pct_of_peak is not None else ""
        )
        parts.append(f"DRAM {_fmt(rf.dram_bytes_per_s, 'B/s')}{of_peak}")
    if rf.pct_of_roofline is not None:
        parts.append(f"{rf.pct_of_roofline:.3g}% of roofline")
    absent = [
        name
        for name, value in (
            ("FLOP/s", rf.achieved_flop_per_s),
            ("DRAM", rf.dram_bytes_per_s),
            ("% of roofline", rf.pct_of_roofline),
        )
        if value is None
    ]
    text = "; ".join(parts[:1]) + (": " + ", ".join(parts[1:]) if parts[1:] else "")
    if absent:
        text += f"; {' and '.join(absent)} not in the report"
        text += f" (collect {', '.join(rf.sections_to_collect)})" if rf.sections_to_collect else ""
    return text


def kernels_text(kernels: Mapping[str, list[str]]) -> str:
    """variant -> kernels as one phrase: "run: add_kernel; fused: k1, k2"."""
    parts = [f"{v}: {', '.join(ks)}" if ks else f"{v}: none recorded" for v, ks in kernels.items()]
    return "; ".join(parts)


def render_profile(s: ProfileSummary, metric_label: Mapping[str, str] | None = None) -> str:
    head = f"run {s.run_id}" + (f" on {s.gpu}" if s.gpu else "")
    if s.kernels and any(s.kernels.values()):
        head += f"; kernels: {kernels_text(s.kernels)}"
    if not s.results:
        head += ": no measurements (the warnings say why)"
    lines = [head]
    for r in s.results:
        who = f"{r.variant} " if r.variant else ""
        for metric, st in r.stats.items():
            # "UNSTABLE ok" read as one verdict: the spread and the output check apart
            flag = "" if st.stable else ", unstable"
            ok = "" if r.correct is None else ("; output ok" if r.correct else "; WRONG OUTPUT")
            ok += f"; {label(r.emulated)}" if r.emulated else ""
            name = (metric_label or {}).get(metric, metric)
            unit = s.units.get(metric)
            lines.append(
                f"{who}{_cfg(r.config)}  {name} = {_fmt(st.avg, unit)} ± {_fmt(st.std, unit)} "
                f"({percentiles(st, unit)}n={st.n}, rsd {_fmt(st.rsd_pct)}%{flag}){ok}"
            )
    return _closing(lines, s.warnings, s.page)


def percentiles(st: Stat, unit: str | None) -> str:
    """``median X, p20-p80 Y-Z, `` of a stat that has them (a run stored before they were
    kept has none)."""
    if st.median is None:
        return ""
    spread = f", p20-p80 {_fmt(st.p20, unit)}-{_fmt(st.p80, unit)}" if st.p20 is not None else ""
    return f"median {_fmt(st.median, unit)}{spread}, "


def only_variant(s: ProfileSummary) -> str:
    """The variant of a run of one (its results leave it unsaid), "-" where it is unknown."""
    return next(iter(s.kernels)) if len(s.kernels) == 1 else "-"


def render_compare(s: CompareSummary, metric_label: Mapping[str, str] | None = None) -> str:
    metric = (metric_label or {}).get(s.metric, s.metric)
    lines = [f"run {s.run_id}: {metric} vs baseline {s.baseline!r}"]
    for c in s.configs:
        parts = []
        for name, v in c.variants.items():
            sp = f" x{v.speedup:.3g}" if v.speedup is not None else ""
            said = [f"median {_fmt(v.median, s.unit)}"] if v.median is not None else []
            said += [label(v.emulated)] if v.emulated else []
            aside = f" ({'; '.join(said)})" if said else ""
            parts.append(f"{name} {_fmt(v.time, s.unit)}{aside}{sp} {v.verdict}")
        lines.append(f"{_cfg(c.config)}: " + "; ".join(parts))
    for name, o in s.overall.items():
        if o.verdict != "baseline":
            lines.append(f"{name}: geomean x{_fmt(o.geomean_speedup)} -> {o.verdict}")
        why = next(
            (
                c.variants[name].check
                for c in s.configs
                if name in c.variants and c.variants[name].check
            ),
            None,
        )
        if why and o.verdict in (
            "error",
            "timeout",
            "no_kernel",
            "suspect",
            "incorrect",
            "emulated",
        ):
            lines.append(f"  {name} {o.verdict}: {why}")
    lines.append(f"rule: {s.rule}")
    lines += basis_lines(s)
    return _closing(lines, s.warnings, s.page)


def basis_lines(s: CompareSummary) -> list[str]:
    """The time basis of a comparison, the other basis's verdicts, where the two disagree,
    and KernelBench's result fields when the run asked for its rule."""
    lines = [f"time basis: {s.time_basis} ({s.basis})"] if s.time_basis else []
    o = s.other_basis
    if o is not None:
        said = [
            f"{name} x{_fmt(v.geomean_speedup)} {v.verdict}"
            for name, v in o.overall.items()
            if v.verdict != "baseline"
        ]
        lines.append(f"on {o.time_basis} time: " + "; ".join(said))
    lines += [f"disagree: {d}" for d in s.disagreements or []]
    if s.kernelbench is not None:
        lines += [f"KernelBench: {line}" for line in render_kernelbench(s.kernelbench).splitlines()]
    return lines


def render_roofline(s: RooflineSummary) -> str:
    lines = [f"{s.report} on {s.gpu or 'unknown GPU'}; rule: {s.thresholds}"]
    for k in s.kernels:
        where = f"{k.variant} " if k.variant else ""
        where += _cfg(k.config) + " " if k.config else ""
        rf = k.roofline
        if rf is None:
            lines.append(f"{where}{k.kernel}: no roofline metrics in the report")
            continue
        ai = (
            f", AI {_fmt(rf.arithmetic_intensity)} FLOP/B"
            if rf.arithmetic_intensity is not None
            else ""
        )
        peak = (
            f" (peak {_fmt(rf.peak_flop_per_s, 'FLOP/s')})"
            if rf.peak_flop_per_s is not None and rf.achieved_flop_per_s is not None
            else ""
        )
        lines.append(f"{where}{k.kernel}: {roofline_line(rf)}{peak}{ai}")
    return _closing(lines, s.warnings, s.page)


def render_table(s: ProfileSummary, metric_label: Mapping[str, str] | None = None) -> str:
    """A plain table of a ProfileSummary: one line per (variant, config, metric);
    ``metric_label`` renames metrics for people (a CPU timing's time is wall-clock time)."""
    header = ["variant", "config", "metric", "avg", "std", "median", "p20", "p80", "min", "max"]
    header += ["n", "rsd%", "stable"]
    rows = [header]
    for r in s.results:
        config = ",".join(f"{k}={v}" for k, v in r.config.items())
        for metric, st in r.stats.items():
            unit = s.units.get(metric, "")
            stats = (st.avg, st.std, st.median, st.p20, st.p80, st.min, st.max)
            rows.append(
                [
                    r.variant or only_variant(s),
                    config,
                    (metric_label or {}).get(metric, metric),
                    *(readable(v, unit) for v in stats),
                    str(st.n),
                    f"{st.rsd_pct:.3g}" if st.rsd_pct is not None else "-",
                    "yes" if st.stable else "NO",
                ]
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines += [f"warning: {w}" for w in s.warnings or []]
    return "\n".join(lines)


def step_lines(step: StepView | None) -> list[str]:
    """The whole step first, when it has more than one group: where the time goes, whose it
    is, what each group could save at most, and the step's own causes."""
    if step is None or len(step.groups) < 2:
        return []
    wall = f", {step.wall_us:.4g} us wall" if step.wall_us is not None else ""
    lines = [f"step: {step.gpu_us:.4g} us of kernels per call, {step.launches} launches{wall}"]
    lines.append(f"  {'group':34} {'owner':12} {'share':>6} {'us':>8}  {'gain<=':>6}  bound")
    for g in step.groups:
        gain = f"{g.gain_pct:.2g}%" if g.gain_pct is not None else "-"
        lines.append(
            f"  {g.group[:34]:34} {g.owner[:12]:12} {g.share_pct:5.3g}% {g.us:8.4g}  {gain:>6}  "
            f"{g.bound}"
        )
    if step.rest_pct:
        lines.append(f"  (other groups: {step.rest_pct:.2g}%)")
    for c in step.causes or []:
        gain = f" (step <= {c.gain_pct:g}% faster)" if c.gain_pct is not None else ""
        lines.append(f"  step cause {c.id}{gain}: {c.title}; {c.detail}")
        lines.append(f"      try: {c.actions[0]}")
    return [*lines, "  (gain<=: Amdahl bound, each group at its roof)"]


def render_diagnosis(d: ReportDiagnosis) -> str:
    """The step first (when there are several groups), then the headline and top causes of
    each kernel, then one line for the rest."""
    lines = [f"{d.kernels_total} kernel(s) on {d.gpu or 'unknown GPU'}; {d.report}"]
    lines += step_lines(d.step)
    lines += [f"  {p}" for p in d.passes or []]
    lines += [f"  {d.sampled}"] if d.sampled else []
    for k in d.kernels:
        dg = k.diagnosis
        share = f"{k.share_pct:.3g}%" if k.share_pct is not None else "-"
        lines.append(
            f"\n{dg.kernel}  ({share} of time, {readable(dg.duration_ns, 'ns')}, {k.launches}x)"
        )
        lines.append(f"  {dg.headline}")
        for c in dg.causes[:3]:
            gain = f" ~{c.gain:.0f}%" if c.gain is not None else ""
            ev = "; ".join(f"{e.m}={e.v:.4g}" for e in c.ev[:3])
            lines.append(f"  - {c.id}{gain}: {ev}")
            lines += [f"      try: {a}" for a in c.actions[:2]]
            lines.append(f"      skill: {c.skill} (get_skill({c.skill!r}) explains it)")
        if dg.where is not None:
            lines.append(f"  where ({dg.where.basis}):")
            for h in dg.where.lines:
                at = f"{h.file or dg.where.file}:{h.line}" if h.line is not None else f"pc {h.pc}"
                lines.append(f"    {at} {h.share_pct:.3g}%  {h.text or ''}".rstrip())
                if h.inlined:  # the library code counted on this line
                    lines.append(f"      inlined: {h.inlined}")
        if dg.unmapped:  # ncu's own findings we did not take as causes, so none is hidden
            lines.append(f"  ncu also flagged: {'; '.join(dg.unmapped)}")
        if dg.deeper:
            lines.append(f"  deeper pass would add: {', '.join(dg.deeper)}")
    for o in d.others or []:
        share = f"{o.share_pct:.3g}%" if o.share_pct is not None else "-"
        lines.append(f"{o.kernel[:60]} ({share}): {o.headline}")
    return _closing(lines, None, d.page)
