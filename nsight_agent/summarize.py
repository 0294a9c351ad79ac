"""Summarize: reports and runs -> compact, JSON-ready models a model can act on.

Pure functions (no server, no ncu): the MCP tools and the CLI shape their answers here, and
the renderers at the bottom turn the same models into short text. Compact by design:
numbers carry 4 significant digits, fields without a value are dropped when dumped
(``dump``), and long lists are paged with ``offset``/``limit`` and a ``truncated`` note
that names the follow-up call.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import pandas as pd
from pydantic import BaseModel, Field

from nsight_agent import extraction
from nsight_agent.aggregation import STABLE_RSD_PCT
from nsight_agent.annotation import CALL_DOMAIN, NVTX_DOMAIN
from nsight_agent.diagnose import findings as fd
from nsight_agent.diagnose import metrics as dm
from nsight_agent.diagnose import roofline as rl
from nsight_agent.diagnose import throughput as tp
from nsight_agent.errors import InvalidRequestError

TIME_METRIC = "gpu__time_duration.sum"
ARTIFACT_URI = "nsight-agent://runs/{run_id}/{artifact}"

# Shown for every kernel of a report when present: what a first look needs.
KEY_METRICS: tuple[str, ...] = (
    dm.DURATION,
    dm.SM_THROUGHPUT,
    dm.MEM_THROUGHPUT,
    dm.DRAM_THROUGHPUT,
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "launch__grid_size",
    "launch__block_size",
    dm.WAVES,
    "lts__t_sector_hit_rate.pct",
    "l1tex__t_sector_hit_rate.pct",
)


def sig(value: Any, digits: int = 4) -> float | None:
    """A finite number rounded to ``digits`` significant digits; None for NaN/inf/non-numbers."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number):
        return None
    return float(f"{number:.{digits}g}")


def dump(model: BaseModel) -> dict[str, Any]:
    """The model as JSON-ready data without empty fields: the structured content we send."""
    return model.model_dump(mode="json", exclude_none=True)


def json_size(model: BaseModel) -> int:
    """Bytes of the compact JSON of ``dump(model)``: what an answer costs a model."""
    return len(json.dumps(dump(model), separators=(",", ":")).encode())


def _scalar(value: Any) -> Any:
    """A config value as plain JSON (numpy scalars -> Python, dtypes -> their name)."""
    item = getattr(value, "item", None)
    if callable(item):
        with contextlib.suppress(TypeError, ValueError):
            value = item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


class Page(BaseModel):
    """Where this answer sits in a longer list, and how to get the rest."""

    total: int = Field(description="Items in the full list")
    offset: int
    limit: int
    truncated: str | None = Field(
        default=None, description="Set when items were left out: the call that returns them"
    )


def page(total: int, offset: int, limit: int, follow_up: str) -> Page:
    """Paging info; ``follow_up`` is a format string with ``{offset}`` and ``{limit}``."""
    if offset < 0 or limit < 1:
        raise InvalidRequestError(
            f"offset must be >= 0 and limit >= 1 (got offset={offset}, limit={limit}).",
            "Start at offset=0 with a positive limit.",
        )
    shown_end = min(total, offset + limit)
    note = None
    if shown_end < total or offset > 0:
        rest = []
        if shown_end < total:
            rest.append(follow_up.format(offset=shown_end, limit=limit))
        if offset > 0:
            rest.append(follow_up.format(offset=max(0, offset - limit), limit=limit))
        note = (
            f"Showing items {offset}..{max(offset, shown_end - 1)} of {total}; "
            f"more with {' or '.join(rest)}."
        )
    return Page(total=total, offset=offset, limit=limit, truncated=note)


# ---------------------------------------------------------------------------------------------
# Any report: per kernel (action) name, NVTX ranges, duration, SOL, key metrics, roofline, findings


class MetricValue(BaseModel):
    value: float | str | None = None
    unit: str | None = None


