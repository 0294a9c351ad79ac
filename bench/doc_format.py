"""Markdown pieces for docs/BENCHMARKS.md: tables, numbers, a step's outcome."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any


def cell(value: Any) -> str:
    """One table cell: None as a dash, floats to 3 significant figures, no newlines or pipes."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return " ".join(str(value).split()).replace("|", "\\|")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def seconds(value: Any) -> str:
    return "-" if value is None else f"{float(value):.3g} s"


def us(ns: Any) -> str:
    """Nanoseconds as microseconds (or milliseconds from 1 ms)."""
    if ns is None:
        return "-"
    value = float(ns)
    return f"{value / 1e6:.4g} ms" if value >= 1e6 else f"{value / 1e3:.4g} us"


def median(values: Any) -> float | None:
    """The median of the numbers in ``values`` (NaN, None and non-numbers left out)."""
    found = [float(v) for v in values or [] if isinstance(v, int | float) and v == v]
    return statistics.median(found) if found else None


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def outcome(run: dict[str, Any] | None) -> str:
    """How a step ended: its exit code and seconds, or that it was cut at its limit."""
    if not run:
        return "not run"
    took = f"{run.get('seconds')} s"
    limit = f" (limit {run['limit_s']:.0f} s)" if run.get("limit_s") else ""
    if run.get("rc") == 124:
        return f"cut at its limit after {took}{limit}"
    return f"exit {run.get('rc')} in {took}{limit}"


def step_line(name: str, found: dict[str, Any]) -> str:
    """A wrapped script's step: how it ran, and whether it left figures."""
    figures = "" if found.get("results") is not None else "; it wrote no figures"
    return f"Step `{name}`: {outcome(found.get('run'))}{figures}."
