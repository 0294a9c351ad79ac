"""What ``analyze.plot`` accepts: nsight-python's plot options, checked against the frame
before anything is drawn (``views.plot`` draws). Each bad value is an ``InvalidRequestError``
that names the option, what it got and what it takes.

    roles = checked_options(df, param_names, filename=..., row_panels=[...], ...)
    metric = select_metric(df, metric)
    check_annotations(df[df["Metric"] == metric], roles)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from nsight_agent.errors import InvalidRequestError

PLOT_TYPES = ("line", "bar")
AGGREGATES = ("avg", "geomean")
REQUIRED_COLUMNS = ("Annotation", "Metric", "AvgValue")


@dataclass(frozen=True)
class PlotRoles:
    """The parameters each role names: panel rows and columns, variant splits, the x axis,
    and the annotations to split (None: all)."""

    rows: list[str]
    cols: list[str]
    variants: list[str]
    x_keys: list[str]
    only: list[str] | None


def checked_options(
    df: pd.DataFrame,
    param_names: list[str],
    *,
    filename: str,
    show_aggregate: str | None,
    plot_type: str,
    plot_width: int,
    plot_height: int,
    row_panels: Sequence[str] | None,
    col_panels: Sequence[str] | None,
    variant_fields: Sequence[str] | None,
    x_keys: Sequence[str] | None,
    variant_annotations: Sequence[str] | None,
) -> PlotRoles:
    """Every option's value, the frame's columns and the parameters' roles, checked."""
    only = variant_annotations
    roles = PlotRoles(
        rows=_field_list("row_panels", row_panels),
        cols=_field_list("col_panels", col_panels),
        variants=_field_list("variant_fields", variant_fields),
        x_keys=_field_list("x_keys", x_keys),
        only=_field_list("variant_annotations", only) if only else None,
    )
    _check_values(filename, show_aggregate, plot_type, plot_width, plot_height)
    _check_frame(df, param_names)
    named = {"row_panels": roles.rows, "col_panels": roles.cols}
    _check_roles(param_names, {**named, "variant_fields": roles.variants, "x_keys": roles.x_keys})
    return roles


def check_annotations(data: pd.DataFrame, roles: PlotRoles) -> None:
    """``variant_annotations`` needs ``variant_fields`` and must name annotations of ``data``."""
    if roles.only is None:
        return
    if not roles.variants:
        raise InvalidRequestError(
            "variant_annotations was given without variant_fields.",
            "Name the parameters to split by in variant_fields.",
        )
    known = list(dict.fromkeys(data["Annotation"].astype(str)))
    unknown = [a for a in roles.only if a not in known]
    if unknown:
        raise InvalidRequestError(
            f"variant_annotations {unknown} are not annotations of this frame.",
            f"Annotations found: {known}.",
        )


def select_metric(df: pd.DataFrame, metric: str | None) -> str:
    """The metric to plot: ``metric`` if the frame has it, else the frame's only metric."""
    found = [str(m) for m in dict.fromkeys(df["Metric"])]
    if metric is None:
        if len(found) == 1:
            return found[0]
        if not found:
            raise InvalidRequestError("The frame holds no metric rows.", "Profile something first.")
        raise InvalidRequestError(
            f"The frame holds {len(found)} metrics and no metric was chosen to plot. "
            f"The metrics found are: {found}",
            "Pass metric=<one of them>.",
        )
    if metric not in found:
        raise InvalidRequestError(
            f"Metric {metric!r} is not in the frame. The metrics found are: {found}",
            "Pass one of the metrics found (names are exact, with the rollup suffix).",
        )
    return metric


# --- each check --------------------------------------------------------------------------


def _field_list(option: str, value: Sequence[str] | None) -> list[str]:
    # A bare string would otherwise be iterated as its characters.
    if isinstance(value, str):
        raise InvalidRequestError(
            f"{option} must be a list of names, not the string {value!r}.",
            f"Write {option}=[{value!r}].",
        )
    names = list(value or [])
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise InvalidRequestError(f"{option} must hold strings; got {bad!r}.")
    return names


def _check_values(
    filename: str, show_aggregate: str | None, plot_type: str, width: int, height: int
) -> None:
    # Re-checked at runtime: callers (MCP tools, notebooks) do not go through a type checker.
    if plot_type not in PLOT_TYPES:
        raise InvalidRequestError(
            f"plot_type must be one of {list(PLOT_TYPES)}; got {plot_type!r}.",
            "Use 'line' or 'bar'.",
        )
    if show_aggregate is not None and show_aggregate not in AGGREGATES:
        raise InvalidRequestError(
            f"show_aggregate must be None, 'avg' or 'geomean'; got {show_aggregate!r}."
        )
    for name, size in (("plot_width", width), ("plot_height", height)):
        if isinstance(size, bool) or not isinstance(size, (int, float)) or not size > 0:
            raise InvalidRequestError(f"{name} must be a positive number of inches; got {size!r}.")
    if not isinstance(filename, str) or not filename:
        raise InvalidRequestError(f"filename must be a non-empty path; got {filename!r}.")


def _check_frame(df: pd.DataFrame, param_names: list[str]) -> None:
    if not isinstance(df, pd.DataFrame):
        raise InvalidRequestError(f"Expected a pandas DataFrame; got {type(df).__name__}.")
    missing = [c for c in (*REQUIRED_COLUMNS, *param_names) if c not in df.columns]
    if missing:
        raise InvalidRequestError(
            f"The frame lacks columns {missing}.",
            f"Columns present: {list(df.columns)}; param_names must name parameter columns.",
        )


def _check_roles(param_names: list[str], roles: dict[str, list[str]]) -> None:
    """Each named field must be a parameter and play at most one role."""
    seen: dict[str, str] = {}
    for option, names in roles.items():
        for name in names:
            if name not in param_names:
                raise InvalidRequestError(
                    f"{option}: {name!r} is not a parameter of the profiled function.",
                    f"Parameters: {param_names}.",
                )
            if name in seen:
                raise InvalidRequestError(
                    f"{name!r} appears in both {seen[name]} and {option}; "
                    "a parameter can be a panel, a variant or an x key, only one of them."
                )
            seen[name] = option
