"""Matplotlib rendering of a processed profiling frame: the renderer behind ``analyze.plot``.

The input frame has nsight-python's processed columns (``Annotation``, ``Metric``, one column per
parameter of the profiled function, ``AvgValue``, ``StdDev``, ..., ``Normalized``, ``Geomean``).
One metric is drawn: one line (or bar group) per annotation, or per annotation and variant, over
the parameters not used as panels, in a grid of panels.

The figure is built on a bare ``Figure`` with an Agg canvas rather than through ``pyplot``: nothing
is registered in pyplot's global figure list (so repeated calls leak nothing and there is nothing
to close), no display is needed, and the caller's own backend choice is left alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from nsight_agent.views.plot_options import check_annotations, checked_options, select_metric

# Internal column names of the plotted table; the dunder keeps them clear of parameter names.
_LINE = "__line"
_X = "__x"


def plot_dataframe(
    df: pd.DataFrame,
    param_names: list[str],
    *,
    filename: str = "plot.png",
    metric: str | None = None,
    title: str = "",
    ylabel: str | None = None,
    annotate_points: bool = False,
    show_aggregate: str | None = None,
    plot_type: str = "line",
    plot_width: int = 6,
    plot_height: int = 4,
    row_panels: list[str] | None = None,
    col_panels: list[str] | None = None,
    x_keys: list[str] | None = None,
    print_data: bool = False,
    variant_fields: list[str] | None = None,
    variant_annotations: list[str] | None = None,
    plot_callback: Callable[[Any], None] | None = None,
) -> Any:
    """Plot one metric of a processed frame, save it to ``filename`` and return the Figure.

    Args:
        df: processed frame (nsight-python column names).
        param_names: the profiled function's parameter names, in signature order.
        filename: where the image goes (PNG unless the extension names another format).
        metric: the ``Metric`` to plot; may be left out when the frame holds only one.
        title: main title; the GPU and host are added below it.
        ylabel: y-axis label; default ``"<metric> (<unit>)"``, or ``"Normalized <metric>"``.
        annotate_points: write each point's value beside it.
        show_aggregate: ``None``, ``"avg"`` or ``"geomean"``: an extra x slot after a dashed
            separator with one bar per line holding that line's aggregate.
        plot_type: ``"line"`` (with StdDev error bars) or ``"bar"`` (grouped, with error bars).
        plot_width, plot_height: size of one panel in inches.
        row_panels, col_panels: parameters whose distinct values become rows / columns of panels.
        x_keys: parameters on the x axis (default: every parameter not used as panel or variant);
            several are joined into one tick label.
        print_data: print the plotted table to stdout.
        variant_fields: parameters whose distinct values split an annotation into several lines.
        variant_annotations: split only these annotations (default: all of them).
        plot_callback: called with the Figure before it is saved.

    Points of one line on the same x tick (a parameter left off the x axis, an annotation not
    split by ``variant_annotations``) are merged: their mean is plotted, their spread pools the
    per-point StdDev with the spread of the merged means. Raises ``InvalidRequestError`` (a
    ValueError) for a bad option value or a frame that does not fit it.
    """
    roles = checked_options(
        df,
        param_names,
        filename=filename,
        show_aggregate=show_aggregate,
        plot_type=plot_type,
        plot_width=plot_width,
        plot_height=plot_height,
        row_panels=row_panels,
        col_panels=col_panels,
        variant_fields=variant_fields,
        x_keys=x_keys,
        variant_annotations=variant_annotations,
    )
    metric = select_metric(df, metric)
    data = df[df["Metric"] == metric]
    check_annotations(data, roles)
    used = {*roles.rows, *roles.cols, *roles.variants}
    x_fields = roles.x_keys or [p for p in param_names if p not in used]
    normalized_against = _normalized_against(data)
    panels = roles.rows + roles.cols
    table = _plot_table(
        data, x_fields, panels, roles.variants, roles.only, normalized_against is not None
    )
    fig = _figure(
        table,
        roles.rows,
        roles.cols,
        x_fields,
        ylabel or _ylabel(data, metric, normalized_against),
        # Whole-annotation lines over one panel can reuse the frame's Geomean column; a panel
        # or a variant covers only part of an annotation, so its geomean is recomputed.
        {} if panels or roles.variants else _column_geomeans(data),
        _PanelStyle(plot_type, show_aggregate, annotate_points, plot_width, plot_height),
        _suptitle(title, data, normalized_against),
    )
    if print_data:
        _print_table(table, metric, x_fields)
    if plot_callback is not None:
        plot_callback(fig)
    fig.savefig(filename, dpi=100)
    return fig


# --- drawing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PanelStyle:
    plot_type: str
    show_aggregate: str | None
    annotate_points: bool
    width: int
    height: int


def _ylabel(data: pd.DataFrame, metric: str, normalized_against: str | None) -> str:
    if normalized_against is not None:
        return f"Normalized {metric}"
    unit = _first_text(data, "Unit")
    return f"{metric} ({unit})" if unit else metric


def _figure(
    table: pd.DataFrame,
    rows: list[str],
    cols: list[str],
    x_fields: list[str],
    ylabel: str,
    column_geomeans: dict[str, float],
    style: _PanelStyle,
    suptitle: str,
) -> Any:
    """One panel per (row, column) combination, every line in every panel."""
    panels = rows + cols
    lines = list(dict.fromkeys(table[_LINE]))
    ticks = list(dict.fromkeys(table[_X]))
    row_combos, col_combos = _combos(table, rows), _combos(table, cols)
    nrows, ncols = len(row_combos), len(col_combos)
    fig = Figure(figsize=(style.width * ncols, style.height * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    # Every panel uses the same global ticks, so a shared x axis lines the columns up.
    axes = fig.subplots(nrows, ncols, sharex=True, squeeze=False)
    colors = _colors(lines)
    for r, row_combo in enumerate(row_combos):
        for c, col_combo in enumerate(col_combos):
            ax = axes[r, c]
            combo = row_combo + col_combo
            panel = table[_match(table, panels, combo)]
            _draw_panel(
                ax,
                panel,
                lines,
                ticks,
                colors,
                style.plot_type,
                style.show_aggregate,
                style.annotate_points,
                column_geomeans,
            )
            if panels:
                ax.set_title(
                    ", ".join(f"{f}={v}" for f, v in zip(panels, combo, strict=True)), fontsize=10
                )
            if c == 0:
                ax.set_ylabel(ylabel)
            if r == nrows - 1 and x_fields:
                ax.set_xlabel(", ".join(x_fields))
    if suptitle:
        fig.suptitle(suptitle, fontsize=12)
    return fig


# --- data preparation ---------------------------------------------------------------------


def _plot_table(
    data: pd.DataFrame,
    x_fields: list[str],
    panels: list[str],
    variants: list[str],
    only: list[str] | None,
    normalized: bool,
) -> pd.DataFrame:
    """One row per (line, panel, x tick): AvgValue, pooled StdDev, NumRuns, Points."""
    frame = pd.DataFrame(index=data.index)
    # Row tuples are built by position: a frame with no variant columns yields no rows
    # from itertuples, so an empty tuple stands in for each row then.
    rows = list(data[variants].itertuples(index=False, name=None)) if variants else [()] * len(data)
    frame[_LINE] = [
        _line_label(ann, row, variants, only)
        for ann, row in zip(data["Annotation"].astype(str), rows, strict=True)
    ]
    for field in panels:
        frame[field] = data[field]
    frame[_X] = data[x_fields].astype(str).agg(", ".join, axis=1) if x_fields else ""
    frame["AvgValue"] = pd.to_numeric(data["AvgValue"], errors="coerce")
    if normalized and "RelativeStdDevPct" in data.columns:
        # Normalisation divides AvgValue but may leave StdDev in raw units; the relative spread
        # is unit-free, so it scales onto the normalised value either way.
        spread = pd.to_numeric(data["RelativeStdDevPct"], errors="coerce") / 100 * data["AvgValue"]
    else:
        spread = data["StdDev"] if "StdDev" in data.columns else 0.0
    frame["_sq"] = pd.to_numeric(spread, errors="coerce").fillna(0.0) ** 2
    frame["NumRuns"] = data["NumRuns"] if "NumRuns" in data.columns else 1

    grouped = frame.groupby([_LINE, *panels, _X], sort=False, dropna=False)
    table = grouped.agg(
        AvgValue=("AvgValue", "mean"),
        _sq=("_sq", "mean"),
        _between=("AvgValue", lambda v: v.var(ddof=0)),
        NumRuns=("NumRuns", "sum"),
        Points=("AvgValue", "size"),
    ).reset_index()
    # Pooled spread of the merged points: within-point variance plus variance of their means.
    table["StdDev"] = np.sqrt(table["_sq"] + table["_between"].fillna(0.0))
    # Order rows by line, then panel, then x tick, each in order of first appearance.
    ranks = pd.DataFrame({k: pd.factorize(table[k])[0] for k in [_LINE, *panels, _X]})
    order = ranks.sort_values(list(ranks.columns), kind="stable").index
    return table.drop(columns=["_sq", "_between"]).loc[order].reset_index(drop=True)


def _line_label(annotation: str, values: tuple[Any, ...], variants: list[str], only: Any) -> str:
    if not variants or (only is not None and annotation not in only):
        return annotation
    return f"{annotation} ({', '.join(f'{f}={v}' for f, v in zip(variants, values, strict=True))})"


def _combos(table: pd.DataFrame, fields: list[str]) -> list[tuple[Any, ...]]:
    """Distinct value tuples of ``fields`` in order of appearance; one empty tuple if none."""
    if not fields:
        return [()]
    return list(table[fields].drop_duplicates().itertuples(index=False, name=None))


def _match(table: pd.DataFrame, fields: list[str], values: tuple[Any, ...]) -> Any:
    mask = pd.Series(True, index=table.index)
    for field, value in zip(fields, values, strict=True):
        mask &= table[field] == value
    return mask


def _normalized_against(data: pd.DataFrame) -> str | None:
    """The annotation the values were normalised against, or None (``Normalized`` is False)."""
    if "Normalized" not in data.columns:
        return None
    for value in dict.fromkeys(data["Normalized"]):
        # False may arrive as a bool, a numpy bool or, after a CSV round trip, the text "False".
        if isinstance(value, str) and value.strip() and value.strip().lower() != "false":
            return value
    return None


def _first_text(data: pd.DataFrame, column: str) -> str:
    if column not in data.columns:
        return ""
    for value in data[column]:
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def _column_geomeans(data: pd.DataFrame) -> dict[str, float]:
    if "Geomean" not in data.columns:
        return {}
    values = pd.to_numeric(data["Geomean"], errors="coerce")
    firsts = values.groupby(data["Annotation"].astype(str), sort=False).first()
    return {str(k): float(v) for k, v in firsts.items() if math.isfinite(v)}


def _geomean(values: np.ndarray[Any, Any]) -> float:
    positive = values[np.isfinite(values) & (values > 0)]
    return float(np.exp(np.log(positive).mean())) if positive.size else math.nan


# --- drawing ------------------------------------------------------------------------------


def _colors(lines: list[str]) -> dict[str, Any]:
    # Fixed per label so an annotation has the same colour in every panel.
    cmap = colormaps["tab10" if len(lines) <= 10 else "tab20"]
    return {label: cmap(i % cmap.N) for i, label in enumerate(lines)}


def _format_value(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _draw_panel(
    ax: Any,
    panel: pd.DataFrame,
    lines: list[str],
    ticks: list[str],
    colors: dict[str, Any],
    plot_type: str,
    show_aggregate: str | None,
    annotate_points: bool,
    column_geomeans: dict[str, float],
) -> None:
    position = {tick: i for i, tick in enumerate(ticks)}
    width = 0.8 / len(lines)
    aggregate_x = len(ticks)  # the aggregate slot sits right of the last tick
    for i, label in enumerate(lines):
        points = panel[panel[_LINE] == label]
        if points.empty:
            continue
        points = points.assign(_pos=points[_X].map(position)).sort_values("_pos")
        x = points["_pos"].to_numpy(dtype=float)
        y = points["AvgValue"].to_numpy(dtype=float)
        err = points["StdDev"].to_numpy(dtype=float)
        yerr = err if np.nan_to_num(err).any() else None
        color = colors[label]
        offset = (i - (len(lines) - 1) / 2) * width
        if plot_type == "bar":
            x = x + offset
            ax.bar(x, y, width, yerr=yerr, color=color, label=label, capsize=2)
        else:
            ax.errorbar(x, y, yerr=yerr, marker="o", color=color, label=label, capsize=3)
        if annotate_points:
            for xi, yi in zip(x, y, strict=True):
                if math.isfinite(yi):
                    ax.annotate(
                        _format_value(yi),
                        (xi, yi),
                        textcoords="offset points",
                        xytext=(0, 5),
                        ha="center",
                        fontsize=7,
                        color=color,
                    )
        if show_aggregate is not None:
            if show_aggregate == "avg":
                value = float(np.nanmean(y)) if np.isfinite(y).any() else math.nan
            else:
                value = column_geomeans.get(label, math.nan)
                if not math.isfinite(value):
                    value = _geomean(y)
            if math.isfinite(value):
                ax.bar(aggregate_x + offset, value, width, color=color)
                ax.annotate(
                    _format_value(value),
                    (aggregate_x + offset, value),
                    textcoords="offset points",
                    xytext=(0, 3),
                    ha="center",
                    fontsize=8,
                    fontweight="bold",
                    color=color,
                )

    labels = list(ticks)
    if show_aggregate is not None:
        ax.axvline(aggregate_x - 0.5, color="black", linestyle="--", linewidth=1)
        labels.append("Avg" if show_aggregate == "avg" else "Geomean")
    crowded = len(labels) > 6 or max(len(t) for t in labels) > 8
    ax.set_xticks(
        range(len(labels)),
        labels,
        rotation=45 if crowded else 0,
        ha="right" if crowded else "center",
        fontsize=9,
    )
    values = panel["AvgValue"].to_numpy(dtype=float)
    if np.isfinite(values).any() and np.nanmin(values) >= 0:
        ax.set_ylim(bottom=0)  # metrics are counts, times and ratios: anchor them at zero
    ax.grid(True, linestyle="--", alpha=0.5)
    ax.set_axisbelow(True)
    if ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize=8)


def _suptitle(title: str, data: pd.DataFrame, normalized_against: str | None) -> str:
    hardware = [
        str(v)
        for column in ("GPU", "Host")
        if column in data.columns
        for v in dict.fromkeys(data[column].dropna())
    ]
    details = ", ".join(hardware)
    if normalized_against is not None:
        details = (
            f"{details}; relative to {normalized_against}"
            if details
            else (f"relative to {normalized_against}")
        )
    return "\n".join(part for part in (title, details) if part)


def _print_table(table: pd.DataFrame, metric: str, x_fields: list[str]) -> None:
    shown = table.rename(columns={_LINE: "Line", _X: ", ".join(x_fields) or "x"})
    print(f"Plotted data for {metric}:")
    print(shown.to_string(index=False))
