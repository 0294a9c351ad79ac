"""The regression gate's measured parts (docs/BASELINES.md): how much two runs of unchanged
code drift apart, when the machine or the noise differed too much for two runs to be compared,
and the rule that makes a verdict a regression.

Two runs minutes or days apart are compared only as well as the machine held still between
them. On a GPU the drift is small; on a CPU it is not: another process on the machine
stretches every call, and even a quiet machine drifts (the constants below cite the results
files that hold both). So a CPU run carries a speed probe (engine/worker/
timer.cpu_probe_ns) and runs made at different machine speeds are not compared (exit 3); a
candidate whose spread is many times the baseline's, or whose fastest call still runs at the
baseline's time, is not called a regression on that alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

from nsight_agent.judge.comparison import CompareConfig
from nsight_agent.judge.verdicts import FAILING
from nsight_agent.numbers import sig, time_text

# Between-run drift on a GPU: the relative standard deviation (%) of one kernel's level (its
# median time) between runs of the same code on the same machine, minutes to hours apart
# (clocks, heat, other tenants). On an H100, 6 rounds 20 s apart: 0.01-0.11 % (docs/BASELINES.md;
# bench/results/baseline-drift/2026-12-06-h100-80gb-hbm3-1f031cd.json, drift.configs[].rsd_pct);
# kept at 1.5 % until a run spanning hours says otherwise.
DRIFT_RSD_PCT = 1.5
# The same on a CPU (perf_counter). Ten checks of one unchanged softmax on a quiet 2-core
# machine: medians 168-438.7 us against a 229.6 us baseline, every one within_noise at this
# value (bench/results/gate-under-load/2026-12-06-cpu-a09b578.json, checks.unchanged_quiet).
# Intervals widened by ±1.96 x 15 % of their own centers separate from 1.294 / 0.706 = 1.83x
# on (gate_reason.separable_ratio).
CPU_DRIFT_RSD_PCT = 15.0
# Two CPU runs whose speed probes differ by more than this factor were made on a machine
# running at another speed (another process's load): not compared. In the same results file,
# one quiet run's probes read 93.4-104 us (baseline.cpu_probe_us); beside two busy processes
# the same workload read 8009-8129 us, 77-78.1x slower (checks.unchanged_under_load, all exit 3).
MACHINE_SPEED_LIMIT = 1.5
# A candidate whose relative spread is more than this many times the baseline's (each at least
# NOISE_FLOOR_PCT) was measured on a noisier machine: its 'slower' is not a regression.
NOISE_RATIO_LIMIT = 4.0
NOISE_FLOOR_PCT = 2.0


def on_cpu(base_gpu: str | None, cand_gpu: str | None) -> bool:
    """Either run was timed on a CPU (its GPU column reads "cpu")."""
    return "cpu" in (base_gpu, cand_gpu)


def drift_for(base_gpu: str | None, cand_gpu: str | None) -> float:
    """The drift (%) allowed between two runs: the CPU's when either was timed on a CPU."""
    return CPU_DRIFT_RSD_PCT if on_cpu(base_gpu, cand_gpu) else DRIFT_RSD_PCT


def machine_waited(
    base: Mapping[str, Any], cand_row: Mapping[str, Any], where: str, unit: str | None
) -> str | None:
    """Why a CPU candidate's 'slower' is the machine's: its fastest call is inside the
    baseline's widened interval (``base``: its center and 95% bounds). On a CPU noise only
    adds time (another process holds a core, the caches go cold), so the fastest call bounds
    what the code itself costs: when that is as fast as the baseline ran, the slower center
    shows calls that waited, not code that got slower. Under load the probes can stay inside
    MACHINE_SPEED_LIMIT while the median reads far slower and the fastest call still matches
    the baseline's time (bench/gate_under_load.py runs such checks)."""
    fastest = sig(cand_row.get("MinValue"), 12)
    center, hi = sig(base.get("AvgValue"), 12), sig(base.get("CI95_Upper"), 12)
    if fastest is None or hi is None or center is None or fastest > hi:
        return None
    return (
        f"{where}: this run's fastest call ({time_text(fastest, unit)}) is inside the "
        f"baseline's interval ({time_text(center, unit)}, up to {time_text(hi, unit)}): the "
        "code still runs as fast as the baseline did, and its slower center is calls that "
        "waited for the machine (another process is likely using the CPU); re-run when the "
        "machine is quiet, or time both in one run"
    )


