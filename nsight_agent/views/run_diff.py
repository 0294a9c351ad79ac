"""A run against a baseline as short text: whether they were comparable (and why not, and
what to do), then one line per config and the overall verdict (``judge/run_diff.py``
decides)."""

from __future__ import annotations

from nsight_agent.judge.run_diff import RunDiff
from nsight_agent.numbers import time_text as _time


def render_diff(d: RunDiff) -> str:
    """Short text: the comparability first, then one line per config."""
    b, c = d.baseline, d.candidate
    name = f"baseline {b.baseline!r} " if b.baseline else "run "
    lines = [
        f"{c.run_id} [{c.variant}] vs {name}{b.run_id} [{b.variant}]: "
        f"{c.method} on {c.gpu or '?'}; {'; '.join(d.notes or [])}"
    ]
    if not d.comparable:
        lines += ["NOT COMPARABLE:", *(f"  - {r}" for r in d.reasons or []), d.todo or ""]
        return "\n".join(lines)
    for u in d.unverified or []:
        lines.append(f"unverified: {u}")
    lines.append(f"{'config':28} {'baseline':>12} {'this run':>12} {'speedup':>8}  verdict")
    for row in d.configs:
        config = ",".join(f"{k}={v}" for k, v in row.config.items()) or "-"
        t0, t1 = _time(row.baseline_time, d.unit), _time(row.time, d.unit)
        s = f"{row.speedup:.3f}" if row.speedup is not None else "-"
        lines.append(f"{config[:28]:28} {t0:>12} {t1:>12} {s:>8}  {row.verdict}")
    for row in d.configs:
        if row.reason:
            lines.append(f"why #{row.config_index}: {row.reason}")
    if d.overall is not None:
        g = d.overall.geomean_speedup
        lines.append(f"overall: {d.overall.verdict}" + (f", geomean speedup {g:.3f}" if g else ""))
    lines.append(
        f"({d.statistic}s; 95% intervals widened by {d.drift_pct:g}% between-run drift; "
        "docs/BASELINES.md)"
    )
    if d.regression is not None:
        limit = f"threshold {d.threshold_pct:g}%" if d.threshold_pct else "beyond the drift"
        lines.append(f"regression ({limit}): {d.regression}")
    return "\n".join(lines)
