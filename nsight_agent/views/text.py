"""Renderers: short text for people and for clients that show only the text content.

Builders (the other view modules) turn data into models; these turn models into text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nsight_agent.views.common import Page
from nsight_agent.views.compare import CompareSummary
from nsight_agent.views.diagnosis import ReportDiagnosis
from nsight_agent.views.report import ReportSummary
from nsight_agent.views.roofline import RooflineSummary
from nsight_agent.views.runs import ProfileSummary

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
            rf = a.roofline
            lines.append(
                f"    {rf.bound}; {_fmt(rf.achieved_flop_per_s, 'FLOP/s')}"
                + (f" ({rf.dominant_precision})" if rf.dominant_precision else "")
                + f", DRAM {_fmt(rf.dram_bytes_per_s, 'B/s')}, "
                f"{_fmt(rf.pct_of_roofline)}% of roofline"
            )
            lines += [f"    note: {n}" for n in (rf.notes or [])[:1]]
        for f in a.findings or []:
            gain = (
                f" (~{f.speedup_pct:g}% {f.speedup_type or ''})".rstrip() if f.speedup_pct else ""
            )
            lines.append(f"    - {f.title}{gain}")
    for o in s.others or []:
        share = f" {o.share_pct:.3g}%" if o.share_pct is not None else ""
        lines.append(f"[{o.index}] {o.kernel}  {_fmt(o.duration_ns, 'ns')}{share}")
    return _closing(lines, None, s.page)


def render_profile(s: ProfileSummary) -> str:
    lines = [f"run {s.run_id} on {s.gpu or 'unknown GPU'}; kernels: {s.kernels}"]
    for r in s.results:
        who = f"{r.variant} " if r.variant else ""
        for metric, st in r.stats.items():
            flag = "" if st.stable else " UNSTABLE"
            ok = "" if r.correct is None else (" ok" if r.correct else " WRONG OUTPUT")
            lines.append(
                f"{who}{_cfg(r.config)}  {metric} = {_fmt(st.avg, s.units.get(metric))} "
                f"± {_fmt(st.std, s.units.get(metric))} (n={st.n}, rsd {_fmt(st.rsd_pct)}%){flag}{ok}"
            )
    return _closing(lines, s.warnings, s.page)


def render_compare(s: CompareSummary) -> str:
    lines = [f"run {s.run_id}: {s.metric} vs baseline {s.baseline!r}"]
    for c in s.configs:
        parts = []
        for name, v in c.variants.items():
            sp = f" x{v.speedup:.3g}" if v.speedup is not None else ""
            parts.append(f"{name} {_fmt(v.time, s.unit)}{sp} {v.verdict}")
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
        if why and o.verdict in ("error", "no_kernel", "suspect", "incorrect"):
            lines.append(f"  {name} {o.verdict}: {why}")
    lines.append(f"rule: {s.rule}")
    return _closing(lines, s.warnings, s.page)


def render_roofline(s: RooflineSummary) -> str:
    lines = [f"{s.report} on {s.gpu or 'unknown GPU'}; rule: {s.thresholds}"]
    for k in s.kernels:
        where = f"{k.variant} " if k.variant else ""
        where += _cfg(k.config) + " " if k.config else ""
        rf = k.roofline
        if rf is None:
            lines.append(f"{where}{k.kernel}: no roofline metrics in the report")
            continue
        lines.append(
            f"{where}{k.kernel}: {rf.bound}; {_fmt(rf.achieved_flop_per_s, 'FLOP/s')} of "
            f"{_fmt(rf.peak_flop_per_s, 'FLOP/s')} ({rf.dominant_precision or '-'}), DRAM "
            f"{_fmt(rf.dram_bytes_per_s, 'B/s')} ({_fmt(rf.dram_pct_of_peak)}% of peak), AI "
            f"{_fmt(rf.arithmetic_intensity)} FLOP/B, {_fmt(rf.pct_of_roofline)}% of roofline"
        )
    return _closing(lines, s.warnings, s.page)


def render_table(s: ProfileSummary) -> str:
    """A plain table of a ProfileSummary: one line per (variant, config, metric)."""
    header = ["variant", "config", "metric", "avg", "std", "min", "max", "n", "rsd%", "stable"]
    rows = [header]
    for r in s.results:
        config = ",".join(f"{k}={v}" for k, v in r.config.items())
        for metric, st in r.stats.items():
            unit = s.units.get(metric, "")
            rows.append(
                [
                    r.variant or "-",
                    config,
                    metric,
                    *(readable(v, unit) for v in (st.avg, st.std, st.min, st.max)),
                    str(st.n),
                    f"{st.rsd_pct:.3g}" if st.rsd_pct is not None else "-",
                    "yes" if st.stable else "NO",
                ]
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines += [f"warning: {w}" for w in s.warnings or []]
    return "\n".join(lines)


def render_diagnosis(d: ReportDiagnosis) -> str:
    """The headline and top causes of each kernel, then one line for the rest."""
    lines = [f"{d.kernels_total} kernel(s) on {d.gpu or 'unknown GPU'}; {d.report}"]
    lines += [f"  {p}" for p in d.passes or []]
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
        if dg.where is not None:
            lines.append(f"  where ({dg.where.basis}):")
            for h in dg.where.lines:
                at = f"{h.file or dg.where.file}:{h.line}" if h.line is not None else f"pc {h.pc}"
                lines.append(f"    {at} {h.share_pct:.3g}%  {h.text or ''}".rstrip())
        if dg.deeper:
            lines.append(f"  deeper pass would add: {', '.join(dg.deeper)}")
    for o in d.others or []:
        share = f"{o.share_pct:.3g}%" if o.share_pct is not None else "-"
        lines.append(f"{o.kernel[:60]} ({share}): {o.headline}")
    return _closing(lines, None, d.page)