class FindingBrief(BaseModel):
    """One ncu guided-analysis result, shortened."""

    rule: str
    title: str
    type: str
    speedup_pct: float | None = Field(
        default=None, description="ncu's estimated gain if fixed, in %"
    )
    speedup_type: str | None = Field(
        default=None, description="global: whole-kernel time; local: the one unit in isolation"
    )
    message: str


class RooflineBrief(BaseModel):
    """Where a kernel sits on this GPU's roofline (from ncu's peak metrics in the report)."""

    bound: str = Field(description="memory-bound, compute-bound, latency-bound or unknown")
    bound_reason: str
    compute_pct: float | None = Field(default=None, description="SM throughput, % of peak")
    memory_pct: float | None = Field(default=None, description="Memory throughput, % of peak")
    flops_by_precision: dict[str, float] | None = Field(
        default=None,
        description="Achieved FLOP/s per precision with work (tensor_* = tensor cores)",
    )
    peak_flops_by_precision: dict[str, float] | None = Field(
        default=None, description="This GPU's peak FLOP/s for those precisions (ncu peak metrics)"
    )
    achieved_flop_per_s: float | None = None
    dominant_precision: str | None = None
    peak_flop_per_s: float | None = Field(
        default=None, description="Peak of the dominant precision"
    )
    dram_bytes: float | None = None
    dram_bytes_per_s: float | None = None
    peak_dram_bytes_per_s: float | None = None
    dram_pct_of_peak: float | None = None
    arithmetic_intensity: float | None = Field(default=None, description="FLOP per DRAM byte")
    ridge_point: float | None = None
    pct_of_roofline: float | None = Field(
        default=None, description="Achieved FLOP/s as % of the attainable rate at this intensity"
    )
    roofline_side: str | None = None
    tensor_pipe_pct: float | None = None
    sections_to_collect: list[str] | None = Field(
        default=None, description="ncu sections that would fill the missing values"
    )
    notes: list[str] | None = None


class ActionSummary(BaseModel):
    """One profiled kernel (ncu action) of a report."""

    index: int
    kernel: str
    nvtx: dict[str, list[str]] | None = Field(
        default=None, description="NVTX domain -> ranges open at launch (any domain)"
    )
    duration_ns: float | None = None
    sol_compute_pct: float | None = None
    sol_memory_pct: float | None = None
    metrics: dict[str, MetricValue] | None = Field(
        default=None, description="Key metrics present in the report (value, unit)"
    )
    metrics_in_report: int = Field(description="How many metrics ncu stored for this kernel")
    roofline: RooflineBrief | None = None
    findings: list[FindingBrief] | None = None
    findings_total: int = 0


class ReportSummary(BaseModel):
    """Compact digest of an existing .ncu-rep (any tool, any NVTX domains, no GPU needed)."""

    report: str
    gpu: str | None = None
    kernels_total: int
    bound_rule: str = Field(description="How each kernel's bound is classified")
    page: Page
    actions: list[ActionSummary]


def _value(action: Any, name: str) -> MetricValue | None:
    if name not in set(action.metric_names()):
        return None
    metric = action[name]
    raw = metric.value()
    unit = str(metric.unit() or "") or None
    if isinstance(raw, str):
        return MetricValue(value=raw[:200], unit=unit)
    return MetricValue(value=sig(raw), unit=unit)


def thresholds_text(t: rl.BoundThresholds) -> str:
    return (
        f"latency-bound if compute and memory throughput are both < "
        f"{t.latency_bound_below_pct:g}% of peak; otherwise the larger names the bound "
        f"(balanced within {t.balanced_within_pct:g} points, saturated > "
        f"{t.saturated_above_pct:g}%)"
    )


