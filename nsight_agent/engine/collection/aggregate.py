"""Aggregation: raw rows -> nsight-python's processed frame.

Columns, in order: Annotation, Metric, <params>, AvgValue, StdDev, MinValue, MaxValue, NumRuns,
Kernel, GPU, Host, ComputeClock, MemoryClock, Unit, [information collectors], CI95_Lower,
CI95_Upper, RelativeStdDevPct, StableMeasurement, Normalized, [NormalizationValue], Geomean,
then ours: MedianValue, P20Value, P80Value (after nsight-python's, which keep their places).
StdDev is the sample standard deviation (n-1); a measurement is stable when RelativeStdDevPct
< 2. The percentiles interpolate linearly between runs (numpy's default, as Triton's
``do_bench`` quantiles and ``torch.quantile``), absolute even where AvgValue is normalized.
Parameter values come back as given (tensors, dtypes, lists), grouped without sorting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from nsight_agent.errors import ExtractionError, InvalidRequestError

STABLE_RSD_PCT = 2.0
KEYS = ["Annotation", "Metric"]
# Our columns beside nsight-python's: the median and the 20th/80th percentiles of the runs.
PERCENTILES = {"MedianValue": 0.5, "P20Value": 0.2, "P80Value": 0.8}
PER_GROUP = ["Kernel", "GPU", "Host", "ComputeClock", "MemoryClock", "Unit"]


def _hashable(values: pd.Series) -> bool:
    try:
        set(values.dropna())
    except (TypeError, ValueError):
        return False
    return True


def _keys(frame: pd.DataFrame, params: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Group keys for the parameters: a hashable column groups as it is (tensors, dtypes: by
    identity or value, never sorted); an unhashable one (lists, dicts) on its text, in a helper
    column, the original values kept ("first")."""
    keys, helpers = [], {}
    for col in params:
        if _hashable(frame[col]):
            keys.append(col)
        else:
            helpers[col] = f"{col}__key__"
            frame[helpers[col]] = frame[col].astype(str)
            keys.append(helpers[col])
    return keys, helpers


# What each per-group column says about how a run was measured. Runs of one config that differ
# in any of them (another GPU, another clock setting) are not repeats of one measurement:
# averaging them would give a number that describes neither, so aggregation refuses.
SETTING = {
    "GPU": "GPUs",
    "ComputeClock": "SM clocks",
    "MemoryClock": "memory clocks",
    "Host": "hosts",
    "Unit": "units",
}


def _missing(value: object) -> bool:
    """A failed run's row has no GPU ("") and no clocks (NaN): it says nothing either way."""
    if value is None or isinstance(value, str):
        return not value
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # an array-like value is a value
        return False


def _plain(value: object) -> object:
    return value.item() if isinstance(value, np.generic) else value


def _distinct(values: pd.Series) -> list[object]:
    return list(dict.fromkeys(_plain(v) for v in values if not _missing(v)))


def _check_one_setting(frame: pd.DataFrame, keys: list[str], params: Sequence[str]) -> None:
    """Raise ``ExtractionError`` when the rows of one group (annotation, metric, config) were
    measured on different GPUs, clocks, hosts or in different units."""
    for column, what in SETTING.items():
        if column not in frame.columns:
            continue
        present = frame[column].map(lambda v: None if _missing(v) else _plain(v))
        counts = present.groupby([frame[k] for k in keys], sort=False, dropna=False).nunique()
        if not (counts > 1).any():
            continue
        for _, rows in present.groupby([frame[k] for k in keys], sort=False, dropna=False):
            found = _distinct(rows)
            if len(found) < 2:
                continue
            first = frame.loc[rows.index[0]]
            where = ", ".join(
                [f"annotation {first['Annotation']!r}", f"metric {first['Metric']!r}"]
                + [f"{p}={_plain(first[p])!r}" for p in params]
            )
            raise ExtractionError(
                f"Runs of one config were measured on different {what} ({where}): "
                f"{', '.join(map(repr, found))}. Averaging them would describe none of them.",
                "Profile each GPU and clock setting in a run of its own: pin the device "
                "(CUDA_VISIBLE_DEVICES) and keep the clock control the same for every run.",
            )


