"""A run of the tool pipeline: per-config statistics of each metric, warnings, and its raw
or processed rows, paged."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import pandas as pd
from pydantic import BaseModel, Field

from nsight_agent.engine.collection.aggregate import STABLE_RSD_PCT
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.engine.store.records import DroppedVariant, RunFiles, Suspect
from nsight_agent.engine.store.runs import OutputCheck, PreflightResult
from nsight_agent.errors import InvalidRequestError
from nsight_agent.request import ProfileRequest
from nsight_agent.views.builds import build_note, stage_seconds_of
from nsight_agent.views.common import ARTIFACT_URI, Page, page, scalar, sig


class RunLike(Protocol):
    """What the views read of a run (``pipeline.RunResult``, or a stand-in in tests)."""

    run_id: str
    run_dir: Path
    request: ProfileRequest
    processed: pd.DataFrame
    raw: pd.DataFrame
    checks: list[OutputCheck]
    kernels: dict[str, list[str]]
    warnings: list[str]
    artifacts: dict[str, Path]
    seconds: float
    facts: RunFacts  # method (timing path), collection (ncu path), ...
    preflight: PreflightResult | None  # its builds, for the compile note
    dropped: dict[str, DroppedVariant]
    suspects: list[Suspect]

    @property
    def files(self) -> RunFiles: ...


def param_names(processed: pd.DataFrame) -> list[str]:
    """Config columns of a processed frame: the ones between ``Metric`` and ``AvgValue``."""
    cols = list(processed.columns)
    if "Metric" not in cols or "AvgValue" not in cols:
        return []
    return cols[cols.index("Metric") + 1 : cols.index("AvgValue")]


def _config_key(row: Mapping[str, Any], params: Sequence[str]) -> tuple[Any, ...]:
    return tuple(scalar(row[p]) for p in params)


def config_list(run: RunLike) -> list[dict[str, Any]]:
    """The run's configs in request order (request.expanded_configs()), else in frame order."""
    try:
        configs = run.request.expanded_configs()
        return [{k: scalar(v) for k, v in dict(c).items()} for c in configs]
    except Exception:  # a request we cannot expand: fall back to the frame
        pass
    params = param_names(run.processed)
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in run.processed.to_dict("records"):
        key = _config_key(row, params)
        seen.setdefault(key, dict(zip(params, key)))
    return list(seen.values())


def config_index(
    configs: list[dict[str, Any]], row: Mapping[str, Any], params: Sequence[str]
) -> int:
    key = _config_key(row, params)
    for i, c in enumerate(configs):
        if tuple(scalar(c.get(p)) for p in params) == key:
            return i
    # Values the frame stringified (dtypes): compare as text.
    text = tuple(str(k) for k in key)
    for i, c in enumerate(configs):
        if tuple(str(scalar(c.get(p))) for p in params) == text:
            return i
    return -1


def denormalized(frame: pd.DataFrame) -> pd.DataFrame:
    """Absolute values even when the pipeline normalised the frame against a baseline."""
    if "NormalizationValue" not in frame.columns:
        return frame
    out = frame.copy()
    for col in ("AvgValue", "StdDev", "MinValue", "MaxValue", "CI95_Lower", "CI95_Upper"):
        if col in out.columns:
            out[col] = out[col] * out["NormalizationValue"]
    return out


class Stat(BaseModel):
    """One metric of one config: spread over the runs."""

    avg: float | None = None
    std: float | None = None
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
        min=sig(row.get("MinValue")),
        max=sig(row.get("MaxValue")),
        n=int(n) if n is not None and not pd.isna(n) else 0,
        rsd_pct=rsd,
        stable=bool(row.get("StableMeasurement")) if rsd is not None else False,
    )


def variant_names(frame: pd.DataFrame) -> list[str]:
    return [str(a) for a in dict.fromkeys(frame["Annotation"])] if len(frame) else []


def checks_by(run: RunLike) -> dict[tuple[str, int], OutputCheck]:
    return {(c.variant, c.config_index): c for c in run.checks}


