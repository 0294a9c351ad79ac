"""Run-to-run comparison: is a run comparable with another (a baseline), and if so, the same
noise-aware verdicts as ``compare_variants``, on intervals widened by between-run drift.

docs/BASELINES.md states the rules. In short: a run is compared with another only when both
were measured the same way (method, GPU model, clocks and cache policy, driver, ncu version,
configs, metric, output sizes; on a CPU, the machine's speed); otherwise the answer says why,
and what to do, instead of a verdict. Each run's 95% interval is widened by the measured drift
(``views.gate``: the GPU's or the CPU's) before the interval rule of ``views.compare`` decides.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import pandas as pd
from pydantic import BaseModel, Field

from nsight_agent.engine.pipeline import RunResult
from nsight_agent.engine.store import baselines, run_status
from nsight_agent.errors import InvalidRequestError
from nsight_agent.request import TIME_METRIC
from nsight_agent.views import gate
from nsight_agent.views.common import sig
from nsight_agent.views.compare import (
    VariantOverall,
    Verdict,
    config_verdict,
    effect_floor,
    min_effect_of,
    variant_overall,
)
from nsight_agent.views.runs import checks_by, config_index, config_list, denormalized, param_names

Z95 = 1.96

DRIFT_RULE = (
    "each run's 95% interval (median ± its order-statistic CI, else mean ± 1.96·std/√n) is "
    "widened to √(h² + (1.96·drift·center)²) for between-run drift "
    f"({gate.DRIFT_RSD_PCT:g}% on a GPU, {gate.CPU_DRIFT_RSD_PCT:g}% on a CPU); then compare_variants' "
    "rule: faster or slower when the widened intervals do not overlap and the times differ by "
    "at least the candidate run's min_effect_pct (and 100 ns for GPU times), else "
    "within_noise. Not compared: CPU runs whose speed probes differ by more than "
    f"{gate.MACHINE_SPEED_LIMIT:g}x; not a regression: a slower candidate whose spread is over "
    f"{gate.NOISE_RATIO_LIMIT:g}x the baseline's"
)


class RunFacts(BaseModel):
    """What decides whether two runs may be compared, and what is only shown."""

    run_id: str
    variant: str
    baseline: str | None = Field(default=None, description="Its name, when it is a baseline")
    date: str | None = None
    source_hash: str
    method: str
    gpu: str | None = None
    host: str | None = None
    clock_control: str | None = None
    cache_control: str | None = None
    driver: str | None = None
    ncu: str | None = None
    torch: str | None = None


class DiffConfig(BaseModel):
    config_index: int
    config: dict[str, Any]
    baseline_time: float | None = None
    time: float | None = None
    speedup: float | None = Field(default=None, description="baseline time / this time")
    verdict: Verdict
    check: str | None = None


class RunDiff(BaseModel):
    """A run against a baseline (or another run): comparable or why not, then verdicts."""

    comparable: bool
    reasons: list[str] | None = Field(default=None, description="Why the runs are not comparable")
    todo: str | None = Field(default=None, description="What to do instead")
    unverified: list[str] | None = Field(
        default=None, description="Rules that could not be checked"
    )
    notes: list[str] | None = None
    baseline: RunFacts
    candidate: RunFacts
    metric: str
    unit: str | None = None
    statistic: str | None = Field(default=None, description="median or mean")
    drift_pct: float = gate.DRIFT_RSD_PCT
    rule: str = DRIFT_RULE
    overall: VariantOverall | None = None
    configs: list[DiffConfig] = []
    threshold_pct: float | None = None
    regression: bool | None = Field(default=None, description="For the gate: a slower config")


def pick_variant(run: RunResult, wanted: str | None, prefer: str | None = None) -> str:
    """``wanted`` (which must be a variant of the run), else ``prefer`` when the run has it,
    else the run's only variant."""
    names = [v.name for v in run.request.effective_variants()]
    if wanted is not None:
        if wanted not in names:
            raise InvalidRequestError(
                f"{wanted!r} is not a variant of run {run.run_id}.",
                f"Variants: {', '.join(names)}.",
            )
        return wanted
    if prefer in names:
        return str(prefer)
    if len(names) == 1:
        return names[0]
    raise InvalidRequestError(
        f"Run {run.run_id} has {len(names)} variants; say which one.",
        f"Variants: {', '.join(names)} (CLI --variant, MCP NAME@VARIANT).",
    )


