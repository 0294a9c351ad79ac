"""Run-to-run comparison: is a run comparable with another (a baseline;
``judge/comparability.py``), and if so, the same noise-aware verdicts as a comparison within
one run (``judge/verdicts.py``), on intervals widened by between-run drift.

docs/BASELINES.md states the rules. Each run's 95% interval is widened by the measured drift
(``judge/gate.py``: the GPU's or the CPU's) before the interval rule decides; the gate then
calls a slower (or failing) config a regression.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from nsight_agent.judge import gate, gate_reason
from nsight_agent.judge.comparability import RunIdentity, comparability, identity, pick_variant
from nsight_agent.judge.comparison import min_effect_of
from nsight_agent.judge.emulated import emulator, label
from nsight_agent.judge.run import (
    RunLike,
    checks_by,
    config_index,
    config_key,
    config_list,
    denormalized,
    first_text,
    param_names,
)
from nsight_agent.judge.verdicts import (
    VariantOverall,
    Verdict,
    config_verdict,
    effect_floor,
    variant_overall,
)
from nsight_agent.numbers import sig
from nsight_agent.request import TIME_METRIC

Z95 = 1.96

DRIFT_RULE = (
    "each run's 95% interval (median ± its order-statistic CI, else mean ± 1.96·std/√n) is "
    "widened to √(h² + (1.96·drift·center)²) for between-run drift "
    f"({gate.DRIFT_RSD_PCT:g}% on a GPU, {gate.CPU_DRIFT_RSD_PCT:g}% on a CPU); then compare_variants' "
    "rule: faster or slower when the widened intervals do not overlap and the times differ by "
    "at least the candidate run's min_effect_pct (and 100 ns for GPU times), else "
    "within_noise. Not compared: CPU runs whose speed probes differ by more than "
    f"{gate.MACHINE_SPEED_LIMIT:g}x; not a regression: a slower candidate whose spread is over "
    f"{gate.NOISE_RATIO_LIMIT:g}x the baseline's, or on a CPU whose fastest call is inside the "
    "baseline's interval"
)


class DiffConfig(BaseModel):
    config_index: int
    config: dict[str, Any]
    baseline_time: float | None = None
    time: float | None = None
    speedup: float | None = Field(default=None, description="baseline time / this time")
    verdict: Verdict
    check: str | None = None
    reason: str | None = Field(
        default=None, description="Which part of the rule decided, with its numbers"
    )


class RunDiff(BaseModel):
    """A run against a baseline (or another run): comparable or why not, then verdicts."""

    comparable: bool
    reasons: list[str] | None = Field(default=None, description="Why the runs are not comparable")
    todo: str | None = Field(default=None, description="What to do instead")
    unverified: list[str] | None = Field(
        default=None, description="Rules that could not be checked"
    )
    notes: list[str] | None = None
    baseline: RunIdentity
    candidate: RunIdentity
    metric: str
    unit: str | None = None
    statistic: str | None = Field(default=None, description="median or mean")
    drift_pct: float = gate.DRIFT_RSD_PCT
    rule: str = DRIFT_RULE
    overall: VariantOverall | None = None
    configs: list[DiffConfig] = []
    threshold_pct: float | None = None
    regression: bool | None = Field(default=None, description="For the gate: a slower config")


def variant_rows(run: RunLike, variant: str, metric: str) -> dict[str, dict[str, Any]]:
    """The variant's rows of ``metric`` by config key."""
    frame = denormalized(run.processed)
    frame = frame[(frame["Metric"] == metric) & (frame["Annotation"].astype(str) == variant)]
    params, configs = param_names(run.processed), config_list(run)
    out: dict[str, dict[str, Any]] = {}
    for row in frame.to_dict("records"):
        i = config_index(configs, row, params)
        if 0 <= i < len(configs):
            out[config_key(configs[i])] = row
    return out


def has_median(row: dict[str, Any]) -> bool:
    return all(sig(row.get(c)) is not None for c in ("MedianValue", "MedianCI95_Lower"))


def widened(row: dict[str, Any], statistic: str, drift_pct: float) -> dict[str, Any]:
    """The row as the interval rule reads it: center and a 95% interval that also holds
    the between-run drift, √(h² + (1.96·drift·center)²) on each side."""
    if statistic == "median":
        center, lo, hi = (
            row.get(c) for c in ("MedianValue", "MedianCI95_Lower", "MedianCI95_Upper")
        )
    else:
        center, lo, hi = (row.get(c) for c in ("AvgValue", "CI95_Lower", "CI95_Upper"))
    c = sig(center, 12)
    if c is None:
        return {"AvgValue": None}
    drift = Z95 * drift_pct / 100.0 * c
    below = c - sig(lo, 12) if sig(lo, 12) is not None else 0.0  # type: ignore[operator]
    above = sig(hi, 12) - c if sig(hi, 12) is not None else 0.0  # type: ignore[operator]
    return {
        "AvgValue": c,
        "CI95_Lower": c - math.hypot(below, drift),
        "CI95_Upper": c + math.hypot(above, drift),
    }