def run_warnings(run: RunLike, frame: pd.DataFrame) -> list[str]:
    """The pipeline's warnings plus what the numbers show: instability, combined kernels, clocks.

    A wrong variant is said once, with the configs it failed (each config's entry keeps its own
    check text), not once per config."""
    out = _one_line_per_wrong_variant(list(run.warnings))
    for name, d in run.dropped.items():
        out.append(
            f"variant {name!r} was not measured: {d.verdict} at {d.stage}"
            + (f" (line {d.line})" if d.line else "")
            + f": {d.message[:200]}"
        )
    for s in run.suspects:
        out.append(
            f"variant {s.variant!r} is SUSPECT for config #{s.config_index}: "
            f"{s.reason[:240]}; no speedup is claimed for it"
        )
    compiled = build_note(run.preflight, run.request, run.seconds, stage_seconds_of(run.run_dir))
    out += [compiled] if compiled else []
    method = timing_method(run, frame)
    if method is not None:
        out = timing_notes(out, method, run, frame)
    unstable = frame[~frame["StableMeasurement"].astype(bool)] if len(frame) else frame
    if len(unstable):
        worst = unstable["RelativeStdDevPct"].max()
        remedy = (
            "raise runs, lock clocks (clock_control='base'), or check for other work on the GPU."
            if method is None
            else "check for other work on the machine, or use method='ncu' with "
            "clock_control='base'."
        )
        out.append(
            f"{len(unstable)} of {len(frame)} measurements unstable (RSD >= {STABLE_RSD_PCT:g}%, "
            f"worst {sig(worst, 3)}%): {remedy}"
        )
    combined = sorted(
        {str(k) for k in frame.get("Kernel", pd.Series(dtype=str)) if " + " in str(k)}
    )
    if combined:
        out.append(
            f"Several kernels were combined per run (combine_kernels='sum'): {combined[0]}"
            + (f" and {len(combined) - 1} more" if len(combined) > 1 else "")
            + ". Use ignore_kernels to drop helpers."
        )
    if method == CPU_TIMER:
        return list(dict.fromkeys(out))  # no GPU clocks to lock
    if method is not None:
        out.append(
            "Clocks not locked (the timing path never locks them; method='ncu' with "
            "clock_control='base' does): compare variants within one run."
        )
    elif len(frame) and run.request.clock_control == "none":
        out.append(
            "Clocks not locked (clock_control='none'): boost clocks can vary between runs; "
            "compare variants within one run."
        )
    return list(dict.fromkeys(out))


# The timing path (method='timing', engine/worker/timing.py): how it decides how many runs to
# take. Mirrors TimingOptions and pipeline.time_request (that module imports torch; a test
# checks these against it).
TIMING_MIN_RUNS_FLOOR = 5
TIMING_MAX_RUNS = 200
TIMING_MAX_SECONDS = 20.0
TIMING_CI_TARGET_PCT = 1.5
CPU_TIMER = "perf_counter"
CPU_TIMING_NOTE = (
    "measured by perf_counter on the CPU, around each call (no GPU, no ncu, no counters, no L2 "
    "cache to flush): gpu__time_duration.sum holds these wall-clock times in ns, not GPU "
    "kernel durations"
)


def metric_labels(run: RunLike) -> dict[str, str]:
    """Names for people: a CPU timing's time metric is wall-clock time, not a GPU duration."""
    from nsight_agent.request import TIME_METRIC

    if timing_method(run, run.processed) == CPU_TIMER:
        return {TIME_METRIC: "CPU time (perf_counter)"}
    return {}


def timing_method(run: RunLike, frame: pd.DataFrame) -> str | None:
    """The timing path's timer (cupti, cuda_events, perf_counter), None for an ncu run."""
    method = run.facts.method
    if method is None and "Method" in frame.columns and len(frame):
        method = frame["Method"].dropna().iloc[0] if frame["Method"].notna().any() else None
    return str(method) if method and str(method) != "ncu" else None


def timing_notes(warnings: list[str], method: str, run: RunLike, frame: pd.DataFrame) -> list[str]:
    """The timing path's warnings, honest about what was measured: on the CPU one line says
    so (and the L2 note, which applies to GPUs only, goes); when n differs from ``runs``, why."""
    out = list(warnings)
    if method == CPU_TIMER:
        drop = {
            "the L2 cache was not flushed between runs",
            f"measured by {CPU_TIMER} (no ncu, no counters)",
        }
        out = [CPU_TIMING_NOTE, *(w for w in out if w not in drop)]
    asked = run.request.runs
    counts = sorted({int(n) for n in frame.get("NumRuns", pd.Series(dtype=float)).dropna()})
    if isinstance(asked, int) and counts and counts != [asked]:
        least = max(asked, TIMING_MIN_RUNS_FLOOR)
        span = str(counts[0]) if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
        out.append(
            f"n is {span} timed runs, not "
            f"runs={asked}: the timing path takes at least {least} (max(runs, "
            f"{TIMING_MIN_RUNS_FLOOR})) and goes on until the median's 95% CI is within "
            f"{TIMING_CI_TARGET_PCT:g}% of it, at most {TIMING_MAX_RUNS} runs or "
            f"{TIMING_MAX_SECONDS:g} s per config"
        )
    return out