def roofline_brief(r: rl.Roofline) -> RooflineBrief | None:
    """The compact form of ``rl.roofline``; None when the report has nothing to place."""
    if r.bound == "unknown" and r.achieved_flop_per_s is None and r.dram_bytes_per_s is None:
        return None
    achieved: dict[str, float] = {
        p.precision: v
        for p in r.precisions
        if (v := sig(p.achieved_flop_per_s)) is not None and v > 0
    }
    peaks: dict[str, float] = {
        p.precision: v
        for p in r.precisions
        if p.precision in achieved and (v := sig(p.peak_flop_per_s)) is not None
    }
    return RooflineBrief(
        bound=r.bound,
        bound_reason=r.bound_reason,
        compute_pct=sig(r.compute_throughput_pct),
        memory_pct=sig(r.memory_throughput_pct),
        flops_by_precision=achieved or None,
        peak_flops_by_precision=peaks or None,
        achieved_flop_per_s=sig(r.achieved_flop_per_s),
        dominant_precision=r.dominant_precision,
        peak_flop_per_s=sig(r.peak_flop_per_s),
        dram_bytes=sig(r.dram_bytes),
        dram_bytes_per_s=sig(r.dram_bytes_per_s),
        peak_dram_bytes_per_s=sig(r.peak_dram_bytes_per_s),
        dram_pct_of_peak=sig(r.dram_pct_of_peak),
        arithmetic_intensity=sig(r.arithmetic_intensity),
        ridge_point=sig(r.ridge_point),
        pct_of_roofline=sig(r.pct_of_roofline),
        roofline_side=r.roofline_side,
        tensor_pipe_pct=sig(r.tensor_pipe_pct),
        sections_to_collect=r.sections_to_collect or None,
        notes=r.notes or None,
    )


def finding_briefs(found: Sequence[fd.Finding], limit: int) -> list[FindingBrief]:
    out = []
    for f in found[: max(0, limit)]:
        message = f.message if len(f.message) <= 400 else f.message[:397] + "..."
        out.append(
            FindingBrief(
                rule=f.rule_id,
                title=f.title,
                type=f.type,
                speedup_pct=sig(f.estimated_speedup_pct, 3),
                speedup_type=f.speedup_type,
                message=message,
            )
        )
    return out


def summarize_action(
    index: int, action: Any, *, findings: int = 3, metrics: Sequence[str] = ()
) -> ActionSummary:
    # Duration and the two SOL throughputs have their own fields.
    shown_apart = {dm.DURATION, dm.SM_THROUGHPUT, dm.MEM_THROUGHPUT}
    names = [m for m in KEY_METRICS if m not in shown_apart]
    names += [m for m in metrics if m not in names]
    values = {n: v for n in names if (v := _value(action, n)) is not None}
    missing = [m for m in metrics if m not in values]
    for m in missing:
        values[m] = MetricValue(value=None, unit="not in report")
    sol = tp.speed_of_light(action)
    found = fd.findings(action)
    return ActionSummary(
        index=index,
        kernel=str(action.name()),
        nvtx=extraction.nvtx_ranges(action) or None,
        duration_ns=sig(sol.duration_ns),
        sol_compute_pct=sig(sol.compute_throughput_pct),
        sol_memory_pct=sig(sol.memory_throughput_pct),
        metrics=values or None,
        metrics_in_report=len(list(action.metric_names())),
        roofline=roofline_brief(rl.roofline(action)),
        findings=finding_briefs(found, findings) or None,
        findings_total=len(found),
    )


def summarize_report(
    path: str | Path,
    *,
    offset: int = 0,
    limit: int = 10,
    findings: int = 3,
    metrics: Sequence[str] = (),
) -> ReportSummary:
    """Digest of any ``.ncu-rep``: one entry per profiled kernel, paged."""
    report = extraction.load(path)
    actions = extraction.iter_actions(report)
    pg = page(
        len(actions),
        offset,
        limit,
        f"summarize_report(path={str(path)!r}, offset={{offset}}, limit={{limit}})",
    )
    shown = [
        summarize_action(i, a, findings=findings, metrics=metrics)
        for i, a in enumerate(actions)
        if offset <= i < offset + limit
    ]
    gpu = None
    if actions:
        name = _value(actions[0], "device__attribute_display_name")
        gpu = str(name.value) if name is not None and name.value is not None else None
    return ReportSummary(
        report=str(path),
        gpu=gpu,
        kernels_total=len(actions),
        bound_rule=thresholds_text(rl.BoundThresholds()),
        page=pg,
        actions=shown,
    )


