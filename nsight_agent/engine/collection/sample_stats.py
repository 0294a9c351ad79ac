"""The processed columns of one (variant, config) from its samples, where the samples are
kept (the timing loop, the pre-flight's timed calls) rather than aggregated from raw rows:
AvgValue, StdDev and CI95_Lower/Upper are the mean, the sample std (n-1) and
mean ± 1.96·std/√n as ``aggregate.py`` computes them; MedianValue and MedianCI95_Lower/Upper
(order statistics) are added; StableMeasurement is the engine's one rule (RSD <
``STABLE_RSD_PCT``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from nsight_agent.engine.collection.aggregate import STABLE_RSD_PCT


def median_ci(samples: Sequence[float]) -> tuple[float, float]:
    """Distribution-free 95% CI of the median (order statistics, normal approximation)."""
    xs, n = sorted(samples), len(samples)
    half = 1.96 * math.sqrt(n) / 2
    lo, hi = math.floor(n / 2 - half), math.ceil(n / 2 + half)
    return xs[max(lo, 0)], xs[min(hi, n - 1)]


def summarize(samples: Sequence[float], ci_target_pct: float) -> dict[str, Any]:
    """The processed columns of one (variant, config); StableMeasurement is the engine's one
    rule, RSD < STABLE_RSD_PCT (as on the ncu path)."""
    n = len(samples)
    mean, median = statistics.fmean(samples), statistics.median(samples)
    std = statistics.stdev(samples) if n > 1 else float("nan")
    half = 1.96 * std / math.sqrt(n) if n > 1 else float("nan")
    m_lo, m_hi = median_ci(samples)
    # 20th/80th percentiles, linear between samples (numpy's default, as aggregate's)
    cuts = statistics.quantiles(samples, n=5, method="inclusive") if n > 1 else [samples[0]] * 4
    rsd = std / mean * 100 if mean and n > 1 else float("nan")
    return {
        "AvgValue": mean,
        "StdDev": std,
        "MinValue": min(samples),
        "MaxValue": max(samples),
        "NumRuns": n,
        "CI95_Lower": mean - half,
        "CI95_Upper": mean + half,
        "RelativeStdDevPct": rsd,
        "StableMeasurement": bool(rsd < STABLE_RSD_PCT),
        "MedianValue": median,
        "MedianCI95_Lower": m_lo,
        "MedianCI95_Upper": m_hi,
        "P20Value": cuts[0],
        "P80Value": cuts[3],
    }
