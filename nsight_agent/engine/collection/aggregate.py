"""Aggregation: raw rows -> nsight-python's processed frame.

Columns, in order: Annotation, Metric, <params>, AvgValue, StdDev, MinValue, MaxValue, NumRuns,
Kernel, GPU, Host, ComputeClock, MemoryClock, Unit, CI95_Lower, CI95_Upper, RelativeStdDevPct,
StableMeasurement, Normalized, [NormalizationValue], Geomean. StdDev is the sample standard
deviation (n-1); a measurement is stable when RelativeStdDevPct < 2.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from nsight_agent.errors import InvalidRequestError

STABLE_RSD_PCT = 2.0
KEYS = ["Annotation", "Metric"]
PER_GROUP = ["Kernel", "GPU", "Host", "ComputeClock", "MemoryClock", "Unit"]


def _sortable(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Parameters such as torch dtypes cannot be grouped on: compare them as strings."""
    frame = frame.copy()
    for col in columns:
        try:
            sorted(frame[col].dropna())
        except (TypeError, ValueError):
            frame[col] = frame[col].astype(str)
    return frame


def _single(column: str):  # type: ignore[no-untyped-def]
    def pick(values: pd.Series) -> object:
        distinct = values.dropna().unique()
        if len(distinct) > 1:
            raise ValueError(f"{column} differs between runs of one config: {list(distinct)}")
        return distinct[0] if len(distinct) else values.iloc[0]

    return pick


def aggregate(
    raw: pd.DataFrame, param_names: Sequence[str], normalize_against: str | None = None
) -> pd.DataFrame:
    params = list(param_names)
    frame = _sortable(raw.reset_index(drop=True), params)
    frame["_order"] = np.arange(len(frame))
    aggs: dict[str, tuple[str, object]] = {
        "AvgValue": ("Value", "mean"),
        "StdDev": ("Value", "std"),
        "MinValue": ("Value", "min"),
        "MaxValue": ("Value", "max"),
        "NumRuns": ("Value", "count"),
        "_order": ("_order", "min"),
    }
    for col in PER_GROUP:
        aggs[col] = (col, "first" if col == "Kernel" else _single(col))
    out = frame.groupby([*KEYS, *params], sort=False, dropna=False).agg(**aggs).reset_index()
    out = out.sort_values("_order").drop(columns="_order").reset_index(drop=True)

    half_width = 1.96 * out["StdDev"] / np.sqrt(out["NumRuns"])
    out["CI95_Lower"] = out["AvgValue"] - half_width
    out["CI95_Upper"] = out["AvgValue"] + half_width
    out["RelativeStdDevPct"] = out["StdDev"] / out["AvgValue"].replace(0, np.nan) * 100
    out["StableMeasurement"] = out["RelativeStdDevPct"] < STABLE_RSD_PCT
    out["Normalized"] = False

    if normalize_against is not None:
        if normalize_against not in set(out["Annotation"]):
            found = ", ".join(map(repr, out["Annotation"].unique()))
            raise InvalidRequestError(
                f"normalize_against={normalize_against!r} is not an annotation of this run "
                f"(found: {found}).",
                "Pass the name given to nsight_agent.annotate() for the baseline.",
            )
        on = [*params, "Metric"]
        base = out.loc[out["Annotation"] == normalize_against, [*on, "AvgValue"]]
        base = base.rename(columns={"AvgValue": "NormalizationValue"})
        out = out.merge(base, on=on, how="inner")
        out["AvgValue"] = out["AvgValue"] / out["NormalizationValue"]
        out["Normalized"] = normalize_against

    out["Geomean"] = out.groupby(KEYS, sort=False)["AvgValue"].transform(_geomean)
    return out


def _geomean(values: pd.Series) -> float:
    v = pd.to_numeric(values.dropna(), errors="coerce")
    if v.empty:
        return float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.exp(np.mean(np.log(v))))