# ---------------------------------------------------------------------------------------------
# Runs of the pipeline


class RunLike(Protocol):
    """What the summaries read of ``pipeline.RunResult`` (duck-typed to keep this module pure)."""

    run_id: str
    run_dir: Path
    request: Any
    processed: pd.DataFrame
    raw: pd.DataFrame
    checks: list[Any]
    kernels: dict[str, list[str]]
    warnings: list[str]
    artifacts: dict[str, Path]
    seconds: float


def param_names(processed: pd.DataFrame) -> list[str]:
    """Config columns of a processed frame: the ones between ``Metric`` and ``AvgValue``."""
    cols = list(processed.columns)
    if "Metric" not in cols or "AvgValue" not in cols:
        return []
    return cols[cols.index("Metric") + 1 : cols.index("AvgValue")]


def _config_key(row: Mapping[str, Any], params: Sequence[str]) -> tuple[Any, ...]:
    return tuple(_scalar(row[p]) for p in params)


def config_list(run: RunLike) -> list[dict[str, Any]]:
    """The run's configs in request order (request.expanded_configs()), else in frame order."""
    expand = getattr(run.request, "expanded_configs", None)
    if callable(expand):
        try:
            configs = expand()
            return [{k: _scalar(v) for k, v in dict(c).items()} for c in configs]
        except Exception:  # a request we cannot expand: fall back to the frame
            pass
    params = param_names(run.processed)
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in run.processed.to_dict("records"):
        key = _config_key(row, params)
        seen.setdefault(key, dict(zip(params, key)))
    return list(seen.values())


def _config_index(
    configs: list[dict[str, Any]], row: Mapping[str, Any], params: Sequence[str]
) -> int:
    key = _config_key(row, params)
    for i, c in enumerate(configs):
        if tuple(_scalar(c.get(p)) for p in params) == key:
            return i
    # Values the frame stringified (dtypes): compare as text.
    text = tuple(str(k) for k in key)
    for i, c in enumerate(configs):
        if tuple(str(_scalar(c.get(p))) for p in params) == text:
            return i
    return -1


def _denormalized(frame: pd.DataFrame) -> pd.DataFrame:
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


def _variants(frame: pd.DataFrame) -> list[str]:
    return [str(a) for a in dict.fromkeys(frame["Annotation"])] if len(frame) else []


def _checks_by(run: RunLike) -> dict[tuple[str, int], Any]:
    return {(str(c.variant), int(c.config_index)): c for c in run.checks}


def run_warnings(run: RunLike, frame: pd.DataFrame) -> list[str]:
    """The pipeline's warnings plus what the numbers show: instability, combined kernels, clocks."""
    out = list(run.warnings)
    unstable = frame[~frame["StableMeasurement"].astype(bool)] if len(frame) else frame
    if len(unstable):
        worst = unstable["RelativeStdDevPct"].max()
        out.append(
            f"{len(unstable)} of {len(frame)} measurements unstable (RSD >= {STABLE_RSD_PCT:g}%, "
            f"worst {sig(worst, 3)}%): raise runs, lock clocks (clock_control='base'), or "
            "check for other work on the GPU."
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
    if getattr(run.request, "clock_control", "none") == "none":
        out.append(
            "Clocks not locked (clock_control='none'): boost clocks can vary between runs; "
            "compare variants within one run."
        )
    return list(dict.fromkeys(out))


def _artifact_names(run: RunLike) -> list[str] | None:
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
    frame = _denormalized(run.processed)
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
    variants = _variants(frame)
    checks = _checks_by(run)
    groups: dict[tuple[str, int], ConfigResult] = {}
    kernels_listed = {k for ks in run.kernels.values() for k in ks}
    for row in frame.to_dict("records"):
        variant = str(row["Annotation"])
        idx = _config_index(configs, row, params)
        key = (variant, idx)
        entry = groups.get(key)
        if entry is None:
            check = checks.get(key)
            kernel = str(row.get("Kernel") or "") or None
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
        artifacts=_artifact_names(run),
        seconds=sig(run.seconds, 3),
    )


