"""History of one kernel: its runs over time against one reference run (a baseline, or the
oldest run of the source), each with its times per config and the run-to-run verdict of
``views.run_diff``; as a compact model, short text, and a PNG drawn like ``views.plot``'s."""

from __future__ import annotations

import json
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pydantic import BaseModel, Field

from nsight_agent.engine.pipeline import RunResult
from nsight_agent.request import TIME_METRIC
from nsight_agent.views.common import sig
from nsight_agent.views.run_diff import diff_runs, has_median, variant_rows
from nsight_agent.views.runs import config_list

# Colours of a point by its verdict against the reference (the rest: grey).
VERDICT_COLORS = {"faster": "tab:green", "slower": "tab:red", "within_noise": "tab:blue"}


class HistoryPoint(BaseModel):
    run_id: str
    date: str | None = None
    variant: str
    method: str
    gpu: str | None = None
    source_hash: str
    times: list[float | None] = Field(description="Per reference config, its statistic")
    geomean_speedup: float | None = Field(default=None, description="reference / this run")
    verdict: str = Field(description="Against the reference; reference; or not_comparable")
    why: str | None = Field(default=None, description="Why not comparable (the first reason)")


class History(BaseModel):
    """One kernel's trend: every kept run of its source, oldest first, against a reference."""

    key: str
    baseline: str | None = None
    reference: str = Field(description="run_id [variant] the verdicts are against")
    metric: str
    unit: str | None = None
    configs: list[dict[str, Any]]
    points: list[HistoryPoint]


def _times(run: RunResult, variant: str, configs: list[dict[str, Any]]) -> list[float | None]:
    rows = variant_rows(run, variant, TIME_METRIC)
    out: list[float | None] = []
    for config in configs:
        row = rows.get(json.dumps(config, sort_keys=True, default=str), {})
        out.append(sig(row.get("MedianValue") if has_median(row) else row.get("AvgValue")))
    return out


def build_history(
    key: str,
    reference: tuple[RunResult, str],
    points: list[tuple[RunResult, str]],
    *,
    name: str | None = None,
) -> History:
    """Each (run, variant) against the reference with the run-to-run rule."""
    ref_run, ref_variant = reference
    configs = config_list(ref_run)
    out: list[HistoryPoint] = []
    seen: set[tuple[str, str]] = set()
    for run, variant in sorted(points, key=lambda p: p[0].run_id):
        if (run.run_id, variant) in seen:
            continue
        seen.add((run.run_id, variant))
        d = diff_runs(ref_run, run, base_variant=ref_variant, cand_variant=variant)
        is_ref = (run.run_id, variant) == (ref_run.run_id, ref_variant)
        verdict = "reference" if is_ref else "not_comparable"
        if d.comparable and not is_ref and d.overall is not None:
            verdict = d.overall.verdict
        out.append(
            HistoryPoint(
                run_id=run.run_id,
                date=d.candidate.date,
                variant=variant,
                method=d.candidate.method,
                gpu=d.candidate.gpu,
                source_hash=d.candidate.source_hash,
                times=_times(run, variant, configs),
                geomean_speedup=None if is_ref or d.overall is None else d.overall.geomean_speedup,
                verdict=verdict,
                why=d.reasons[0] if d.reasons else None,
            )
        )
    unit = next((str(u) for u in ref_run.processed.get("Unit", []) if isinstance(u, str)), None)
    return History(
        key=key,
        baseline=name,
        reference=f"{ref_run.run_id} [{ref_variant}]",
        metric=TIME_METRIC,
        unit=unit,
        configs=configs,
        points=out,
    )


def _label(config: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items()) or "-"


def render_history(h: History) -> str:
    """One line per run: date, run, method, GPU, verdict, geomean speedup, times."""
    from nsight_agent.views.text import readable

    head = f"history of {h.baseline or h.key} against {h.reference} ({h.metric}, {h.unit or ''})"
    configs = [f"#{i} {_label(c)}" for i, c in enumerate(h.configs)]
    columns = f"{'date':20} run [variant] source method GPU  verdict  x geomean  time per config"
    lines = [head, "configs: " + "; ".join(configs), columns]
    for p in h.points:
        times = " ".join(readable(t, h.unit) if t is not None else "-" for t in p.times)
        g = f"{p.geomean_speedup:.3f}" if p.geomean_speedup is not None else "-"
        why = f"  ({p.why})" if p.why else ""
        lines.append(
            f"{p.date or '?':20} {p.run_id} [{p.variant}] {p.source_hash} {p.method} "
            f"{p.gpu or '?'}  {p.verdict:14} x{g}  {times}{why}"
        )
    return "\n".join(lines)


def plot_history(h: History, filename: str, *, width: float = 8, height: float = 4) -> Any:
    """Time per config over the runs (oldest left), a line per config; each point coloured by
    its verdict against the reference, hollow when not comparable. Saved to ``filename``."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    xs = list(range(len(h.points)))
    for i, config in enumerate(h.configs):
        ys = [p.times[i] if i < len(p.times) else None for p in h.points]
        ax.plot(xs, [float("nan") if y is None else y for y in ys], "-", label=_label(config))
        for x, y, p in zip(xs, ys, h.points, strict=True):
            if y is None:
                continue
            color = VERDICT_COLORS.get(p.verdict, "grey")
            hollow = p.verdict == "not_comparable"
            ax.scatter(
                [x], [y], s=36, zorder=3, edgecolors=color, facecolors="none" if hollow else color
            )
    ax.set_xticks(
        xs, [f"{(p.date or p.run_id)[:10]}\n{p.run_id[-6:]}" for p in h.points], fontsize=7
    )
    ax.set_ylabel(f"{h.metric} ({h.unit})" if h.unit else h.metric)
    ax.set_xlabel(
        "run (oldest left); green faster, red slower, blue within noise, hollow: not comparable"
    )
    if h.configs:
        ax.legend(fontsize=8)
    fig.suptitle(f"history of {h.baseline or h.key} vs {h.reference}", fontsize=11)
    fig.savefig(filename, dpi=100)
    return fig