def facts(run: RunResult, variant: str, name: str | None = None) -> RunFacts:
    env = baselines.read_environment(run.run_dir)
    frame = run.processed
    method = _first(frame, "Method") or str(run.facts.method or "ncu")
    gpu = _first(frame, "GPU") or env.get("gpu") or ("cpu" if method == "perf_counter" else None)
    status = run_status.read_status(run.run_dir) or {}
    started = status.get("started")
    date = (
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
        if isinstance(started, int | float)
        else run.run_id[:15]
    )
    packages = env.get("packages") or {}
    return RunFacts(
        run_id=run.run_id,
        variant=variant,
        baseline=name,
        date=date,
        source_hash=baselines.variant_hashes(run.request).get(variant, "?"),
        method=method,
        gpu=gpu,
        host=_first(frame, "Host") or status.get("host") or env.get("host"),
        clock_control=run.request.clock_control,
        cache_control=run.request.cache_control,
        driver=env.get("driver_version"),
        ncu=env.get("ncu_version"),
        torch=packages.get("torch") if isinstance(packages, dict) else None,
    )


def baseline_entry(run: RunResult, variant: str | None, name: str) -> baselines.Baseline:
    """What a baseline of ``run`` (its ``variant``, or its only one) records and lists."""
    chosen = pick_variant(run, variant)
    f = facts(run, chosen)
    return baselines.Baseline(
        name=name,
        run_id=run.run_id,
        variant=chosen,
        created=baselines.utc_now(),
        source_hash=f.source_hash,
        gpu=f.gpu,
        method=f.method,
        measured=f.date,
    )


def _first(frame: pd.DataFrame, column: str) -> str | None:
    if column not in frame.columns:
        return None
    for value in frame[column]:
        if isinstance(value, str) and value and value != "nan":
            return value
    return None


def _key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def comparability(
    base: RunFacts, cand: RunFacts, base_run: RunResult, cand_run: RunResult, metric: str
) -> tuple[list[str], list[str]]:
    """(reasons they are not comparable, rules that could not be checked)."""
    reasons: list[str] = []
    unverified: list[str] = []

    def same(what: str, a: Any, b: Any, *, needed: bool = True) -> None:
        if a is None or b is None:
            if needed:
                unverified.append(f"{what} (not recorded: baseline {a}, this run {b})")
        elif a != b:
            reasons.append(f"{what} differs: baseline {a}, this run {b}")

    same("method", base.method, cand.method)
    same("GPU model", base.gpu, cand.gpu)
    if base.gpu == "cpu" and cand.gpu == "cpu":
        same("host (CPU timing)", base.host, cand.host)
        slow, unknown = gate.machine_speed(base_run.facts.cpu_probe_ns, cand_run.facts.cpu_probe_ns)
        reasons += [slow] if slow else []
        unverified += [unknown] if unknown else []
    same("clock control", base.clock_control, cand.clock_control)
    same("cache control", base.cache_control, cand.cache_control)
    on_gpu = base.gpu != "cpu" or cand.gpu != "cpu"
    same("driver", base.driver, cand.driver, needed=on_gpu)
    same("ncu version", base.ncu, cand.ncu, needed="ncu" in (base.method, cand.method))
    b_configs = {_key(c) for c in config_list(base_run)}
    c_configs = {_key(c) for c in config_list(cand_run)}
    if b_configs != c_configs:
        only_b, only_c = sorted(b_configs - c_configs), sorted(c_configs - b_configs)
        reasons.append(
            f"configs differ: only in the baseline {only_b[:3]}, only in this run {only_c[:3]}"
        )
    for side, run in (("baseline", base_run), ("this run", cand_run)):
        if metric not in set(run.processed.get("Metric", pd.Series(dtype=str))):
            reasons.append(f"{side} has no {metric!r} rows")
    sizes_b, sizes_c = _out_bytes(base_run, base.variant), _out_bytes(cand_run, cand.variant)
    differ = [k for k in sizes_b if k in sizes_c and sizes_b[k] != sizes_c[k]]
    if differ:
        reasons.append(
            f"output sizes differ at {len(differ)} config(s), e.g. {differ[0]}: baseline "
            f"{sizes_b[differ[0]]} B, this run {sizes_c[differ[0]]} B (not the same problem)"
        )
    return reasons, unverified


def _out_bytes(run: RunResult, variant: str) -> dict[str, int]:
    """Bytes of the variant's outputs per config (the pre-flight's record), keyed by config."""
    try:
        manifest = json.loads((run.run_dir / "preflight-manifest.json").read_text())
    except (OSError, ValueError):
        return {}
    out: dict[str, int] = {}
    configs = manifest.get("configs") or []
    for config, sizes in zip(configs, manifest.get("out_bytes") or [], strict=False):
        if isinstance(sizes, dict) and isinstance(sizes.get(variant), int):
            out[_key(config)] = int(sizes[variant])
    return out