# ---------------------------------------------------------------------------------------------
# Comparison of variants

Verdict = Literal["baseline", "faster", "slower", "within_noise", "incorrect", "no_data"]

VERDICT_RULE = (
    "speedup = baseline mean time / variant mean time. 'faster' (or 'slower') when the 95% "
    "confidence intervals of the two mean times (mean ± 1.96·std/√n) do not overlap; "
    "'within_noise' when they overlap or a side has fewer than 2 runs; 'incorrect' when the "
    "variant's output check failed, whatever its time; 'no_data' when it was not measured."
)


class VariantTiming(BaseModel):
    time: float | None = Field(default=None, description="Mean of the time metric")
    rsd_pct: float | None = None
    speedup: float | None = Field(default=None, description="baseline time / this time")
    verdict: Verdict
    check: str | None = Field(
        default=None, description="Why the output check failed (max errors), when it did"
    )


class CompareConfig(BaseModel):
    config_index: int
    config: dict[str, Any]
    variants: dict[str, VariantTiming]


class VariantOverall(BaseModel):
    geomean_speedup: float | None = Field(default=None, description="Over the configs measured")
    verdict: Literal[
        "faster", "slower", "within_noise", "mixed", "incorrect", "baseline", "no_data"
    ]
    configs_faster: int = 0
    configs_slower: int = 0


class CompareSummary(BaseModel):
    """compare_variants' answer: per config each variant's time and a noise-aware verdict."""

    run_id: str
    metric: str
    unit: str | None = None
    baseline: str
    rule: str = Field(description="How verdicts are decided")
    overall: dict[str, VariantOverall]
    page: Page
    configs: list[CompareConfig]
    warnings: list[str] | None = None
    artifacts: list[str] | None = None
    seconds: float | None = None


def _verdict(v: Mapping[str, Any], b: Mapping[str, Any]) -> Verdict:
    if sig(v.get("AvgValue")) is None or sig(b.get("AvgValue")) is None:
        return "no_data"
    lo_v, hi_v = sig(v.get("CI95_Lower"), 12), sig(v.get("CI95_Upper"), 12)
    lo_b, hi_b = sig(b.get("CI95_Lower"), 12), sig(b.get("CI95_Upper"), 12)
    if None in (lo_v, hi_v, lo_b, hi_b):
        return "within_noise"
    assert lo_v is not None and hi_v is not None and lo_b is not None and hi_b is not None
    if hi_v < lo_b:
        return "faster"
    if lo_v > hi_b:
        return "slower"
    return "within_noise"


def _check_text(check: Any) -> str:
    parts = [str(getattr(check, "message", "") or "output differs from the baseline")]
    for name in ("max_abs_err", "max_rel_err"):
        value = sig(getattr(check, name, None), 3)
        if value is not None:
            parts.append(f"{name}={value}")
    return "; ".join(parts)[:300]


