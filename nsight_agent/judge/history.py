"""History of one kernel: its runs over time against one reference run (a baseline, or the
oldest run of the source), each with its times per config and the run-to-run verdict of
``judge/run_diff.py`` (``views/history.py`` shows it as short text and a PNG)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from nsight_agent.judge.run import RunLike, config_key, config_list
from nsight_agent.judge.run_diff import diff_runs, has_median, variant_rows
from nsight_agent.numbers import sig
from nsight_agent.request import TIME_METRIC


class HistoryPoint(BaseModel):
    run_id: str
    date: str | None = None
    variant: str
    method: str
    gpu: str | None = None
    source_hash: str
    times: list[float | None] = Field(description="Per reference config, its statistic")
    geomean_speedup: float | None = Field(default=None, description="reference / this run")
    verdict: str = Field(description="Against the reference; reference; or not_comparable")
    why: str | None = Field(default=None, description="Why not comparable (the first reason)")


class History(BaseModel):
    """One kernel's trend: every kept run of its source, oldest first, against a reference."""

    key: str
    baseline: str | None = None
    reference: str = Field(description="run_id [variant] the verdicts are against")
    metric: str
    unit: str | None = None
    configs: list[dict[str, Any]]
    points: list[HistoryPoint]


def _times(run: RunLike, variant: str, configs: list[dict[str, Any]]) -> list[float | None]:
    rows = variant_rows(run, variant, TIME_METRIC)
    out: list[float | None] = []
    for config in configs:
        row = rows.get(config_key(config), {})
        out.append(sig(row.get("MedianValue") if has_median(row) else row.get("AvgValue")))
    return out


def build_history(
    key: str,
    reference: tuple[RunLike, str],
    points: Sequence[tuple[RunLike, str]],
    *,
    name: str | None = None,
) -> History:
    """Each (run, variant) against the reference with the run-to-run rule."""
    ref_run, ref_variant = reference
    configs = config_list(ref_run)
    out: list[HistoryPoint] = []
    seen: set[tuple[str, str]] = set()
    for run, variant in sorted(points, key=lambda p: p[0].run_id):
        if (run.run_id, variant) in seen:
            continue
        seen.add((run.run_id, variant))
        d = diff_runs(ref_run, run, base_variant=ref_variant, cand_variant=variant)
        is_ref = (run.run_id, variant) == (ref_run.run_id, ref_variant)
        verdict = "reference" if is_ref else "not_comparable"
        if d.comparable and not is_ref and d.overall is not None:
            verdict = d.overall.verdict
        out.append(
            HistoryPoint(
                run_id=run.run_id,
                date=d.candidate.date,
                variant=variant,
                method=d.candidate.method,
                gpu=d.candidate.gpu,
                source_hash=d.candidate.source_hash,
                times=_times(run, variant, configs),
                geomean_speedup=None if is_ref or d.overall is None else d.overall.geomean_speedup,
                verdict=verdict,
                why=d.reasons[0] if d.reasons else None,
            )
        )
    unit = next((str(u) for u in ref_run.processed.get("Unit", []) if isinstance(u, str)), None)
    return History(
        key=key,
        baseline=name,
        reference=f"{ref_run.run_id} [{ref_variant}]",
        metric=TIME_METRIC,
        unit=unit,
        configs=configs,
        points=out,
    )
