"""The runs folder as a table: per run its date, source, method, status and verdict, so a
person finds the run they mean without opening each one."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from nsight_agent.errors import NsightAgentError
from nsight_agent.judge.comparison import compare_run
from nsight_agent.judge.run import RunLike, variant_names

SOURCE_CHARS = 40


class RunRow(BaseModel):
    """One kept run, as ``nsight-agent runs`` lists it."""

    run_id: str
    date: str | None = None
    source: str | None = None
    method: str | None = None
    status: str
    verdict: str | None = None


def run_row(run_id: str, status: Mapping[str, Any], run: RunLike | None) -> RunRow:
    """``run_id``'s row from its ``status.json`` and, where it loads, the run itself."""
    state = str(status.get("status") or "passed")
    stage = status.get("stage")
    shown = state if state == "passed" or not stage else f"{state} at {stage}"
    return RunRow(
        run_id=run_id,
        date=_date(run_id, status),
        source=_source(status, run),
        method=_method(status, run),
        status=shown,
        verdict=verdict_of(run) if run is not None and state == "passed" else None,
    )


def _date(run_id: str, status: Mapping[str, Any]) -> str | None:
    """When the run started (local time), else the date its id was made with."""
    started = status.get("started")
    if isinstance(started, int | float):
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(started))
    day, _, clock = run_id.partition("-")
    if len(day) == 8 and day.isdigit() and clock[:4].isdigit():
        return f"{day[:4]}-{day[4:6]}-{day[6:]} {clock[:2]}:{clock[2:4]}"
    return None


def _source(status: Mapping[str, Any], run: RunLike | None) -> str | None:
    """The file the command line profiled, else the kernels the run saw (an MCP call sends
    source text, which has no name)."""
    named = status.get("source")
    if isinstance(named, str) and named:
        return named
    if run is None:
        return None
    kernels = list(dict.fromkeys(k for names in run.kernels.values() for k in names))
    text = ", ".join(kernels)
    return text[: SOURCE_CHARS - 3] + "..." if len(text) > SOURCE_CHARS else text or None


def _method(status: Mapping[str, Any], run: RunLike | None) -> str | None:
    """ncu, or timing with its timer; from the stages it went through where it did not load."""
    if run is not None and run.facts.method is not None:
        return f"timing ({run.facts.method})"
    stages = status.get("stage_seconds") or {}
    if "timing" in stages:
        return "timing"
    if run is not None or "ncu" in stages:
        return "ncu"
    return None


def verdict_of(run: RunLike) -> str | None:
    """A comparison's verdict per candidate ("new faster"); a run of one variant: whether its
    outputs checked and its measurements were stable."""
    frame = run.processed
    if frame.empty:
        return None
    if len(variant_names(frame)) > 1 or run.dropped:
        try:
            compared = compare_run(run)
        except NsightAgentError:
            return None
        said = [f"{n} {o.verdict}" for n, o in compared.overall.items() if o.verdict != "baseline"]
        return ", ".join(said) or None
    wrong = [c for c in run.checks if not c.ok]
    if wrong:
        return "wrong output"
    stable = [bool(s) for s in frame.get("StableMeasurement", [])]
    unstable = stable.count(False)
    return f"unstable ({unstable} of {len(stable)})" if unstable else "stable"


COLUMNS = ("run id", "date", "source", "method", "status", "verdict")


def cells(row: RunRow) -> list[str]:
    values = (row.run_id, row.date, row.source, row.method, row.status, row.verdict)
    return [v or "-" for v in values]


def render_runs(rows: Sequence[RunRow]) -> str:
    """The rows as plain aligned columns under a header, the run id first (``awk '{print
    $1}'`` still lists the ids)."""
    table = [list(COLUMNS), *(cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in table)