def _geomean(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return sig(math.exp(sum(math.log(v) for v in vals) / len(vals)))


def compare_summary(
    run: RunLike,
    *,
    baseline: str | None = None,
    metric: str = TIME_METRIC,
    offset: int = 0,
    limit: int = 20,
) -> CompareSummary:
    """Per config: each variant's time, speedup vs the baseline and a verdict (VERDICT_RULE)."""
    frame = _denormalized(run.processed)
    frame = frame[frame["Metric"] == metric]
    if frame.empty:
        raise InvalidRequestError(
            f"Run {run.run_id} has no {metric!r} rows to compare.",
            f"Metrics in this run: {', '.join(dict.fromkeys(run.processed['Metric']))}.",
        )
    variants = _variants(frame)
    base = baseline or getattr(run.request, "baseline", None) or variants[0]
    if base not in variants:
        raise InvalidRequestError(
            f"Baseline {base!r} is not a variant of run {run.run_id}.",
            f"Variants: {', '.join(variants)}.",
        )
    params = param_names(frame)
    configs = config_list(run)
    checks = _checks_by(run)
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for row in frame.to_dict("records"):
        rows[(str(row["Annotation"]), _config_index(configs, row, params))] = row
    indices = sorted({i for _, i in rows})
    out: list[CompareConfig] = []
    speedups: dict[str, list[float]] = {v: [] for v in variants}
    verdicts: dict[str, list[Verdict]] = {v: [] for v in variants}
    for idx in indices:
        b = rows.get((base, idx), {})
        entry: dict[str, VariantTiming] = {}
        for name in variants:
            r = rows.get((name, idx))
            check = checks.get((name, idx))
            failed = check is not None and not bool(check.ok)
            if r is None:
                timing = VariantTiming(time=None, verdict="incorrect" if failed else "no_data")
            else:
                t, tb = sig(r.get("AvgValue")), sig(b.get("AvgValue"))
                speedup = sig(tb / t) if t and tb else None
                verdict: Verdict = "baseline" if name == base else _verdict(r, b)
                if failed:
                    verdict = "incorrect"
                if failed or name == base:
                    speedup = None  # a wrong variant gets its time shown, never a speedup
                timing = VariantTiming(
                    time=t,
                    rsd_pct=sig(r.get("RelativeStdDevPct"), 3),
                    speedup=speedup,
                    verdict=verdict,
                )
                if speedup is not None:
                    speedups[name].append(speedup)
            if failed:
                timing.check = _check_text(check)
            verdicts[name].append(timing.verdict)
            entry[name] = timing
        out.append(
            CompareConfig(
                config_index=idx,
                config=configs[idx] if 0 <= idx < len(configs) else {},
                variants=entry,
            )
        )
    overall = {name: _overall(name == base, verdicts[name], speedups[name]) for name in variants}
    pg = page(
        len(out),
        offset,
        limit,
        f"compare_variants(run_id={run.run_id!r}, offset={{offset}}, limit={{limit}})",
    )
    unit = next((str(u) for u in frame["Unit"] if isinstance(u, str) and u), None)
    return CompareSummary(
        run_id=run.run_id,
        metric=metric,
        unit=unit,
        baseline=base,
        rule=VERDICT_RULE,
        overall=overall,
        page=pg,
        configs=out[offset : offset + limit],
        warnings=run_warnings(run, frame) or None,
        artifacts=_artifact_names(run),
        seconds=sig(run.seconds, 3),
    )


def _overall(is_base: bool, verdicts: list[Verdict], speedups: list[float]) -> VariantOverall:
    faster = verdicts.count("faster")
    slower = verdicts.count("slower")
    verdict: Literal[
        "faster", "slower", "within_noise", "mixed", "incorrect", "baseline", "no_data"
    ]
    if is_base:
        verdict = "baseline"
    elif "incorrect" in verdicts:
        verdict = "incorrect"  # a wrong variant is never called faster
    elif not speedups:
        verdict = "no_data"
    elif faster and slower:
        verdict = "mixed"
    elif faster and faster == len(verdicts):
        verdict = "faster"
    elif slower and slower == len(verdicts):
        verdict = "slower"
    elif faster or slower:
        verdict = "mixed"
    else:
        verdict = "within_noise"
    return VariantOverall(
        geomean_speedup=None if is_base or verdict == "incorrect" else _geomean(speedups),
        verdict=verdict,
        configs_faster=faster,
        configs_slower=slower,
    )


# ---------------------------------------------------------------------------------------------
# Roofline of a run's report, per kernel and config


class KernelRoofline(BaseModel):
    variant: str | None = None
    config_index: int | None = None
    config: dict[str, Any] | None = None
    run: int | None = Field(default=None, description="Run index within the config")
    kernel: str
    duration_ns: float | None = None
    roofline: RooflineBrief | None = None
    findings: list[FindingBrief] | None = None


class RooflineSummary(BaseModel):
    """roofline_metrics' answer: per kernel and config, FLOP/s, bytes, intensity, % of roofline."""

    run_id: str | None = None
    report: str
    gpu: str | None = None
    thresholds: str
    page: Page
    kernels: list[KernelRoofline]
    warnings: list[str] | None = None


def _call_map(run: RunLike) -> dict[int, tuple[int, int]]:
    """call index -> (config index, run index) from the run's manifest, when it has one."""
    path = run.artifacts.get("manifest")
    if path is None or not Path(path).is_file():
        return {}
    try:
        data = json.loads(Path(path).read_text())
        return {int(c["call"]): (int(c["config"]), int(c["run"])) for c in data["calls"]}
    except (KeyError, TypeError, ValueError):
        return {}


def roofline_summary(
    report: str | Path,
    *,
    run: RunLike | None = None,
    offset: int = 0,
    limit: int = 20,
    findings: int = 2,
) -> RooflineSummary:
    """Roofline of every kernel of ``report``; with ``run``, tied to its variant and config."""
    loaded = extraction.load(report)
    actions = extraction.iter_actions(loaded)
    calls = _call_map(run) if run is not None else {}
    configs = config_list(run) if run is not None else []
    ignore = set(getattr(run.request, "ignore_kernels", []) or []) if run is not None else set()
    items: list[KernelRoofline] = []
    gpu = None
    for action in actions:
        name = str(action.name())
        if name in ignore:
            continue
        ranges = extraction.nvtx_ranges(action)
        variant = ranges.get(NVTX_DOMAIN, [None])[-1]
        call = next(
            (int(n.split("=", 1)[1]) for n in ranges.get(CALL_DOMAIN, []) if n.startswith("call=")),
            None,
        )
        cfg, run_index = calls.get(call, (None, None)) if call is not None else (None, None)
        r = rl.roofline(action)
        if gpu is None:
            g = _value(action, "device__attribute_display_name")
            gpu = str(g.value) if g is not None and g.value is not None else None
        items.append(
            KernelRoofline(
                variant=variant,
                config_index=cfg,
                config=configs[cfg] if cfg is not None and 0 <= cfg < len(configs) else None,
                run=run_index,
                kernel=name,
                duration_ns=sig(r.duration_ns),
                roofline=roofline_brief(r),
                findings=finding_briefs(fd.findings(action), findings) or None,
            )
        )
    run_id = run.run_id if run is not None else None
    where = f"run_id={run_id!r}" if run_id else f"report_path={str(report)!r}"
    pg = page(
        len(items), offset, limit, f"roofline_metrics({where}, offset={{offset}}, limit={{limit}})"
    )
    warnings = []
    if any(k.roofline is None for k in items):
        warnings.append(
            "Some kernels have no roofline data: collect sections "
            + ", ".join(dm.bound_sections())
            + "."
        )
    return RooflineSummary(
        run_id=run_id,
        report=str(report),
        gpu=gpu,
        thresholds=thresholds_text(rl.BoundThresholds()),
        page=pg,
        kernels=items[offset : offset + limit],
        warnings=warnings or None,
    )


# ---------------------------------------------------------------------------------------------
# Raw rows, paged


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
        [sig(v, 6) if isinstance(v, float) else _scalar(v) for v in rec]
        for rec in part.itertuples(index=False, name=None)
    ]
    return RowsPage(run_id=run.run_id, table=table, columns=list(frame.columns), rows=rows, page=pg)


