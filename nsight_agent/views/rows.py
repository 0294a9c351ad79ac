"""A run's processed or raw frame (nsight-python columns) as rows of plain JSON, paged."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from nsight_agent.errors import InvalidRequestError
from nsight_agent.judge.run import RunLike
from nsight_agent.numbers import scalar, sig
from nsight_agent.views.common import Page, page


class RowsPage(BaseModel):
    """Rows of a run's processed or raw frame (nsight-python columns), paged."""

    run_id: str
    table: Literal["processed", "raw"]
    columns: list[str]
    rows: list[list[Any]]
    page: Page


def rows_page(
    run: RunLike,
    table: Literal["processed", "raw"] = "processed",
    *,
    metric: str | None = None,
    offset: int = 0,
    limit: int = 50,
) -> RowsPage:
    frame = run.processed if table == "processed" else run.raw
    if table == "raw" and frame.empty and run.facts.method:
        raise InvalidRequestError(
            f"Run {run.run_id} was timed ({run.facts.method}), and a timed run keeps no raw "
            "rows (those are one per ncu run): its samples are summarised per variant and config.",
            f"get_run_rows(run_id={run.run_id!r}, table='processed') gives those rows.",
        )
    if metric is not None:
        known = list(dict.fromkeys(frame["Metric"])) if "Metric" in frame else []
        if metric not in known:
            raise InvalidRequestError(
                f"Metric {metric!r} is not in run {run.run_id}'s {table} rows.",
                f"Metrics there: {', '.join(map(str, known)) or 'none'}.",
            )
        frame = frame[frame["Metric"] == metric]
    pg = page(
        len(frame),
        offset,
        limit,
        f"get_run_rows(run_id={run.run_id!r}, table={table!r}, offset={{offset}}, limit={{limit}})",
    )
    part = frame.iloc[offset : offset + limit]
    rows = [
        [sig(v, 6) if isinstance(v, float) else scalar(v) for v in rec]
        for rec in part.itertuples(index=False, name=None)
    ]
    return RowsPage(run_id=run.run_id, table=table, columns=list(frame.columns), rows=rows, page=pg)