def diff_runs(
    base_run: RunLike,
    cand_run: RunLike,
    *,
    base_variant: str | None = None,
    cand_variant: str | None = None,
    name: str | None = None,
    metric: str = TIME_METRIC,
    threshold_pct: float | None = None,
    drift_pct: float | None = None,
) -> RunDiff:
    """``cand_run`` against ``base_run``: refused with reasons, or per config verdicts;
    ``drift_pct`` by default the measured drift of the runs' kind (judge/gate.py)."""
    bv = pick_variant(base_run, base_variant)
    cv = pick_variant(cand_run, cand_variant, prefer=bv)
    base, cand = identity(base_run, bv, name), identity(cand_run, cv)
    reasons, unverified = comparability(base, cand, base_run, cand_run, metric)
    notes = [
        "same source (hash " + base.source_hash + ")"
        if base.source_hash == cand.source_hash
        else f"source changed: {base.source_hash} -> {cand.source_hash}"
    ]
    emulators = map(emulator, variant_rows(cand_run, cv, metric).values())
    notes += list(dict.fromkeys(label(e) for e in emulators if e))
    out = RunDiff(
        comparable=not reasons,
        baseline=base,
        candidate=cand,
        metric=metric,
        drift_pct=gate.drift_for(base.gpu, cand.gpu) if drift_pct is None else drift_pct,
        unverified=unverified or None,
        notes=notes,
        threshold_pct=threshold_pct,
    )
    if not reasons:
        waited = _verdicts(out, base_run, cand_run, metric)
        if out.regression and all(
            c.verdict in ("slower", "within_noise", "faster") for c in out.configs
        ):
            rows = [
                variant_rows(r, v, metric).values() for r, v in ((base_run, bv), (cand_run, cv))
            ]
            # refused only when every regressing config is the machine's: one whose fastest
            # call is slower too is a regression whatever the others show
            regressing = [
                c for c in out.configs if gate.regressed(c.verdict, c.speedup, threshold_pct)
            ]
            reasons += waited if len(waited) == len(regressing) else []
            reasons += [why] if (why := gate.noisier(list(rows[0]), list(rows[1]))) else []
    if reasons:
        out.comparable, out.reasons, out.configs, out.overall, out.regression = (
            False,
            reasons,
            [],
            None,
            None,
        )
        out.todo = (
            "Re-measure both in one run: compare_variants with the baseline's stored source "
            f"(nsight-agent://runs/{base.run_id}/source) and this one as two variants; the CLI "
            "does it with `nsight-agent check SOURCE --baseline NAME --remeasure`."
        )
    return out


def _verdicts(out: RunDiff, base_run: RunLike, cand_run: RunLike, metric: str) -> list[str]:
    """Each config's verdict and the reason for it; returns why the slower configs of CPU runs
    are the machine's (``gate.machine_waited``)."""
    b_rows = variant_rows(base_run, out.baseline.variant, metric)
    c_rows = variant_rows(cand_run, out.candidate.variant, metric)
    both = list(b_rows.values()) + list(c_rows.values())
    statistic = "median" if both and all(has_median(r) for r in both) else "mean"
    checks = checks_by(cand_run)
    suspects = {(s.variant, s.config_index) for s in cand_run.suspects}
    dropped = cand_run.dropped.get(out.candidate.variant)
    c_configs = config_list(cand_run)
    effect, floor = min_effect_of(cand_run), effect_floor(metric)
    verdicts: list[Verdict] = []
    speedups: list[float] = []
    waited: list[str] = []
    out.statistic, out.unit = statistic, first_text(base_run.processed, "Unit")
    cpu = gate.on_cpu(out.baseline.gpu, out.candidate.gpu)
    for idx, config in enumerate(config_list(base_run)):
        key = config_key(config)
        ci = next((i for i, c in enumerate(c_configs) if config_key(c) == key), -1)
        b = widened(b_rows.get(key, {}), statistic, out.drift_pct)
        c = widened(c_rows[key], statistic, out.drift_pct) if key in c_rows else None
        entry = DiffConfig(
            config_index=idx,
            config=config,
            baseline_time=sig(b.get("AvgValue")),
            time=sig(c.get("AvgValue")) if c else None,
            verdict=config_verdict(c, b, effect, floor) if c else "no_data",
        )
        check = checks.get((out.candidate.variant, ci))
        if dropped:
            entry.verdict, entry.check = "error", dropped.message[:200]
        elif check is not None and not check.ok:
            entry.verdict, entry.check = "incorrect", str(check.message)[:200]
        elif (out.candidate.variant, ci) in suspects:
            entry.verdict = "suspect"
        elif entry.time and entry.baseline_time:
            entry.speedup = sig(entry.baseline_time / entry.time)
            speedups.append(entry.baseline_time / entry.time)
        entry.reason = gate_reason.explain(
            entry.verdict,
            b,
            c,
            unit=out.unit,
            drift_pct=out.drift_pct,
            min_effect_pct=effect,
            floor=floor,
            threshold_pct=out.threshold_pct,
            check=entry.check,
        )
        regressed = gate.regressed(entry.verdict, entry.speedup, out.threshold_pct)
        if cpu and regressed and entry.verdict == "slower" and key in c_rows:
            why = gate.machine_waited(b, c_rows[key], f"config #{idx}", out.unit)
            waited += [why] if why else []
        verdicts.append(entry.verdict)
        out.configs.append(entry)
    out.overall = variant_overall(False, verdicts, speedups)
    out.regression = any(
        gate.regressed(c.verdict, c.speedup, out.threshold_pct) for c in out.configs
    )
    return waited