def machine_speed(
    base_probes: Sequence[float], cand_probes: Sequence[float]
) -> tuple[str | None, str | None]:
    """(why two CPU runs are not comparable, or None; what could not be checked, or None),
    from each run's CPU speed probes (``RunFacts.cpu_probe_ns``: before, after, and the median
    of the probes made between the runs). Two readings are compared: the slowest probe (the
    busiest moment each run saw) and the probe made while the calls were timed: the slowest
    alone can match while the calls ran at very different speeds (a busy moment before or
    after quiet runs)."""
    b, c = max(base_probes, default=None), max(cand_probes, default=None)
    if b is None or c is None:
        return None, f"machine speed (CPU probe not recorded: baseline {b}, this run {c})"
    readings = [("", b, c)]
    if len(base_probes) > 2 and len(cand_probes) > 2:
        readings.append((" while its calls were timed", base_probes[2], cand_probes[2]))
    for when, then, now in readings:
        ratio = now / then
        if 1 / MACHINE_SPEED_LIMIT <= ratio <= MACHINE_SPEED_LIMIT:
            continue
        how = f"{ratio:.3g}x slower" if ratio > 1 else f"{1 / ratio:.3g}x faster"
        return (
            f"the machine ran {how}{when} than when the baseline was measured (a fixed CPU "
            f"workload: {now / 1e3:.4g} us a call now, {then / 1e3:.4g} us then): another "
            "process is likely using the CPU; re-run when the machine is quiet, or time both "
            "in one run",
            None,
        )
    return None, None


def noisier(
    base_rows: Sequence[Mapping[str, Any]], cand_rows: Sequence[Mapping[str, Any]]
) -> str | None:
    """Why a candidate's 'slower' cannot be trusted: its relative spread is more than
    NOISE_RATIO_LIMIT times the baseline's (median over configs); None when it is not."""
    b = [sig(r.get("RelativeStdDevPct")) for r in base_rows]
    c = [sig(r.get("RelativeStdDevPct")) for r in cand_rows]
    b_rsd = median([v for v in b if v is not None] or [0.0])
    c_rsd = median([v for v in c if v is not None] or [0.0])
    ratio = max(c_rsd, NOISE_FLOOR_PCT) / max(b_rsd, NOISE_FLOOR_PCT)
    if ratio <= NOISE_RATIO_LIMIT:
        return None
    return (
        f"this run's spread is {ratio:.3g}x the baseline's (relative std dev {c_rsd:.3g} % "
        f"against {b_rsd:.3g} %): it was measured on a noisier machine, so its slower times may "
        "be the machine's; re-run when the machine is quiet, or time both in one run"
    )


def regressed(verdict: str, speedup: float | None, threshold_pct: float | None) -> bool:
    """The gate's rule for one config: a failing or unmeasured candidate, or one slower by
    the interval rule (drift-widened) and, when a threshold is given, by at least
    ``threshold_pct`` %."""
    if verdict in (*FAILING, "no_data"):
        return True
    limit = 1.0 + (threshold_pct or 0.0) / 100.0
    return verdict == "slower" and speedup is not None and 1.0 / speedup >= limit


def within_run_regression(
    configs: Sequence[CompareConfig], variant: str, threshold_pct: float | None
) -> bool:
    """The same gate on a within-run comparison's configs (both re-measured side by side)."""
    return any(
        regressed(c.variants[variant].verdict, c.variants[variant].speedup, threshold_pct)
        for c in configs
        if variant in c.variants
    )
