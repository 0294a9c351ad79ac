"""The verdict rule: per config, is a variant faster, slower or within noise of the baseline
(95% intervals and a minimum effect), and per variant, one verdict over its configs. No
speedup is ever claimed for an incorrect, untrusted or unmeasured variant.

The same rule decides a comparison within one run (``judge/comparison.py``) and between two
runs on drift-widened intervals (``judge/run_diff.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from nsight_agent.engine.store.records import DroppedVariant
from nsight_agent.engine.store.runs import OutputCheck
from nsight_agent.numbers import sig
from nsight_agent.request import MIN_EFFECT_NS, MIN_EFFECT_PCT, TIME_METRIC
from nsight_agent.time_basis import CALL_METRIC, KERNELBENCH_METRIC
from nsight_agent.wording import whole

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
    "emulated",
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
    "emulated",
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
    median: float | None = Field(default=None, description="Median of the time metric")
    p20: float | None = Field(default=None, description="Its 20th percentile")
    p80: float | None = Field(default=None, description="Its 80th percentile")
    rsd_pct: float | None = None
    speedup: float | None = Field(default=None, description="baseline time / this time")
    verdict: Verdict
    check: str | None = Field(
        default=None,
        description="Why the output check failed (max errors), why it is suspect, or its error",
    )
    other_time: float | None = Field(default=None, description="Mean time on the other basis")
    emulated: str | None = Field(default=None, description="Ran under it: not a kernel time")


class VariantOverall(BaseModel):
    geomean_speedup: float | None = Field(default=None, description="Over the configs measured")
    verdict: Overall
    configs_faster: int = 0
    configs_slower: int = 0


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
    return MIN_EFFECT_NS if metric in (TIME_METRIC, CALL_METRIC, KERNELBENCH_METRIC) else 0.0


def check_text(check: OutputCheck) -> str:
    """Why an output check failed, with its largest errors."""
    parts = [check.message or "output differs from the baseline"]
    for name, err in (("max_abs_err", check.max_abs_err), ("max_rel_err", check.max_rel_err)):
        value = sig(err, 3)
        if value is not None:
            parts.append(f"{name}={value}")
    return whole("; ".join(parts))


def timing(
    r: Mapping[str, Any] | None,
    b: Mapping[str, Any],
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
        time=t,
        median=sig(r.get("MedianValue")),
        p20=sig(r.get("P20Value")),
        p80=sig(r.get("P80Value")),
        rsd_pct=sig(r.get("RelativeStdDevPct"), 3),
        speedup=speedup,
        verdict=verdict,
    )


def dropped(d: DroppedVariant) -> VariantTiming:
    """A variant not measured: it raised (error), launched no kernel, or had outputs of the
    wrong structure (incorrect); its message says where."""
    where = f" at {d.stage}" if d.stage else ""
    line = f" (line {d.line})" if d.line else ""
    config = f", config #{d.config_index}" if d.config_index is not None else ""
    return VariantTiming(
        time=None, verdict=d.verdict, check=whole(f"{d.verdict}{where}{line}{config}: {d.message}")
    )


def _geomean(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return sig(math.exp(sum(math.log(v) for v in vals) / len(vals)))


def variant_overall(
    is_base: bool, verdicts: list[Verdict], speedups: list[float]
) -> VariantOverall:
    """One verdict over a variant's configs: a failing one wins, else all faster (or all
    slower), mixed, within noise; its geomean speedup only when nothing failed."""
    faster = verdicts.count("faster")
    slower = verdicts.count("slower")
    failing = [v for v in FAILING if v in verdicts]
    verdict: Overall
    if is_base:
        verdict = "baseline"
    elif failing:
        verdict = failing[0]  # a wrong or untrusted variant is never called faster
    elif "emulated" in verdicts:
        verdict = "emulated"  # an emulator against a native call: no speed verdict
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
        geomean_speedup=None
        if is_base or verdict in (*FAILING, "emulated")
        else _geomean(speedups),
        verdict=verdict,
        configs_faster=faster,
        configs_slower=slower,
    )
