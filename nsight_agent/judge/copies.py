"""Copies and memsets on the ncu path: ncu profiles kernels only, so a variant that moves work
into ``cudaMemcpy``/``cudaMemset`` (a copy-in, a ``clone()``) looks cheaper under ncu than it
is. The pre-flight measured each call's copies with CUPTI (``PreflightResult.copies_ns``);
a comparison adds them to the kernel time a verdict reads, so the ncu and timing paths
(whose CUPTI time already holds them) agree on which variant is faster; the run's warnings
(``collection/check.copies_notes``) say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nsight_agent.judge.run import RunLike, timing_method
from nsight_agent.request import TIME_METRIC

# The columns that hold a time (ns) in a processed row: each moves by the copies' time.
TIME_COLUMNS = (
    "AvgValue",
    "CI95_Lower",
    "CI95_Upper",
    "MedianValue",
    "MedianCI95_Lower",
    "MedianCI95_Upper",
)


def copies_by(run: RunLike, metric: str) -> dict[tuple[str, int], float]:
    """(variant, config index) -> ns of copies per call, for an ncu run's time metric; empty
    for the timing path (its times already hold them) and for other metrics."""
    if metric != TIME_METRIC or run.preflight is None:
        return {}
    if timing_method(run, run.processed) is not None:
        return {}
    return {
        (variant, config): ns
        for variant, per_config in run.preflight.copies_ns.items()
        for config, ns in per_config.items()
    }


def with_copies(
    rows: Mapping[tuple[str, int], dict[str, Any]], copies: Mapping[tuple[str, int], float]
) -> dict[tuple[str, int], dict[str, Any]]:
    """Each row's times plus its (variant, config)'s copies, as one call of it costs."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for key, row in rows.items():
        extra = copies.get(key, 0.0)
        out[key] = dict(row)
        if extra:
            for column in TIME_COLUMNS:
                if isinstance(row.get(column), int | float):
                    out[key][column] = row[column] + extra
    return out
