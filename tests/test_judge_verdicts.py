"""The compare verdicts, table-driven: per config (95% intervals) and per variant (overall)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from nsight_agent.judge.verdicts import config_verdict, variant_overall


def stats(mean: float, half_width: float | None, n: int = 10) -> dict[str, Any]:
    """A processed row: mean time and its 95% interval (None: fewer than 2 runs)."""
    lo = None if half_width is None else mean - half_width
    hi = None if half_width is None else mean + half_width
    return {"AvgValue": mean, "CI95_Lower": lo, "CI95_Upper": hi, "NumRuns": n}


@pytest.mark.parametrize(
    ("variant", "baseline", "expected"),
    [
        (stats(80, 2), stats(100, 2), "faster"),  # intervals apart, variant lower
        (stats(120, 2), stats(100, 2), "slower"),
        (stats(99, 2), stats(100, 2), "within_noise"),  # intervals overlap
        (stats(97, 1.5), stats(100, 1.5), "within_noise"),  # touching at 98.5 counts as overlap
        (stats(80, None, n=1), stats(100, 2), "within_noise"),  # n < 2: no interval
        (stats(math.nan, 2), stats(100, 2), "no_data"),
        ({}, stats(100, 2), "no_data"),
    ],
)
def test_config_verdict(variant: dict[str, Any], baseline: dict[str, Any], expected: str) -> None:
    assert config_verdict(variant, baseline) == expected


@pytest.mark.parametrize(
    ("is_base", "verdicts", "speedups", "expected", "geomean"),
    [
        (True, ["baseline"] * 3, [1.0, 1.0, 1.0], "baseline", None),
        (False, ["faster"] * 3, [2.0, 2.0, 8.0], "faster", 3.1748),
        (False, ["slower", "slower"], [0.5, 0.5], "slower", 0.5),
        (False, ["faster", "slower"], [2.0, 0.5], "mixed", 1.0),
        (False, ["faster", "within_noise"], [1.5, 1.0], "mixed", 1.2247),
        (False, ["within_noise"] * 2, [1.01, 0.99], "within_noise", 0.99995),
        (False, ["faster", "incorrect"], [2.0, 2.0], "incorrect", None),  # never faster
        (False, ["no_data"], [], "no_data", None),
    ],
)
def test_overall_verdict(
    is_base: bool, verdicts: list[Any], speedups: list[float], expected: str, geomean: float | None
) -> None:
    out = variant_overall(is_base, verdicts, speedups)
    assert out.verdict == expected
    if geomean is None:
        assert out.geomean_speedup is None
    else:
        assert out.geomean_speedup == pytest.approx(geomean, rel=1e-3)
    assert out.configs_faster == verdicts.count("faster")
