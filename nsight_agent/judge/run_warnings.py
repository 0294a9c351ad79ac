"""What a run's answer warns of, beside its numbers: the pipeline's own warnings, variants
that were wrong, not measured or suspect (said once each, no speedup claimed), what the
compiles cost, the timing path's honesty notes, unstable measurements, combined kernels, and
clocks that were not locked; and a budgeted run's budget line."""

from __future__ import annotations

import re

import pandas as pd

from nsight_agent.judge.builds import build_note, stage_seconds_of
from nsight_agent.judge.emulated import run_note
from nsight_agent.judge.run import CPU_TIMER, STABLE_RSD_PCT, RunLike, timing_method
from nsight_agent.numbers import sig


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
    emulated = run_note(frame)
    out += [emulated] if emulated else []
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
    out += pulled_by_outliers(frame)
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


# A mean this far above its median is pulled by a few slow samples, not the work's time.
OUTLIER_PULL = 1.25


def pulled_by_outliers(frame: pd.DataFrame) -> list[str]:
    """A line per variant whose mean sits well above its median in some config: the speedups
    and verdicts read the mean (nsight-python's AvgValue), so a few slow calls can hide a real
    difference or make one up."""
    if not len(frame) or "MedianValue" not in frame.columns:
        return []
    ratio = frame["AvgValue"] / frame["MedianValue"].where(frame["MedianValue"] > 0)
    pulled = frame[ratio >= OUTLIER_PULL].assign(_ratio=ratio)
    out = []
    for name, rows in pulled.groupby("Annotation", sort=False):
        worst = rows.loc[rows["_ratio"].idxmax()]
        out.append(
            f"variant {name!r}: its mean is {sig(worst['_ratio'], 3)}x its median in "
            f"{len(rows)} measurement(s) ({worst['Metric']}): a few slow samples pull it, and "
            "the speedups and verdicts read the mean; MedianValue is the typical call. Check "
            "for other work on the machine and measure again."
        )
    return out


# The timing path (method='timing', engine/worker/timing.py): how it decides how many runs to
# take. Mirrors TimingOptions and pipeline.time_request (that module imports torch; a test
# checks these against it).
TIMING_MIN_RUNS_FLOOR = 5
TIMING_MAX_RUNS = 200
TIMING_MAX_SECONDS = 20.0
TIMING_CI_TARGET_PCT = 1.5
CPU_TIMING_NOTE = (
    "measured by perf_counter on the CPU, around each call (no GPU, no ncu, no counters, no L2 "
    "cache to flush): gpu__time_duration.sum holds these wall-clock times in ns, not GPU "
    "kernel durations"
)


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


def budget_note(run: RunLike) -> str | None:
    """The run's budget line (what was kept and left out) and what its ncu run took."""
    said, took = run.facts.budget, run.facts.ncu_s
    if said is None:
        return None
    return said + (f"; ncu took {took:.1f} s" if took is not None else "")