_WRONG = re.compile(r"^variant '(?P<name>[^']+)' is WRONG for config #(?P<index>\d+)")


def _one_line_per_wrong_variant(warnings: list[str]) -> list[str]:
    wrong: dict[str, list[str]] = {}
    out: list[str] = []
    for w in warnings:
        m = _WRONG.match(w)
        if m is None:
            out.append(w)
            continue
        if m["name"] not in wrong:
            out.append(m["name"])  # a placeholder, filled below in first-seen order
            wrong[m["name"]] = []
        wrong[m["name"]].append(m["index"])
    return [
        (
            f"variant {w!r} is WRONG at config #{', #'.join(wrong[w])} (the configs' check "
            "text says how); no speedup is claimed for it"
        )
        if w in wrong
        else w
        for w in out
    ]


def artifact_names(run: RunLike) -> list[str] | None:
    return sorted(k for k, p in run.artifacts.items() if Path(p).exists()) or None


def _gpu(frame: pd.DataFrame) -> str | None:
    if "GPU" not in frame.columns:
        return None
    names = [str(g) for g in frame["GPU"].dropna().unique() if str(g)]
    return names[0] if names else None


def profile_summary(
    run: RunLike,
    *,
    metrics: Sequence[str] | None = None,
    offset: int = 0,
    limit: int = 20,
) -> ProfileSummary:
    """Per (variant, config): each metric's avg, std, min, max, n, RSD and stability."""
    frame = denormalized(run.processed)
    if metrics:
        unknown = [m for m in metrics if m not in set(frame["Metric"])]
        if unknown:
            raise InvalidRequestError(
                f"Metric {unknown[0]!r} is not in run {run.run_id}.",
                f"Metrics in this run: {', '.join(dict.fromkeys(frame['Metric']))}.",
            )
        frame = frame[frame["Metric"].isin(list(metrics))]
    params = param_names(frame)
    configs = config_list(run)
    variants = variant_names(frame)
    checks = checks_by(run)
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
                config=configs[idx] if idx >= 0 else dict(zip(params, _config_key(row, params))),
                variant=variant if len(variants) > 1 else None,
                stats={},
                kernel=kernel if kernel and kernel not in kernels_listed else None,
                correct=None if check is None else bool(check.ok),
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
        warnings=run_warnings(run, frame) or None,
        artifacts=artifact_names(run),
        seconds=sig(run.seconds, 3),
        collection=_collection(run),
    )


def _collection(run: RunLike) -> str | None:
    """The collect stage's path, as the run recorded it (kept short: answers are paid for)."""
    return (run.facts.collection or "")[:160] or None


class RowsPage(BaseModel):
    """Rows of a run's processed or raw frame (nsight-python columns), paged."""

    run_id: str
    table: Literal["processed", "raw"]
    columns: list[str]
    rows: list[list[Any]]
    page: Page


def rows_page(
    run: RunLike,
    table: Literal["processed", "raw"] = "processed",
    *,
    metric: str | None = None,
    offset: int = 0,
    limit: int = 50,
) -> RowsPage:
    frame = run.processed if table == "processed" else run.raw
    if metric is not None:
        frame = frame[frame["Metric"] == metric]
    pg = page(
        len(frame),
        offset,
        limit,
        f"get_run_rows(run_id={run.run_id!r}, table={table!r}, offset={{offset}}, limit={{limit}})",
    )
    part = frame.iloc[offset : offset + limit]
    rows = [
        [sig(v, 6) if isinstance(v, float) else scalar(v) for v in rec]
        for rec in part.itertuples(index=False, name=None)
    ]
    return RowsPage(run_id=run.run_id, table=table, columns=list(frame.columns), rows=rows, page=pg)
