"""Comparison of variants against a baseline: per-config verdicts from 95% intervals, and an
overall verdict per variant. No speedup is ever claimed for an incorrect variant."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from nsight_agent.engine.store.records import DroppedVariant
from nsight_agent.engine.store.runs import OutputCheck
from nsight_agent.errors import InvalidRequestError
from nsight_agent.request import MIN_EFFECT_NS, MIN_EFFECT_PCT, TIME_METRIC
from nsight_agent.views.common import Page, clip, page, sig
from nsight_agent.views.copies import copies_by, with_copies
from nsight_agent.views.runs import (
    RunLike,
    artifact_names,
    checks_by,
    config_index,
    config_list,
    denormalized,
    param_names,
    run_warnings,
    variant_names,
)

Verdict = Literal[
    "baseline",
    "faster",
    "slower",
    "within_noise",
    "incorrect",
    "suspect",
    "error",
    "timeout",
    "no_kernel",
    "no_data",
]
Overall = Literal[
    "faster",
    "slower",
    "within_noise",
    "mixed",
    "incorrect",
    "suspect",
    "error",
    "timeout",
    "no_kernel",
    "baseline",
    "no_data",
]
# A variant with one of these at any config gets it overall (first listed wins), no speedup.
FAILING: tuple[Verdict, ...] = ("error", "timeout", "no_kernel", "incorrect", "suspect")


def verdict_rule(min_effect_pct: float = MIN_EFFECT_PCT) -> str:
    """The rule as the answer states it, with the minimum effect the run used."""
    return (
        "speedup = baseline mean time / variant mean time; faster or slower when the 95% CIs "
        "(mean ± 1.96·std/√n) do not overlap and the times differ by at least "
        f"{min_effect_pct:g}% (options.min_effect_pct) and {MIN_EFFECT_NS:g} ns, else "
        "within_noise; incorrect: the "
        "output check failed; suspect: the measurement cannot be trusted (docs/ANTI_GAMING.md: "
        "below the DRAM floor, no GPU work, a reused output, a replaced timer); error, timeout, "
        "no_kernel, no_data: not measured"
    )


VERDICT_RULE = verdict_rule()


class VariantTiming(BaseModel):
    time: float | None = Field(default=None, description="Mean of the time metric")
    rsd_pct: float | None = None
    speedup: float | None = Field(default=None, description="baseline time / this time")
    verdict: Verdict
    check: str | None = Field(
        default=None,
        description="Why the output check failed (max errors), why it is suspect, or its error",
    )


class CompareConfig(BaseModel):
    config_index: int
    config: dict[str, Any]
    variants: dict[str, VariantTiming]


class VariantOverall(BaseModel):
    geomean_speedup: float | None = Field(default=None, description="Over the configs measured")
    verdict: Overall
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


def config_verdict(
    v: Mapping[str, Any],
    b: Mapping[str, Any],
    min_effect_pct: float = MIN_EFFECT_PCT,
    min_effect_abs: float = 0.0,
) -> Verdict:
    """faster/slower: separated 95% intervals and a change of at least ``min_effect_pct`` %
    (either way: baseline/variant or variant/baseline at least 1 + min_effect_pct/100) and of
    at least ``min_effect_abs`` in the metric's unit (``effect_floor``: 100 ns for times)."""
    t_v, t_b = sig(v.get("AvgValue")), sig(b.get("AvgValue"))
    if t_v is None or t_b is None:
        return "no_data"
    lo_v, hi_v = sig(v.get("CI95_Lower"), 12), sig(v.get("CI95_Upper"), 12)
    lo_b, hi_b = sig(b.get("CI95_Lower"), 12), sig(b.get("CI95_Upper"), 12)
    if None in (lo_v, hi_v, lo_b, hi_b):
        return "within_noise"
    assert lo_v is not None and hi_v is not None and lo_b is not None and hi_b is not None
    enough = 1.0 + min_effect_pct / 100.0
    if abs(t_v - t_b) < min_effect_abs:
        return "within_noise"
    if hi_v < lo_b and t_v > 0 and t_b / t_v >= enough:
        return "faster"
    if lo_v > hi_b and t_b > 0 and t_v / t_b >= enough:
        return "slower"
    return "within_noise"


def effect_floor(metric: str) -> float:
    """The absolute part of the minimum effect: a time's jitter floor, in ns; none otherwise."""
    return MIN_EFFECT_NS if metric == TIME_METRIC else 0.0


def _check_text(check: OutputCheck) -> str:
    parts = [check.message or "output differs from the baseline"]
    for name, err in (("max_abs_err", check.max_abs_err), ("max_rel_err", check.max_rel_err)):
        value = sig(err, 3)
        if value is not None:
            parts.append(f"{name}={value}")
    return _whole("; ".join(parts))


# Far above what the harness writes (its compile errors stop near 2,000 characters): only a
# message an exception made that long is cut.
CHECK_CHARS = 4000


def _whole(text: str) -> str:
    """A check's, suspect's or error's message whole; past ``CHECK_CHARS``, cut at a sentence
    or word and marked so (the run's result.json keeps it whole)."""
    if len(text) <= CHECK_CHARS:
        return text
    return clip(text, CHECK_CHARS) + " [cut; the run's result.json holds the whole message]"


