"""The answers of a run or a report that both front ends show: the judge decides (verdicts,
warnings, what a report holds), the views shape it into the answer model.

    profile_summary   profile_kernel, get_run, ``nsight-agent profile``
    compare_summary   compare_variants, ``nsight-agent compare``
    roofline_summary  roofline_metrics
    report_summary    summarize_report, ``nsight-agent report --json``
    report_and_step   ``nsight-agent report``: the digest and the step view, one reading
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path

from nsight_agent.catalog import metrics as catalog
from nsight_agent.diagnose.step_view import StepView
from nsight_agent.errors import UnknownMetricError
from nsight_agent.judge import basis, comparison, reading, run_warnings
from nsight_agent.judge.diagnosis import step_of_report
from nsight_agent.judge.kernelbench_times import kernelbench_times
from nsight_agent.judge.reading import ReadReport
from nsight_agent.judge.run import RunLike, metric_frame
from nsight_agent.time_basis import TimeBasis
from nsight_agent.views import compare, report, roofline, runs
from nsight_agent.views.kernelbench import kernelbench_report


def profile_summary(
    run: RunLike, *, metrics: Sequence[str] | None = None, offset: int = 0, limit: int = 20
) -> runs.ProfileSummary:
    """Per (variant, config): each metric's avg, std, min, max, n, RSD and stability."""
    frame = metric_frame(run, metrics)
    warnings = run_warnings.run_warnings(run, frame)
    return runs.profile_summary(run, frame, warnings, offset=offset, limit=limit)


def compare_summary(
    run: RunLike,
    *,
    baseline: str | None = None,
    metric: str | None = None,
    time_basis: TimeBasis | None = None,
    offset: int = 0,
    limit: int = 20,
    min_effect_pct: float | None = None,
) -> compare.CompareSummary:
    """Per config: each variant's time, speedup vs the baseline and a verdict, on the run's
    time basis (``time_basis``: re-read on another), the other basis's verdicts beside them
    and where the two disagree; under correctness="kernelbench", KernelBench's result fields
    too. ``metric``: that metric's comparison alone (a counter, no time basis);
    ``min_effect_pct`` re-reads a run with another minimum effect than it asked for."""
    if metric is not None:
        judged = comparison.compare_run(
            run, baseline=baseline, metric=metric, min_effect_pct=min_effect_pct
        )
        warnings = run_warnings.run_warnings(run, judged.frame)
        return compare.compare_summary(judged, run, warnings, offset=offset, limit=limit)
    chosen, note = basis.basis_of(run, time_basis)
    bases = basis.compare_bases(run, chosen, baseline=baseline, min_effect_pct=min_effect_pct)
    warnings = [*([note] if note else []), *run_warnings.run_warnings(run, bases.main.frame)]
    s = compare.compare_summary(
        bases.main,
        run,
        warnings,
        offset=offset,
        limit=limit,
        bases=bases,
        disagreements=basis.disagreements(bases, run),
    )
    if run.request.correctness == "kernelbench":
        s.kernelbench = kernelbench_report(s, kernelbench_times(run, bases))
    return s


def roofline_summary(
    path: str | Path, *, run: RunLike | None = None, offset: int = 0, limit: int = 20
) -> roofline.RooflineSummary:
    """Roofline of every kernel of the report at ``path``; with ``run``, tied to its variant and
    config."""
    calls = reading.call_configs(run) if run is not None else {}
    return roofline.roofline_summary(
        reading.read_report(path), run=run, calls=calls, offset=offset, limit=limit
    )


def report_summary(
    path: str | Path,
    *,
    offset: int = 0,
    limit: int = 2,
    findings: int = 2,
    metrics: Sequence[str] = (),
    one_line: int = 12,
) -> report.ReportSummary:
    """Digest of any ``.ncu-rep``: kernels by duration, ``limit`` in full from ``offset``, up to
    ``one_line`` more in one line each, paged; ``metrics`` shown by full name too."""
    return _summary(reading.read_report(path), offset, limit, findings, metrics, one_line)


def report_and_step(
    path: str | Path,
    *,
    offset: int = 0,
    limit: int = 2,
    findings: int = 2,
    metrics: Sequence[str] = (),
    one_line: int = 12,
) -> tuple[report.ReportSummary, StepView | None]:
    """``report_summary`` and the report's step view (None for a single launch; no source, no
    wall time), from one reading of the report."""
    read = reading.read_report(path)
    summary = _summary(read, offset, limit, findings, metrics, one_line)
    return summary, step_of_report(read)


def _summary(
    read: ReadReport,
    offset: int,
    limit: int,
    findings: int,
    metrics: Sequence[str],
    one_line: int,
) -> report.ReportSummary:
    check_metrics(metrics, read)
    return report.summarize_report(
        read, offset=offset, limit=limit, findings=findings, metrics=metrics, one_line=one_line
    )


def check_metrics(names: Sequence[str], read: ReadReport) -> None:
    """Refuse a metric asked for that is neither in the report nor a metric ncu knows (a
    typo would otherwise show as "not in the report"), with close matches."""
    if not names:
        return
    present = {str(m) for a in read.actions for m in a.metric_names()}
    for name in names:
        if name in present:
            continue
        try:
            catalog.validate_metrics([name])
        except UnknownMetricError as err:
            close = difflib.get_close_matches(name, present, n=3)
            raise UnknownMetricError(
                name,
                list(dict.fromkeys([*close, *err.suggestions]))[:5],
                f"Metric {name!r} is not in this report, and {err.message[0].lower()}"
                f"{err.message[1:]}",
            ) from err
