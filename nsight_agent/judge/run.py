"""What the judge reads of a run: ``RunLike`` (the engine's ``RunResult``, or a stand-in in
tests), and its processed frame read as configs in request order, variants, absolute values
and output checks. Every decision and every view reads a run's configs through these, so a
config has one index everywhere."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from nsight_agent.engine.collection import aggregate
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.engine.store.records import DroppedVariant, RunFiles, Suspect
from nsight_agent.engine.store.runs import OutputCheck, PreflightResult
from nsight_agent.errors import InvalidRequestError
from nsight_agent.numbers import scalar
from nsight_agent.request import ProfileRequest


class RunLike(Protocol):
    """What the judge and the views read of a run (``pipeline.RunResult``, or a stand-in)."""

    run_id: str
    run_dir: Path
    request: ProfileRequest
    processed: pd.DataFrame
    raw: pd.DataFrame
    checks: list[OutputCheck]
    kernels: dict[str, list[str]]
    warnings: list[str]
    artifacts: dict[str, Path]
    seconds: float
    facts: RunFacts  # method (timing path), collection (ncu path), ...
    preflight: PreflightResult | None  # its builds (the compile note) and copies
    dropped: dict[str, DroppedVariant]
    suspects: list[Suspect]

    @property
    def files(self) -> RunFiles: ...


# The timing path's CPU timer: its times are wall-clock times around each call.
CPU_TIMER = "perf_counter"
# The relative std dev (%) below which the aggregate stage calls a measurement stable.
STABLE_RSD_PCT = aggregate.STABLE_RSD_PCT


def param_names(processed: pd.DataFrame) -> list[str]:
    """Config columns of a processed frame: the ones between ``Metric`` and ``AvgValue``."""
    cols = list(processed.columns)
    if "Metric" not in cols or "AvgValue" not in cols:
        return []
    return cols[cols.index("Metric") + 1 : cols.index("AvgValue")]


def _config_key(row: Mapping[str, Any], params: Sequence[str]) -> tuple[Any, ...]:
    return tuple(scalar(row[p]) for p in params)


def config_list(run: RunLike) -> list[dict[str, Any]]:
    """The run's configs in request order (request.expanded_configs()), else in frame order."""
    try:
        configs = run.request.expanded_configs()
        return [{k: scalar(v) for k, v in dict(c).items()} for c in configs]
    except Exception:  # a request we cannot expand: fall back to the frame
        pass
    params = param_names(run.processed)
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in run.processed.to_dict("records"):
        key = _config_key(row, params)
        seen.setdefault(key, dict(zip(params, key)))
    return list(seen.values())


def config_index(
    configs: list[dict[str, Any]], row: Mapping[str, Any], params: Sequence[str]
) -> int:
    """The index in ``configs`` of a frame row's config; -1 when it is none of them."""
    key = _config_key(row, params)
    for i, c in enumerate(configs):
        if tuple(scalar(c.get(p)) for p in params) == key:
            return i
    # Values the frame stringified (dtypes): compare as text.
    text = tuple(str(k) for k in key)
    for i, c in enumerate(configs):
        if tuple(str(scalar(c.get(p))) for p in params) == text:
            return i
    return -1


def row_config(row: Mapping[str, Any], params: Sequence[str]) -> dict[str, Any]:
    """A frame row's config as the frame holds it (for a row of no config of the request)."""
    return dict(zip(params, _config_key(row, params)))


def config_key(config: Mapping[str, Any]) -> str:
    """One config as text, equal for equal configs of two runs."""
    return json.dumps(config, sort_keys=True, default=str)


def denormalized(frame: pd.DataFrame) -> pd.DataFrame:
    """Absolute values even when the pipeline normalised the frame against a baseline."""
    if "NormalizationValue" not in frame.columns:
        return frame
    out = frame.copy()
    for col in ("AvgValue", "StdDev", "MinValue", "MaxValue", "CI95_Lower", "CI95_Upper"):
        if col in out.columns:
            out[col] = out[col] * out["NormalizationValue"]
    return out


def metric_frame(run: RunLike, metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """The run's processed rows in absolute values, of ``metrics`` only when given (each must
    be in the run)."""
    frame = denormalized(run.processed)
    if not metrics:
        return frame
    unknown = [m for m in metrics if m not in set(frame["Metric"])]
    if unknown:
        raise InvalidRequestError(
            f"Metric {unknown[0]!r} is not in run {run.run_id}.",
            f"Metrics in this run: {', '.join(dict.fromkeys(frame['Metric']))}.",
        )
    return frame[frame["Metric"].isin(list(metrics))]


def variant_names(frame: pd.DataFrame) -> list[str]:
    """The frame's variants in the order it holds them."""
    return [str(a) for a in dict.fromkeys(frame["Annotation"])] if len(frame) else []


def checks_by(run: RunLike) -> dict[tuple[str, int], OutputCheck]:
    """The run's output checks by (variant, config index)."""
    return {(c.variant, c.config_index): c for c in run.checks}


def timing_method(run: RunLike, frame: pd.DataFrame) -> str | None:
    """The timing path's timer (cupti, cuda_events, perf_counter), None for an ncu run."""
    method = run.facts.method
    if method is None and "Method" in frame.columns and len(frame):
        method = frame["Method"].dropna().iloc[0] if frame["Method"].notna().any() else None
    return str(method) if method and str(method) != "ncu" else None


def first_text(frame: pd.DataFrame, column: str) -> str | None:
    """The first non-empty text of ``column``, None when the frame has none."""
    if column not in frame.columns:
        return None
    for value in frame[column]:
        if isinstance(value, str) and value and value != "nan":
            return value
    return None