# ---------------------------------------------------------------------------------------------
# Renderers: short text for people and for clients that show only the text content


def _fmt(value: float | None, unit: str | None = None) -> str:
    if value is None:
        return "-"
    text = f"{value:.4g}"
    return f"{text} {unit}" if unit else text


def _cfg(config: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items()) or "()"


def render_report(s: ReportSummary) -> str:
    lines = [f"{s.report}: {s.kernels_total} kernel(s) on {s.gpu or 'unknown GPU'}"]
    for a in s.actions:
        ranges = "; ".join(f"{d}:{'/'.join(r)}" for d, r in (a.nvtx or {}).items())
        lines.append(
            f"[{a.index}] {a.kernel}  {_fmt(a.duration_ns, 'ns')}  SOL compute "
            f"{_fmt(a.sol_compute_pct)}% memory {_fmt(a.sol_memory_pct)}%"
            + (f"  nvtx {ranges}" if ranges else "")
        )
        if a.roofline is not None:
            rf = a.roofline
            lines.append(
                f"    {rf.bound}; {_fmt(rf.achieved_flop_per_s)} FLOP/s"
                + (f" ({rf.dominant_precision})" if rf.dominant_precision else "")
                + f", DRAM {_fmt(rf.dram_bytes_per_s)} B/s, {_fmt(rf.pct_of_roofline)}% of roofline"
            )
            lines += [f"    note: {n}" for n in (rf.notes or [])[:1]]
        for f in a.findings or []:
            gain = (
                f" (~{f.speedup_pct:g}% {f.speedup_type or ''})".rstrip() if f.speedup_pct else ""
            )
            lines.append(f"    - {f.title}{gain}")
    if s.page.truncated:
        lines.append(s.page.truncated)
    return "\n".join(lines)