def variant_rows(run: RunResult, variant: str, metric: str) -> dict[str, dict[str, Any]]:
    """The variant's rows of ``metric`` by config key."""
    frame = denormalized(run.processed)
    frame = frame[(frame["Metric"] == metric) & (frame["Annotation"].astype(str) == variant)]
    params, configs = param_names(run.processed), config_list(run)
    out: dict[str, dict[str, Any]] = {}
    for row in frame.to_dict("records"):
        i = config_index(configs, row, params)
        if 0 <= i < len(configs):
            out[_key(configs[i])] = row
    return out


def has_median(row: dict[str, Any]) -> bool:
    return all(sig(row.get(c)) is not None for c in ("MedianValue", "MedianCI95_Lower"))


def widened(row: dict[str, Any], statistic: str, drift_pct: float) -> dict[str, Any]:
    """The row as compare's interval rule reads it: center and a 95% interval that also holds
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
    base_run: RunResult,
    cand_run: RunResult,
    *,
    base_variant: str | None = None,
    cand_variant: str | None = None,
    name: str | None = None,
    metric: str = TIME_METRIC,
    threshold_pct: float | None = None,
    drift_pct: float | None = None,
) -> RunDiff:
    """``cand_run`` against ``base_run``: refused with reasons, or per config verdicts;
    ``drift_pct`` by default the measured drift of the runs' kind (views/gate.py)."""
    bv = pick_variant(base_run, base_variant)
    cv = pick_variant(cand_run, cand_variant, prefer=bv)
    base, cand = facts(base_run, bv, name), facts(cand_run, cv)
    reasons, unverified = comparability(base, cand, base_run, cand_run, metric)
    notes = [
        "same source (hash " + base.source_hash + ")"
        if base.source_hash == cand.source_hash
        else f"source changed: {base.source_hash} -> {cand.source_hash}"
    ]
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
        _verdicts(out, base_run, cand_run, metric)
        if out.regression and all(
            c.verdict in ("slower", "within_noise", "faster") for c in out.configs
        ):
            rows = [
                variant_rows(r, v, metric).values() for r, v in ((base_run, bv), (cand_run, cv))
            ]
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


def _verdicts(out: RunDiff, base_run: RunResult, cand_run: RunResult, metric: str) -> None:
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
    for idx, config in enumerate(config_list(base_run)):
        key = _key(config)
        ci = next((i for i, c in enumerate(c_configs) if _key(c) == key), -1)
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
        verdicts.append(entry.verdict)
        out.configs.append(entry)
    out.statistic, out.unit = statistic, _first(base_run.processed, "Unit")
    out.overall = variant_overall(False, verdicts, speedups)
    out.regression = any(
        gate.regressed(c.verdict, c.speedup, out.threshold_pct) for c in out.configs
    )


def _time(value: float | None, unit: str | None) -> str:
    if value is None:
        return "-"
    if unit == "ns":
        for scale, name in ((1e6, "ms"), (1e3, "us")):
            if value >= scale:
                return f"{value / scale:.4g} {name}"
    return f"{value:.4g} {unit or ''}".strip()


def render_diff(d: RunDiff) -> str:
    """Short text: the comparability first, then one line per config."""
    b, c = d.baseline, d.candidate
    name = f"baseline {b.baseline!r} " if b.baseline else "run "
    lines = [
        f"{c.run_id} [{c.variant}] vs {name}{b.run_id} [{b.variant}]: "
        f"{c.method} on {c.gpu or '?'}; {'; '.join(d.notes or [])}"
    ]
    if not d.comparable:
        lines += ["NOT COMPARABLE:", *(f"  - {r}" for r in d.reasons or []), d.todo or ""]
        return "\n".join(lines)
    for u in d.unverified or []:
        lines.append(f"unverified: {u}")
    lines.append(f"{'config':28} {'baseline':>12} {'this run':>12} {'speedup':>8}  verdict")
    for row in d.configs:
        config = ",".join(f"{k}={v}" for k, v in row.config.items()) or "-"
        t0, t1 = _time(row.baseline_time, d.unit), _time(row.time, d.unit)
        s = f"{row.speedup:.3f}" if row.speedup is not None else "-"
        lines.append(f"{config[:28]:28} {t0:>12} {t1:>12} {s:>8}  {row.verdict}")
    if d.overall is not None:
        g = d.overall.geomean_speedup
        lines.append(f"overall: {d.overall.verdict}" + (f", geomean speedup {g:.3f}" if g else ""))
    lines.append(
        f"({d.statistic}s; 95% intervals widened by {d.drift_pct:g}% between-run drift; "
        "docs/BASELINES.md)"
    )
    if d.regression is not None:
        limit = f"threshold {d.threshold_pct:g}%" if d.threshold_pct else "beyond the drift"
        lines.append(f"regression ({limit}): {d.regression}")
    return "\n".join(lines)
