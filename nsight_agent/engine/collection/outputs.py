"""The check stage's reading: what a run's output checks and kernel counts say about its rows.

Pure functions over what the harness recorded (checks, kernels per call) and the aggregated
frame: ``OutputOK`` per row (no speedup is read off a wrong row), and the warnings an answer
carries (wrong variants, several kernels summed per run, CUDA-event times too short to trust).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from nsight_agent.engine.collection.extract import ActionRecord
from nsight_agent.engine.store.runs import OutputCheck, PreflightResult
from nsight_agent.request import ProfileRequest

# Below this, CUDA events read a kernel's time with a few microseconds of launch and event
# overhead that ncu's gpu__time_duration leaves out: 15-48 % high from 4 to 31 us on the H200
# (docs/BENCHMARKS.md), within 4 % above 50 us.
SHORT_KERNEL_NS = 50_000.0


def most_kernels_per_run(
    records: list[ActionRecord], variants: list[str], ignore: list[str]
) -> dict[str, int]:
    """Per variant, the most distinct kernels one call launched. Counted call by call: one
    config may launch another kernel than the next (a library picks an algorithm per size)
    without launching two per run."""
    per_call: dict[tuple[str, int], set[str]] = {}
    for r in records:
        if r.annotation in variants and r.call is not None and r.kernel not in ignore:
            per_call.setdefault((r.annotation, r.call), set()).add(r.kernel)
    return {
        v: max((len(k) for (a, _), k in per_call.items() if a == v), default=0) for v in variants
    }


def with_ok_column(
    processed: pd.DataFrame, request: ProfileRequest, checks: list[OutputCheck]
) -> pd.DataFrame:
    """OutputOK per row: no speedup may be read off a row whose outputs were wrong."""
    params = request.param_names()
    configs = request.expanded_configs()
    ok: dict[tuple[str, tuple[str, ...]], bool] = {}
    for c in checks:
        key = (c.variant, tuple(str(configs[c.config_index][k]) for k in params))
        ok[key] = ok.get(key, True) and c.ok
    out = processed.copy()
    out["OutputOK"] = [
        ok.get((str(row["Annotation"]), tuple(str(row[k]) for k in params)), False)
        for _, row in out.iterrows()
    ]
    return out


def ncu_run_warnings(
    request: ProfileRequest,
    checks: list[OutputCheck],
    kernels: dict[str, list[str]],
    most_per_run: dict[str, int],
    pre: PreflightResult,
) -> list[str]:
    """The warnings of an ncu run: wrong variants, kernels summed per run, pre-flight notes."""
    out = [
        f"variant {c.variant!r} is WRONG for config #{c.config_index} {c.config}: {c.message}; "
        "no speedup is claimed for it"
        for c in checks
        if not c.ok
    ]
    for variant, names in kernels.items():
        kept = [n for n in names if n not in request.ignore_kernels]
        most = most_per_run.get(variant, 0)
        if most > 1 and request.combine_kernels == "sum":
            out.append(
                f"variant {variant!r} launches up to {most} kernels per run ({', '.join(kept)}); "
                "their metrics are summed. Name helpers in ignore_kernels to drop them."
            )
    out += pre.notes
    return out


def short_kernel_warning(frame: Any, method: str) -> list[str]:
    """One warning when CUDA-event medians are short enough to be read high."""
    if method != "cuda_events" or "MedianValue" not in getattr(frame, "columns", ()):
        return []
    short = [float(v) for v in frame["MedianValue"] if float(v) < SHORT_KERNEL_NS]
    if not short:
        return []
    return [
        f"{len(short)} row(s) under 50 us (shortest {min(short) / 1e3:.1f} us): CUDA-event "
        "times this short read 15-48 % above ncu's kernel duration (launch and event "
        "overhead); compare them with method='ncu'"
    ]