def render_profile(s: ProfileSummary) -> str:
    lines = [f"run {s.run_id} on {s.gpu or 'unknown GPU'}; kernels: {s.kernels}"]
    for r in s.results:
        who = f"{r.variant} " if r.variant else ""
        for metric, st in r.stats.items():
            flag = "" if st.stable else " UNSTABLE"
            ok = "" if r.correct is None else (" ok" if r.correct else " WRONG OUTPUT")
            lines.append(
                f"{who}{_cfg(r.config)}  {metric} = {_fmt(st.avg, s.units.get(metric))} "
                f"± {_fmt(st.std)} (n={st.n}, rsd {_fmt(st.rsd_pct)}%){flag}{ok}"
            )
    lines += [f"warning: {w}" for w in s.warnings or []]
    if s.page.truncated:
        lines.append(s.page.truncated)
    return "\n".join(lines)


def render_compare(s: CompareSummary) -> str:
    lines = [f"run {s.run_id}: {s.metric} vs baseline {s.baseline!r}"]
    for c in s.configs:
        parts = []
        for name, v in c.variants.items():
            sp = f" x{v.speedup:.3g}" if v.speedup is not None else ""
            parts.append(f"{name} {_fmt(v.time, s.unit)}{sp} {v.verdict}")
        lines.append(f"{_cfg(c.config)}: " + "; ".join(parts))
    for name, o in s.overall.items():
        if o.verdict != "baseline":
            lines.append(f"{name}: geomean x{_fmt(o.geomean_speedup)} -> {o.verdict}")
    lines.append(f"rule: {s.rule}")
    lines += [f"warning: {w}" for w in s.warnings or []]
    if s.page.truncated:
        lines.append(s.page.truncated)
    return "\n".join(lines)


def render_roofline(s: RooflineSummary) -> str:
    lines = [f"{s.report} on {s.gpu or 'unknown GPU'}; rule: {s.thresholds}"]
    for k in s.kernels:
        where = f"{k.variant} " if k.variant else ""
        where += _cfg(k.config) + " " if k.config else ""
        rf = k.roofline
        if rf is None:
            lines.append(f"{where}{k.kernel}: no roofline metrics in the report")
            continue
        lines.append(
            f"{where}{k.kernel}: {rf.bound}; {_fmt(rf.achieved_flop_per_s)} FLOP/s of "
            f"{_fmt(rf.peak_flop_per_s)} ({rf.dominant_precision or '-'}), DRAM "
            f"{_fmt(rf.dram_bytes_per_s)} of {_fmt(rf.peak_dram_bytes_per_s)} B/s, AI "
            f"{_fmt(rf.arithmetic_intensity)} FLOP/B, {_fmt(rf.pct_of_roofline)}% of roofline"
        )
    lines += [f"warning: {w}" for w in s.warnings or []]
    if s.page.truncated:
        lines.append(s.page.truncated)
    return "\n".join(lines)
