"""Numbers as answers carry them: a few significant digits, and config values as plain JSON.

Shared by the judge (its verdicts read rounded times) and the views (their answers show them),
so both read a number the same way.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any


def sig(value: Any, digits: int = 4) -> float | None:
    """A finite number rounded to ``digits`` significant digits; None for NaN/inf/non-numbers."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number):
        return None
    return float(f"{number:.{digits}g}")


def scalar(value: Any) -> Any:
    """A config value as plain JSON (numpy scalars -> Python, dtypes -> their name)."""
    item = getattr(value, "item", None)
    if callable(item):
        with contextlib.suppress(TypeError, ValueError):
            value = item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def time_text(value: float | None, unit: str | None) -> str:
    """A time as people read it: "1.176 ms", "493.4 us" from ns; other units as they are."""
    if value is None:
        return "-"
    if unit == "ns":
        for scale, name in ((1e6, "ms"), (1e3, "us")):
            if abs(value) >= scale:
                return f"{value / scale:.4g} {name}"
    return f"{value:.4g} {unit or ''}".strip()
