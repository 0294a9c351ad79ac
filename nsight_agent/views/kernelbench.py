"""KernelBench's result, per candidate, from a comparison (``views/compare.CompareSummary``):
compiled, correctness, runtime and ref_runtime in ms, speedup, plus our verdict and its reason,
so an agent loop written around KernelBench's evaluator can use ours instead.

runtime, ref_runtime and speedup follow KernelBench's timing definition where the run holds
its trials (``judge/kernelbench_times.py``: per call, CUDA events after its L2 flush, its
trial counts); the report says how they were timed, and the basis our verdicts compare.

``compiled`` is False for a candidate that did not import or build: a syntax error or no
``ModelNew`` (found before any run), an exception at import, a CUDA compile error. One whose
constructor or forward raises was built: ``compiled=True``, ``correctness=False``, as
KernelBench's eval reports a ``ModelNew(*init_inputs)`` that raises.

KernelBench times a candidate only once it is correct, and reports ``runtime = -1.0``
otherwise; so does this view (our run timed it, the comparison has its time). Our
verdicts are stricter than its correctness: a candidate whose time cannot be trusted
(``suspect``) or that raised is not correct here, and never gets a speedup.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from nsight_agent.errors import Problem
from nsight_agent.judge.kernelbench_times import KernelBenchTimes
from nsight_agent.judge.verdicts import FAILING
from nsight_agent.numbers import sig
from nsight_agent.views.compare import CompareSummary
from nsight_agent.views.kernelbench_result import KernelBenchReport, KernelBenchResult

# Milliseconds per unit of the time metric: the timing path reports ns, ncu "nsecond".
_MS_PER_UNIT = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0}
_MS_PER_UNIT |= {"msecond": 1.0, "s": 1e3, "second": 1e3}

# A variant that never ran ``judge/verdicts.dropped`` writes as "<verdict> at <stage>...":
# one dropped at import or compile did not build, which KernelBench calls not compiled.
_DROPPED_AT = re.compile(r"^\w+ at (\w+)")
_NOT_BUILT = frozenset({"import", "compile"})


def _geomean_ms(times: list[float | None], ms_per_unit: float) -> float:
    vals = [t for t in times if t is not None and t > 0 and math.isfinite(t)]
    if not vals:
        return -1.0
    return float(sig(math.exp(sum(map(math.log, vals)) / len(vals)) * ms_per_unit, 4) or -1.0)


def kernelbench_report(
    summary: CompareSummary, times: KernelBenchTimes | None = None
) -> KernelBenchReport:
    """Every non-baseline variant of ``summary`` in KernelBench's terms; runtimes by
    ``times`` (KernelBench's own), else the times ``summary`` compares, over the configs on
    the page ``summary`` holds (ask ``compare_summary`` for all of them)."""
    unit = times.unit if times is not None else summary.unit
    if unit not in _MS_PER_UNIT:
        raise ValueError(f"time unit {unit!r} of run {summary.run_id} is not a time")
    per_ms = _MS_PER_UNIT[unit]
    indices = [c.config_index for c in summary.configs]

    def times_of(name: str) -> list[float | None]:
        if times is not None:
            own = times.by_variant.get(name, {})
            return [own.get(i) for i in indices]
        return [c.variants[name].time for c in summary.configs if name in c.variants]

    base = summary.baseline
    ref_ms = _geomean_ms(times_of(base), per_ms)
    results = []
    for name, overall in summary.overall.items():
        if name == base:
            continue
        timings = [c.variants[name] for c in summary.configs if name in c.variants]
        failing = next((t for t in timings if t.verdict in FAILING), None)
        reason = (
            failing.check
            if failing
            else _speed_reason(overall.configs_faster, overall.configs_slower, len(timings))
        )
        dropped = (
            _DROPPED_AT.match(failing.check or "") if failing and failing.time is None else None
        )
        correct = overall.verdict not in FAILING and overall.verdict != "no_data"
        untrusted = times.untrusted.get(name) if times is not None else None
        if correct and untrusted:  # its per-call time, KernelBench's too, misses its work
            correct, reason = False, f"suspect on per-call time: {untrusted}"
        # As KernelBench: a candidate is timed only once it is correct.
        runtime = _geomean_ms(times_of(name), per_ms) if correct else -1.0
        speedup = sig(ref_ms / runtime, 4) if correct and runtime > 0 and ref_ms > 0 else None
        results.append(
            KernelBenchResult(
                variant=name,
                compiled=not (dropped and dropped.group(1) in _NOT_BUILT),
                correctness=correct,
                runtime=runtime,
                ref_runtime=ref_ms,
                speedup=speedup,
                verdict=overall.verdict,
                reason=reason,
            )
        )
    compiled = next((w for w in summary.warnings or [] if w.startswith("compile: ")), None)
    return KernelBenchReport(
        run_id=summary.run_id,
        baseline=base,
        results=results,
        timing=times.timing if times is not None else None,
        num_correct_trials=times.num_correct_trials if times is not None else None,
        num_perf_trials=(times.num_perf_trials or None) if times is not None else None,
        verdict_basis=summary.time_basis,
        compile=compiled,
    )


def rejected_report(problems: Iterable[Problem], baseline: str) -> KernelBenchReport:
    """The candidates a request was refused for, each a problem of its own source (a syntax
    error, no ``ModelNew``) found before any run: KernelBench's ``compiled=False``."""
    results: dict[str, KernelBenchResult] = {}
    for p in problems:
        name = p.variant or p.where
        said = f"{results[name].reason}; " if name in results else ""
        results[name] = KernelBenchResult(
            variant=name,
            compiled=False,
            correctness=False,
            runtime=-1.0,
            ref_runtime=-1.0,
            verdict="error",
            reason=f"{said}error at import: {p.text()}",
        )
    return KernelBenchReport(run_id=None, baseline=baseline, results=list(results.values()))


def _speed_reason(faster: int, slower: int, configs: int) -> str:
    return f"{faster} of {configs} configs faster, {slower} slower (95% intervals)"


def render_kernelbench(report: KernelBenchReport) -> str:
    """One line per candidate, KernelBench's fields first."""
    run = f"run {report.run_id}" if report.run_id else "no run (every candidate refused)"
    lines = [f"{run}, against {report.baseline!r} (times in ms):"]
    for r in report.results:
        speed = f"{r.speedup}x" if r.speedup is not None else "-"
        lines.append(
            f"{r.variant}: compiled={r.compiled} correctness={r.correctness} "
            f"runtime={r.runtime} ref_runtime={r.ref_runtime} speedup={speed} "
            f"[{r.verdict}] {r.reason or ''}".rstrip()
        )
    if report.timing:
        lines.append(f"runtime: {report.timing}")
    if report.verdict_basis:
        lines.append(f"[verdict] on {report.verdict_basis} time (options.time_basis)")
    if report.compile:
        lines.append(report.compile)
    return "\n".join(lines)
