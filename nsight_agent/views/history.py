"""History of one kernel (``judge/history.py``) as short text and a PNG drawn like
``views.plot``'s: one line or point per run, coloured by its verdict against the reference."""

from __future__ import annotations

from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from nsight_agent.judge.history import History

# Colours of a point by its verdict against the reference (the rest: grey).
VERDICT_COLORS = {"faster": "tab:green", "slower": "tab:red", "within_noise": "tab:blue"}


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
