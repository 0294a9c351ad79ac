"""A run's per-call times as rows beside its GPU time: the pre-flight's timed calls
(``PreflightResult.call_ns`` and ``kernelbench_ns``, from ``harness/call_loop.py``)
summarised in the processed frame's columns (``sample_stats.py``) under metrics of their own
(``time_basis.CALL_METRIC``, ``KERNELBENCH_METRIC``), so a comparison on either time basis,
and KernelBench's numbers, read one frame on both methods.

On a CPU the pre-flight times no call: the timing loop's wall times (perf_counter around each
call) are the calls' times already, and its rows are the per-call rows too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from nsight_agent.engine.collection.sample_stats import summarize
from nsight_agent.engine.store.runs import PreflightResult
from nsight_agent.request import TIME_METRIC, ProfileRequest
from nsight_agent.time_basis import CALL_METRIC, KERNELBENCH_METRIC

CPU_CLOCK = "perf_counter"  # the timing loop's clock on a CPU (worker/timer.py)
Samples = dict[str, dict[int, list[float]]]  # variant -> config index -> ns


def samples_of(entries: Any) -> Samples:
    """A manifest's ``call_ns`` or ``kernelbench_ns`` (one entry per config) by variant and
    config; anything malformed is left out."""
    out: Samples = {}
    for entry in entries if isinstance(entries, list) else []:
        config, by_variant = entry.get("config"), entry.get("ns")
        if not isinstance(config, int) or not isinstance(by_variant, dict):
            continue
        for variant, values in by_variant.items():
            kept = [float(v) for v in values or [] if isinstance(v, int | float) and v > 0]
            if kept:
                out.setdefault(str(variant), {})[config] = kept
    return out


def rows(
    request: ProfileRequest,
    samples: Mapping[str, Mapping[int, list[float]]],
    metric: str,
    like: pd.DataFrame,
) -> pd.DataFrame:
    """One processed row per (variant, config) of ``samples`` under ``metric`` (ns); its GPU
    and OutputOK those of the time row of that (variant, config) in ``like``."""
    params, configs = request.param_names(), request.expanded_configs()
    found = _time_rows(like, params)
    out = []
    for variant, by_config in samples.items():
        for index, values in sorted(by_config.items()):
            if not 0 <= index < len(configs) or not values:
                continue
            config = configs[index]
            row: dict[str, Any] = {"Annotation": variant, "Metric": metric}
            row.update({p: config[p] for p in params})
            row.update(summarize(values, 0.0))
            twin = found.get((variant, tuple(str(config[p]) for p in params)), {})
            row.update(Kernel=None, GPU=twin.get("GPU"), Unit="ns", Normalized=False)
            if "OutputOK" in like.columns:
                row["OutputOK"] = bool(twin.get("OutputOK", False))
            out.append(row)
    frame = pd.DataFrame(out)
    if not frame.empty:
        frame["Geomean"] = frame.groupby("Annotation", sort=False)["AvgValue"].transform(_geomean)
    return frame


def _time_rows(
    frame: pd.DataFrame, params: list[str]
) -> dict[tuple[str, tuple[str, ...]], dict[str, Any]]:
    if frame.empty or "Metric" not in frame.columns:
        return {}
    times = frame[frame["Metric"] == TIME_METRIC]
    return {
        (str(r["Annotation"]), tuple(str(r[p]) for p in params)): r
        for r in times.to_dict("records")
    }


def _geomean(values: pd.Series) -> float:
    vals = [float(v) for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else float("nan")


def with_call_rows(
    processed: pd.DataFrame, request: ProfileRequest, pre: PreflightResult | None, clock: str | None
) -> pd.DataFrame:
    """``processed`` and the rows of the calls timed end to end: the pre-flight's, or on a CPU
    (``clock`` the timing loop's ``perf_counter``) its time rows again; KernelBench's trials'
    rows where it ran them."""
    parts = [processed]
    if clock == CPU_CLOCK and "Metric" in processed.columns:
        cpu = processed[processed["Metric"] == TIME_METRIC].copy()
        cpu["Metric"] = CALL_METRIC
        parts.append(cpu)
    elif pre is not None and pre.call_ns:
        parts.append(rows(request, pre.call_ns, CALL_METRIC, processed))
    if pre is not None and pre.kernelbench_ns:
        parts.append(rows(request, pre.kernelbench_ns, KERNELBENCH_METRIC, processed))
    parts = [p for p in parts if not p.empty]
    if len(parts) <= 1:
        return processed
    return pd.concat(parts, ignore_index=True)
