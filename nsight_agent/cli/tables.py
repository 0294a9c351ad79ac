"""The command line's answers as rich tables, for a terminal (``cli/output.py`` decides when).

Each function turns one view model into a renderable; the numbers and words are those of the
plain text (``views/text.py``), laid out in columns and coloured by meaning: green faster or
stable, red slower, wrong or failed, yellow noisy or unknown. Hints name ``nsight-agent``
commands (``cli/terms.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from nsight_agent.cli.terms import cli_terms
from nsight_agent.views.common import Page
from nsight_agent.views.compare import CompareSummary
from nsight_agent.views.diagnosis import ReportDiagnosis
from nsight_agent.views.report import ReportSummary
from nsight_agent.views.run_list import COLUMNS, RunRow, cells
from nsight_agent.views.runs import ProfileSummary
from nsight_agent.views.text import (
    basis_lines,
    kernels_text,
    label,
    only_variant,
    readable,
    roofline_line,
    step_lines,
)

VERDICT_STYLE = {
    "faster": "bold green",
    "slower": "bold red",
    "within_noise": "yellow",
    "baseline": "cyan",
    "incorrect": "bold red",
    "suspect": "bold red",
    "error": "bold red",
    "no_kernel": "red",
    "timeout": "red",
    "no_data": "red",
    "mixed": "yellow",
    "emulated": "magenta",
}
STATUS_STYLE = {"passed": "green", "running": "cyan"}


def _table(title: str | None = None) -> Table:
    return Table(title=title, title_justify="left", header_style="bold", pad_edge=False)


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}%"


def _cfg(config: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "()"


def closing(warnings: Sequence[str] | None, page: Page | None = None) -> list[RenderableType]:
    """Warnings in yellow, then how to see the rest (in command-line terms)."""
    out: list[RenderableType] = [
        Text.assemble(("warning: ", "yellow"), cli_terms(w)) for w in warnings or []
    ]
    if page is not None and page.truncated:
        out.append(Text(cli_terms(page.truncated), style="dim"))
    return out


# --- report ---------------------------------------------------------------------------------


def report(s: ReportSummary) -> RenderableType:
    table = _table(f"{s.report}: {s.kernels_total} kernel(s) on {s.gpu or 'an unknown GPU'}")
    table.add_column("#", justify="right")
    table.add_column("kernel", overflow="fold", ratio=1)
    table.add_column("time", justify="right", no_wrap=True)
    if s.others:
        table.add_column("share", justify="right")
    for name in ("SOL compute", "SOL memory", "bound"):
        table.add_column(name, justify="right" if name != "bound" else "left")
    for a in s.actions:
        row: list[RenderableType] = [str(a.index), Text(a.kernel, style="bold")]
        row += [readable(a.duration_ns, "ns")] + ([""] if s.others else [])
        row += [_pct(a.sol_compute_pct), _pct(a.sol_memory_pct)]
        table.add_row(*row, a.roofline.bound if a.roofline else "")
    for o in s.others or []:
        table.add_row(
            str(o.index),
            Text(o.kernel, style="dim"),
            readable(o.duration_ns, "ns"),
            _pct(o.share_pct),
        )
    parts: list[RenderableType] = [table]
    for a in s.actions:
        lines = [Text(f"[{a.index}] {a.kernel}", style="bold")]
        ranges = "; ".join(f"{d}: {'/'.join(r)}" for d, r in (a.nvtx or {}).items())
        if ranges:
            lines.append(Text(f"  nvtx {ranges}"))
        if a.roofline is not None:
            lines.append(Text(f"  {roofline_line(a.roofline)}"))
            lines += [Text(f"  note: {n}", style="dim") for n in (a.roofline.notes or [])[:1]]
        for f in a.findings or []:
            gain = (
                f" (~{f.speedup_pct:g}% {f.speedup_type or ''})".rstrip() if f.speedup_pct else ""
            )
            lines.append(Text.assemble("  - ", (f.title, "yellow"), gain))
        parts.append(Group(*lines))
    return Group(*parts, *closing(None, s.page))


# --- diagnose -------------------------------------------------------------------------------


def diagnosis(d: ReportDiagnosis) -> RenderableType:
    parts: list[RenderableType] = [
        Text(f"{d.kernels_total} kernel(s) on {d.gpu or 'an unknown GPU'}; {d.report}", "bold")
    ]
    parts += [Text(f"  {p}", style="dim") for p in d.passes or []]
    parts += [Text(line) for line in step_lines(d.step)]
    for k in d.kernels:
        dg = k.diagnosis
        share = f"{k.share_pct:.3g}%" if k.share_pct is not None else "-"
        parts.append(Text(""))
        parts.append(
            Text.assemble(
                (dg.kernel, "bold"),
                f"  {share} of time, {readable(dg.duration_ns, 'ns')}, {k.launches} launch(es)",
            )
        )
        parts.append(Text(f"  {dg.headline}", style="bold cyan"))
        causes = _table()
        for name in ("cause", "gain", "evidence", "what to try", "read"):
            causes.add_column(name, overflow="fold")
        for c in dg.causes[:3]:
            causes.add_row(
                Text(c.id, style="bold"),
                f"~{c.gain:.0f}%" if c.gain is not None else "",
                "\n".join(f"{e.m} = {e.v:.4g}" for e in c.ev[:3]),
                "\n".join(c.actions[:2]),
                f"nsight-agent skills {c.skill}",
            )
        if dg.causes:
            parts.append(causes)
        if dg.where is not None:
            parts.append(Text(f"  where ({dg.where.basis}):"))
            for h in dg.where.lines:
                at = f"{h.file or dg.where.file}:{h.line}" if h.line is not None else f"pc {h.pc}"
                parts.append(Text(f"    {at} {h.share_pct:.3g}%  {h.text or ''}".rstrip()))
        if dg.unmapped:  # ncu's own findings we did not take as causes, so none is hidden
            parts.append(Text(f"  ncu also flagged: {'; '.join(dg.unmapped)}", style="dim"))
        if dg.deeper:
            parts.append(Text(f"  deeper pass would add: {', '.join(dg.deeper)}", style="dim"))
    if d.others:
        rest = _table("other kernels")
        for name in ("kernel", "share", "headline"):
            rest.add_column(name, overflow="fold")
        for o in d.others:
            rest.add_row(o.kernel[:60], _pct(o.share_pct), o.headline)
        parts.append(rest)
    return Group(*parts, *closing(None, d.page))


# --- compare and profile --------------------------------------------------------------------


def compare(s: CompareSummary, metric_label: Mapping[str, str] | None = None) -> RenderableType:
    metric = (metric_label or {}).get(s.metric, s.metric)
    table = _table(f"run {s.run_id}: {metric} against baseline {s.baseline!r}")
    numbers = ("mean", "median", "p20 - p80", "rsd", "speedup")
    for name in ("config", "variant", *numbers, "verdict"):
        table.add_column(name, justify="right" if name in numbers else "left")
    for c in s.configs:
        for i, (name, v) in enumerate(c.variants.items()):
            table.add_row(
                _cfg(c.config) if i == 0 else "",
                name,
                readable(v.time, s.unit) + (f" ({label(v.emulated)})" if v.emulated else ""),
                readable(v.median, s.unit),
                f"{readable(v.p20, s.unit)} - {readable(v.p80, s.unit)}"
                if v.p20 is not None
                else "",
                _pct(v.rsd_pct),
                f"x{v.speedup:.3g}" if v.speedup is not None else "",
                Text(v.verdict, style=VERDICT_STYLE.get(v.verdict, "")),
            )
        table.add_section()
    overall = _table("overall")
    for name in ("variant", "geomean speedup", "verdict", "why"):
        overall.add_column(name)
    for name, o in s.overall.items():
        why = next(
            (
                c.variants[name].check
                for c in s.configs
                if name in c.variants and c.variants[name].check
            ),
            None,
        )
        bad = o.verdict in ("error", "timeout", "no_kernel", "suspect", "incorrect", "emulated")
        overall.add_row(
            name,
            f"x{o.geomean_speedup:.4g}" if o.geomean_speedup is not None else "",
            Text(o.verdict, style=VERDICT_STYLE.get(o.verdict, "")),
            cli_terms(why or "") if bad else "",
        )
    rule = Text(f"rule: {s.rule}", style="dim")
    basis = [Text(cli_terms(line), style="dim") for line in basis_lines(s)]
    return Group(table, overall, rule, *basis, *closing(s.warnings, s.page))


def profile(s: ProfileSummary, metric_label: Mapping[str, str] | None = None) -> RenderableType:
    """One row per (variant, config, metric); ``metric_label`` renames a metric for people
    (a CPU timing's "gpu__time_duration.sum" is wall-clock time)."""
    head = f"run {s.run_id}" + (f" on {s.gpu}" if s.gpu else "")
    if s.kernels and any(s.kernels.values()):
        head += f"; kernels: {kernels_text(s.kernels)}"
    table = _table(head)
    columns = ["variant", "config", "metric", "avg", "std", "median", "p20 - p80", "min - max"]
    columns += ["n", "rsd", "stable", "output"]
    for name in columns:
        right = name in ("avg", "std", "median", "p20 - p80", "min - max", "n", "rsd")
        table.add_column(name, justify="right" if right else "left", overflow="fold")
    for r in s.results:
        for metric, st in r.stats.items():
            unit = s.units.get(metric)
            output = "" if r.correct is None else ("ok" if r.correct else "WRONG")
            output += f" ({label(r.emulated)})" if r.emulated else ""
            row: list[Any] = [
                r.variant or only_variant(s),
                _cfg(r.config),
                (metric_label or {}).get(metric, metric),
                readable(st.avg, unit),
                readable(st.std, unit),
                readable(st.median, unit),
                f"{readable(st.p20, unit)} - {readable(st.p80, unit)}",
                f"{readable(st.min, unit)} - {readable(st.max, unit)}",
                str(st.n),
                _pct(st.rsd_pct),
                Text("yes", style="green") if st.stable else Text("NO", style="yellow"),
                Text(output, style="green" if r.correct else "bold red"),
            ]
            table.add_row(*row)
    body: list[RenderableType] = [table] if s.results else [Text(head, style="bold")]
    return Group(*body, *closing(s.warnings, s.page))


def failed_run(run_id: str, failure: Mapping[str, Any], warnings: Sequence[str]) -> RenderableType:
    status = str(failure.get("status") or "failed")
    lines: list[RenderableType] = [
        Text.assemble(("run ", "bold"), (run_id, "bold"), " ", (status.upper(), "bold red")),
        Text(f"  at {failure.get('stage') or 'an unknown stage'}: {failure.get('message') or ''}"),
    ]
    if failure.get("error"):
        lines.append(Text(f"  error: {failure['error']}", style="dim"))
    return Group(*lines, *closing([w for w in warnings if run_id not in w]))


# --- runs and doctor ------------------------------------------------------------------------


def runs_list(root: str, rows: Sequence[RunRow]) -> RenderableType:
    table = _table(f"{len(rows)} run(s) in {root}")
    for name in COLUMNS:
        table.add_column(name, overflow="fold")
    for row in rows:
        values: list[RenderableType] = list(cells(row))
        state = row.status.split(" ")[0]
        values[4] = Text(row.status, style=STATUS_STYLE.get(state, "bold red"))
        table.add_row(*values)
    return table


def doctor(info: Any, install: Sequence[str], pool: str | None = None) -> RenderableType:
    """``DeviceInfo`` as a checklist: each thing profiling needs, found or not."""
    table = _table(f"{info.host}, Python {info.python}")
    table.add_column("")
    table.add_column("check")
    table.add_column("found")
    ok, bad, unknown = Text("ok", "green"), Text("no", "bold red"), Text("?", "yellow")
    gpus = "; ".join(
        f"{g.index}: {g.name} ({g.sm_count or '?'} SMs, {g.memory_gib or '?'} GiB)"
        for g in info.gpus
    )
    table.add_row(ok if info.gpus else bad, "GPU", gpus or "none found")
    table.add_row(
        ok if info.driver_version else bad,
        "driver / CUDA (torch)",
        f"{info.driver_version or '-'} / {info.cuda_version or '-'}",
    )
    table.add_row(
        ok if info.ncu_path else bad,
        "ncu",
        f"{info.ncu_path or 'not found'} {info.ncu_version or ''}",
    )
    permitted = info.counters.permitted
    mark = ok if permitted == "yes" else bad if permitted == "no" else unknown
    table.add_row(mark, "counter access", f"{permitted} ({info.counters.how})")
    for name, version in info.packages.items():
        table.add_row(bad if version == "not installed" else ok, f"package {name}", version)
    table.add_row(
        ok if info.can_profile else bad,
        Text("can profile", "bold"),
        "yes" if info.can_profile else "no",
    )
    parts: list[RenderableType] = [table]
    parts += [Text(f"unknown: {cli_terms(u)}", style="yellow") for u in info.unknown]
    if info.counters.hint:
        parts.append(Text(f"hint: {cli_terms(info.counters.hint)}", style="yellow"))
    parts += [Text(line, style="bold") for line in install]
    if pool:
        parts.append(Text(pool))
    return Group(*parts)