def _single(column: str):  # type: ignore[no-untyped-def]
    def pick(values: pd.Series) -> object:
        distinct = _distinct(values)
        if len(distinct) > 1:  # _check_one_setting has refused such a group already
            raise ExtractionError(f"{column} differs between runs of one config: {distinct}")
        return distinct[0] if distinct else values.iloc[0]

    return pick


def _first_present(values: pd.Series) -> object:
    """The kernel name of the first run that has one: a failed run (named "") that came first
    must not blank the name of a config whose other runs measured it."""
    present = [v for v in values if not _missing(v)]
    return present[0] if present else values.iloc[0]


def _info_aggregations(
    frame: pd.DataFrame, info_scopes: Mapping[str, str]
) -> dict[str, tuple[str, object]]:
    """Information-collector columns: numeric values that vary (config, run and annotation
    scopes) as <name>_Avg/_Std/_Min/_Max, anything else as its first value."""
    aggs: dict[str, tuple[str, object]] = {}
    for col, scope in info_scopes.items():
        if col not in frame.columns:
            continue
        if scope != "once" and pd.api.types.is_numeric_dtype(frame[col]):
            for suffix, how in (("Avg", "mean"), ("Std", "std"), ("Min", "min"), ("Max", "max")):
                aggs[f"{col}_{suffix}"] = (col, how)
        else:
            aggs[col] = (col, "first")
    return aggs


def aggregate(
    raw: pd.DataFrame,
    param_names: Sequence[str],
    normalize_against: str | None = None,
    info_scopes: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    params = list(param_names)
    frame = raw.reset_index(drop=True).copy()
    keys, helpers = _keys(frame, params)
    _check_one_setting(frame, [*KEYS, *keys], params)
    frame["_order"] = np.arange(len(frame))
    aggs: dict[str, tuple[str, object]] = {
        "AvgValue": ("Value", "mean"),
        "StdDev": ("Value", "std"),
        "MinValue": ("Value", "min"),
        "MaxValue": ("Value", "max"),
        "NumRuns": ("Value", "count"),
        "_order": ("_order", "min"),
        **{name: ("Value", _quantile(q)) for name, q in PERCENTILES.items()},
    }
    for col in PER_GROUP:
        aggs[col] = (col, _first_present if col == "Kernel" else _single(col))
    aggs |= _info_aggregations(frame, info_scopes or {})
    aggs |= {col: (col, "first") for col in helpers}  # the original objects
    out = frame.groupby([*KEYS, *keys], sort=False, dropna=False).agg(**aggs).reset_index()
    out = out.sort_values("_order").drop(columns="_order").reset_index(drop=True)
    out = out[[*KEYS, *params, *(c for c in out.columns if c not in (*KEYS, *params, *keys))]]

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
        for col, key in helpers.items():
            out[key] = out[col].astype(str)
        on = [*keys, "Metric"]
        base = out.loc[out["Annotation"] == normalize_against, [*on, "AvgValue"]]
        base = base.rename(columns={"AvgValue": "NormalizationValue"})
        out = out.merge(base, on=on, how="inner").drop(columns=list(helpers.values()))
        out["AvgValue"] = out["AvgValue"] / out["NormalizationValue"]
        out["Normalized"] = normalize_against

    out["Geomean"] = out.groupby(KEYS, sort=False)["AvgValue"].transform(_geomean)
    return out[[*(c for c in out.columns if c not in PERCENTILES), *PERCENTILES]]


def _quantile(q: float):  # type: ignore[no-untyped-def]
    def quantile(values: pd.Series) -> float:
        return float(values.quantile(q)) if values.notna().any() else float("nan")

    return quantile


def _geomean(values: pd.Series) -> float:
    v = pd.to_numeric(values.dropna(), errors="coerce")
    if v.empty:
        return float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.exp(np.mean(np.log(v))))
