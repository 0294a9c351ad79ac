"""The tail every profiling path shares: report + manifest -> records -> raw -> processed.

``analyze.kernel`` (the nsight-python API) and the tool pipeline both collect with
``ncu.profile_cold`` and then call ``measure``; only their artifact naming and what they add on
top (derived metrics and normalisation, or output checks) differ.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from nsight_agent.engine.collection import aggregate, call_markers, derived, extract
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.errors import ExtractionError, ProfiledProcessError


@dataclass
class Measured:
    records: list[extract.ActionRecord]
    raw: pd.DataFrame
    processed: pd.DataFrame

    def ncu_cost(self, seconds: float) -> RunFacts:
        """What the ncu run cost, kept with the run (what a profiling budget would learn
        from): its wall time, the kernels it profiled and their replay passes."""
        passes = [r.passes for r in self.records if r.passes == r.passes]  # NaN: not reported
        return RunFacts(
            ncu_s=round(seconds, 3), ncu_kernels=len(self.records), ncu_passes=sum(passes)
        )


def read_manifest(path: Path) -> dict[str, Any]:
    """The runner's manifest; its absence means the profiled process died before writing it."""
    if not path.exists():
        raise ProfiledProcessError(1, f"The profiled process wrote no manifest at {path}.")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def measure(
    report: Path,
    manifest: Mapping[str, Any],
    metrics: Sequence[str],
    configs: Sequence[tuple[Any, ...]],
    params: Sequence[str],
    *,
    ignore_kernels: Sequence[str] | None = None,
    combine: extract.Combine | None = None,
    derive_metric: derived.DeriveMetric | None = None,
    normalize_against: str | None = None,
    suggest: Callable[[str], list[str]] | None = None,
    droppable: dict[str, str] | None = None,
    info: extract.Info | None = None,
    info_scopes: Mapping[str, str] | None = None,
    expected_kernels: call_markers.KernelCounts | None = None,
) -> Measured:
    """Read ``metrics`` of every kernel, tie each to its (config, run), and aggregate.
    ``droppable``: annotations left out (with why) rather than failing the whole report.
    ``info``: extra columns of a (call, annotation) (information collectors), aggregated by
    ``info_scopes`` (column -> once, config, run or annotation). A report without NVTX call
    ranges (an attached run) is read by its call markers, checked against ``expected_kernels``
    (the pre-flight's count per variant and config)."""
    calls = extract.calls_from_manifest(manifest)
    records = extract.read_actions(report, metrics, suggest=suggest)
    if call_markers.needed(records):
        try:
            records = call_markers.assign_calls(records, calls, expected_kernels)
        except call_markers.MarkerMismatch as err:
            raise ExtractionError(
                f"The report has no NVTX call ranges and its call markers do not fit: {err}.",
                "Profile again: a cold run (NSIGHT_AGENT_TARGETS=0) records NVTX call ranges.",
            ) from err
    grouped = extract.group_kernels(records, calls, ignore_kernels, combine, droppable)
    raw = extract.raw_frame(grouped, metrics, configs, params, derive_metric, info, info_scopes)
    processed = aggregate.aggregate(raw, params, normalize_against, info_scopes)
    return Measured(records, raw, processed)
