"""A run of the tool pipeline as ``profile_kernel``'s answer: per (variant, config) each
metric's mean, spread and stability, the run's warnings (``judge/run_warnings.py``), its
artifacts and how it was collected, paged."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, Field

import nsight_agent.kernelbench as kernelbench
from nsight_agent.judge.emulated import emulator
from nsight_agent.judge.run import (
    CPU_TIMER,
    STABLE_RSD_PCT,
    RunLike,
    checks_by,
    config_index,
    config_list,
    param_names,
    row_config,
    timing_method,
    variant_names,
)
from nsight_agent.numbers import sig
from nsight_agent.request import TIME_METRIC
from nsight_agent.time_basis import CALL_METRIC, KERNELBENCH_METRIC
from nsight_agent.views.common import ARTIFACT_URI, Page, page


class Stat(BaseModel):
    """One metric of one config: spread over the runs (median, 20th and 80th percentiles
    beside the mean, as Triton's do_bench reports them)."""

    avg: float | None = None
    std: float | None = None
    median: float | None = None
    p20: float | None = None
    p80: float | None = None
    min: float | None = None
    max: float | None = None
    n: int
    rsd_pct: float | None = Field(default=None, description="Relative std dev, %")
    stable: bool = Field(description=f"rsd_pct < {STABLE_RSD_PCT:g}")


class ConfigResult(BaseModel):
    config_index: int
    config: dict[str, Any]
    variant: str | None = Field(default=None, description="Set when the run had several")
    stats: dict[str, Stat] = Field(description="metric -> statistics over the runs")
    kernel: str | None = Field(
        default=None, description="Set when it differs from the run's kernels list"
    )
    correct: bool | None = Field(default=None, description="Output check against the baseline")
    emulated: str | None = Field(default=None, description="Ran under it: not a kernel time")


class ProfileSummary(BaseModel):
    """profile_kernel's answer: per config, each metric's mean, spread and stability."""

    run_id: str
    gpu: str | None = None
    units: dict[str, str] = Field(description="metric -> unit")
    kernels: dict[str, list[str]] = Field(description="variant -> kernels profiled")
    page: Page
    results: list[ConfigResult]
    warnings: list[str] | None = None
    artifacts: list[str] | None = Field(
        default=None,
        description=f"Artifact names; read them as resources {ARTIFACT_URI}",
    )
    seconds: float | None = None
    collection: str | None = Field(default=None, description="pre-launched, or cold: why")


def _stat(row: Mapping[str, Any]) -> Stat:
    rsd = sig(row.get("RelativeStdDevPct"), 3)
    n = row.get("NumRuns")
    return Stat(
        avg=sig(row.get("AvgValue")),
        std=sig(row.get("StdDev"), 3),
        median=sig(row.get("MedianValue")),
        p20=sig(row.get("P20Value")),
        p80=sig(row.get("P80Value")),
        min=sig(row.get("MinValue")),
        max=sig(row.get("MaxValue")),
        n=int(n) if n is not None and not pd.isna(n) else 0,
        rsd_pct=rsd,
        stable=bool(row.get("StableMeasurement")) if rsd is not None else False,
    )


def problem_sizes(run: RunLike) -> dict[str, Any]:
    """A KernelBench problem's sizes (the module constants its inputs read), shown under each
    config (which overrides them) so its column reads the sizes it ran at, not blank; empty
    for any other source."""
    if getattr(run.request, "language", None) != "kernelbench":  # (a test's stand-in has none)
        return {}
    return kernelbench.sizes(run.request.source)


def metric_labels(run: RunLike) -> dict[str, str]:
    """Names for people: a CPU timing's time metric is wall-clock time, not a GPU duration;
    the per-call times say what timed them."""
    if timing_method(run, run.processed) == CPU_TIMER:
        return {TIME_METRIC: "CPU time (perf_counter)", CALL_METRIC: "per-call wall time"}
    return {
        CALL_METRIC: "per-call time (CUDA events)",
        KERNELBENCH_METRIC: "KernelBench's per-call time",
    }


def artifact_names(run: RunLike) -> list[str] | None:
    return sorted(k for k, p in run.artifacts.items() if Path(p).exists()) or None


def _gpu(frame: pd.DataFrame) -> str | None:
    if "GPU" not in frame.columns:
        return None
    names = [str(g) for g in frame["GPU"].dropna().unique() if str(g)]
    return names[0] if names else None


def profile_summary(
    run: RunLike,
    frame: pd.DataFrame,
    warnings: list[str],
    *,
    offset: int = 0,
    limit: int = 20,
) -> ProfileSummary:
    """Per (variant, config) of ``frame`` (the run's rows to show, in absolute values): each
    metric's avg, std, median, p20, p80, min, max, n, RSD and stability; ``warnings``: the
    run's."""
    params = param_names(frame)
    configs = config_list(run)
    variants = variant_names(frame)
    checks = checks_by(run)
    sizes = problem_sizes(run)
    groups: dict[tuple[str, int], ConfigResult] = {}
    kernels_listed = {k for ks in run.kernels.values() for k in ks}
    for row in frame.to_dict("records"):
        variant = str(row["Annotation"])
        idx = config_index(configs, row, params)
        key = (variant, idx)
        entry = groups.get(key)
        if entry is None:
            check = checks.get(key)
            raw_kernel = row.get("Kernel")
            kernel = None if raw_kernel is None or pd.isna(raw_kernel) else str(raw_kernel) or None
            entry = ConfigResult(
                config_index=idx,
                config=sizes | (configs[idx] if idx >= 0 else row_config(row, params)),
                variant=variant if len(variants) > 1 else None,
                stats={},
                kernel=kernel if kernel and kernel not in kernels_listed else None,
                correct=None if check is None else bool(check.ok),
                emulated=emulator(row),
            )
            groups[key] = entry
        entry.stats[str(row["Metric"])] = _stat(row)
    ordered = sorted(
        groups.values(), key=lambda e: (e.config_index, variants.index(e.variant or variants[0]))
    )
    pg = page(
        len(ordered),
        offset,
        limit,
        f"get_run(run_id={run.run_id!r}, offset={{offset}}, limit={{limit}})",
    )
    units = {
        str(m): str(u) if isinstance(u, str) else "" for m, u in zip(frame["Metric"], frame["Unit"])
    }
    return ProfileSummary(
        run_id=run.run_id,
        gpu=_gpu(frame),
        units=units,
        kernels={k: list(v) for k, v in run.kernels.items()},
        page=pg,
        results=ordered[offset : offset + limit],
        warnings=warnings or None,
        artifacts=artifact_names(run),
        seconds=sig(run.seconds, 3),
        collection=_collection(run),
    )


def _collection(run: RunLike) -> str | None:
    """The collect stage's path, as the run recorded it (kept short: answers are paid for)."""
    return (run.facts.collection or "")[:160] or None