def _geomean(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return sig(math.exp(sum(math.log(v) for v in vals) / len(vals)))


def _timing(
    r: dict[str, Any] | None,
    b: dict[str, Any],
    *,
    is_base: bool,
    failed: bool,
    min_effect_pct: float,
    floor: float,
) -> VariantTiming:
    """One variant at one config: its time, and the verdict and speedup vs the baseline."""
    if r is None:
        return VariantTiming(time=None, verdict="incorrect" if failed else "no_data")
    t, tb = sig(r.get("AvgValue")), sig(b.get("AvgValue"))
    speedup = sig(tb / t) if t and tb else None
    verdict: Verdict = "baseline" if is_base else config_verdict(r, b, min_effect_pct, floor)
    if failed:
        verdict = "incorrect"
    if failed or is_base:
        speedup = None  # a wrong variant gets its time shown, never a speedup
    return VariantTiming(
        time=t, rsd_pct=sig(r.get("RelativeStdDevPct"), 3), speedup=speedup, verdict=verdict
    )


def compare_summary(
    run: RunLike,
    *,
    baseline: str | None = None,
    metric: str = TIME_METRIC,
    offset: int = 0,
    limit: int = 20,
    min_effect_pct: float | None = None,
) -> CompareSummary:
    """Per config: each variant's time, speedup vs the baseline and a verdict (VERDICT_RULE);
    ``min_effect_pct`` re-reads a run with another minimum effect than it asked for."""
    frame = denormalized(run.processed)
    frame = frame[frame["Metric"] == metric]
    if frame.empty:
        raise InvalidRequestError(
            f"Run {run.run_id} has no {metric!r} rows to compare.",
            f"Metrics in this run: {', '.join(dict.fromkeys(run.processed['Metric']))}.",
        )
    suspects = {(s.variant, s.config_index): s.reason for s in run.suspects}
    variants = variant_names(frame)
    variants += [v for v in run.dropped if v not in variants]
    base = baseline or run.request.baseline or variants[0]
    if base not in variants:
        raise InvalidRequestError(
            f"Baseline {base!r} is not a variant of run {run.run_id}.",
            f"Variants: {', '.join(variants)}.",
        )
    params = param_names(frame)
    configs = config_list(run)
    checks = checks_by(run)
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for row in frame.to_dict("records"):
        rows[(str(row["Annotation"]), config_index(configs, row, params))] = row
    rows = with_copies(rows, copies_by(run, metric))  # ncu profiles kernels only
    indices = sorted({i for _, i in rows}) or list(range(len(configs)))
    effect, floor = min_effect_of(run, min_effect_pct), effect_floor(metric)
    out: list[CompareConfig] = []
    speedups: dict[str, list[float]] = {v: [] for v in variants}
    verdicts: dict[str, list[Verdict]] = {v: [] for v in variants}
    for idx in indices:
        b = rows.get((base, idx), {})
        entry: dict[str, VariantTiming] = {}
        for name in variants:
            r = rows.get((name, idx))
            check = checks.get((name, idx))
            failed = check is not None and not check.ok
            timing = _timing(
                r, b, is_base=name == base, failed=failed, min_effect_pct=effect, floor=floor
            )
            if check is not None and failed:
                timing.check = _check_text(check)
            elif name in run.dropped:
                timing = _dropped(run.dropped[name])
            elif (name, idx) in suspects and name != base:
                timing.verdict, timing.speedup = "suspect", None
                timing.check = _whole(suspects[(name, idx)])
            if timing.speedup is not None:
                speedups[name].append(timing.speedup)
            verdicts[name].append(timing.verdict)
            entry[name] = timing
        out.append(
            CompareConfig(
                config_index=idx,
                config=configs[idx] if 0 <= idx < len(configs) else {},
                variants=entry,
            )
        )
    overall = {
        name: variant_overall(name == base, verdicts[name], speedups[name]) for name in variants
    }
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
        rule=verdict_rule(effect),
        overall=overall,
        page=pg,
        configs=out[offset : offset + limit],
        warnings=run_warnings(run, frame) or None,
        artifacts=artifact_names(run),
        seconds=sig(run.seconds, 3),
    )


def min_effect_of(run: RunLike, override: float | None = None) -> float:
    """``override`` when given, else the minimum effect the run asked for (a stored run recorded
    before the option existed reads the default when its request is loaded)."""
    return run.request.min_effect_pct if override is None else override


def _dropped(d: DroppedVariant) -> VariantTiming:
    """A variant not measured: it raised (error), launched no kernel, or had outputs of the
    wrong structure (incorrect); its message says where."""
    where = f" at {d.stage}" if d.stage else ""
    line = f" (line {d.line})" if d.line else ""
    config = f", config #{d.config_index}" if d.config_index is not None else ""
    return VariantTiming(
        time=None, verdict=d.verdict, check=_whole(f"{d.verdict}{where}{line}{config}: {d.message}")
    )


def variant_overall(
    is_base: bool, verdicts: list[Verdict], speedups: list[float]
) -> VariantOverall:
    faster = verdicts.count("faster")
    slower = verdicts.count("slower")
    failing = [v for v in FAILING if v in verdicts]
    verdict: Overall
    if is_base:
        verdict = "baseline"
    elif failing:
        verdict = failing[0]  # a wrong or untrusted variant is never called faster
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
        geomean_speedup=None if is_base or verdict in FAILING else _geomean(speedups),
        verdict=verdict,
        configs_faster=faster,
        configs_slower=slower,
    )
