"""Which part of the gate's rule decided a config, in words with its numbers.

The run-to-run rule (``judge/run_diff.py``) reads each run's drift-widened 95% interval, then
``verdicts.config_verdict``: the absolute floor of a time, the interval overlap, the minimum
effect, in that order. ``explain`` walks the same order over the same numbers and says which
test stopped there, so "within_noise, exit 0" never comes without its reason.

Where two runs can be told apart: intervals widened by ±z·D of their own centers separate
only once the ratio of the centers passes (1 + z·D) / (1 − z·D) (``separable_ratio``): 1.06x
for GPU runs (D = 1.5 %), 1.83x for CPU runs (D = 15 %), before each run's own interval is
added. A change below that is judged by measuring both in one run (``check --remeasure``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nsight_agent.judge.verdicts import FAILING
from nsight_agent.numbers import sig, time_text

Z95 = 1.96
REMEASURE = "both in one run (check --remeasure) has no drift term and tells smaller changes apart"


def separable_ratio(drift_pct: float) -> float:
    """The smallest ratio of two centers whose drift-widened intervals no longer overlap
    (each run's own interval taken as nil)."""
    d = Z95 * drift_pct / 100.0
    return (1 + d) / (1 - d) if d < 1 else float("inf")


def interval_text(row: Mapping[str, Any], unit: str | None) -> str:
    """ "190 us (134-246 us)": a widened row's center and its interval."""
    center, lo, hi = (sig(row.get(k)) for k in ("AvgValue", "CI95_Lower", "CI95_Upper"))
    if lo is None or hi is None:
        return time_text(center, unit)
    return f"{time_text(center, unit)} ({time_text(lo, unit)} to {time_text(hi, unit)})"


def explain(
    verdict: str,
    base: Mapping[str, Any],
    cand: Mapping[str, Any] | None,
    *,
    unit: str | None,
    drift_pct: float,
    min_effect_pct: float,
    floor: float,
    threshold_pct: float | None = None,
    check: str | None = None,
) -> str:
    """Why one config got ``verdict`` from the widened rows ``base`` and ``cand``: the test of
    ``config_verdict`` that decided, with both intervals, the change and the limit it met."""
    if verdict in FAILING:
        said = f": {check}" if check else ""
        return f"{verdict}{said}; a failing candidate is a regression whatever its time"
    t_b, t_c = sig(base.get("AvgValue"), 12), sig((cand or {}).get("AvgValue"), 12)
    if cand is None or t_b is None or t_c is None:
        return (
            "no_data: this run has no time for this config; a config not measured is a regression"
        )
    both = (
        f"baseline {interval_text(base, unit)}, this run {interval_text(cand, unit)}, "
        f"each widened by the {drift_pct:g} % between-run drift"
    )
    change = t_c / t_b if t_b > 0 else float("inf")
    ratio = f"{change:.3g}x the baseline's time"
    if abs(t_c - t_b) < floor:
        return (
            f"within_noise by the absolute floor: the times differ by "
            f"{time_text(abs(t_c - t_b), unit)}, under the {time_text(floor, unit)} a time must "
            "move to count"
        )
    if verdict == "within_noise":
        limit = separable_ratio(drift_pct)
        apart = not _overlap(base, cand)
        if apart:
            return (
                f"within_noise by the minimum effect: the intervals are apart ({both}) but "
                f"{ratio} is a change under the {min_effect_pct:g} % minimum effect"
            )
        return (
            f"within_noise by interval overlap: {both}, overlap ({ratio}); at this drift two "
            f"runs are told apart only beyond about {limit:.3g}x; {REMEASURE}"
        )
    said = (
        f"{verdict}: the intervals are apart ({both}) and {ratio} is at least the "
        f"{min_effect_pct:g} % minimum effect"
    )
    if verdict == "slower" and threshold_pct:
        slower_pct = (change - 1) * 100
        above = slower_pct >= threshold_pct
        said += (
            f"; {slower_pct:.3g} % slower is {'at least' if above else 'under'} the "
            f"--threshold {threshold_pct:g} %" + ("" if above else ": not a regression")
        )
    return said


def _overlap(base: Mapping[str, Any], cand: Mapping[str, Any]) -> bool:
    lo_b, hi_b = sig(base.get("CI95_Lower"), 12), sig(base.get("CI95_Upper"), 12)
    lo_c, hi_c = sig(cand.get("CI95_Lower"), 12), sig(cand.get("CI95_Upper"), 12)
    if lo_b is None or hi_b is None or lo_c is None or hi_c is None:
        return True
    return not (hi_c < lo_b or lo_c > hi_b)
