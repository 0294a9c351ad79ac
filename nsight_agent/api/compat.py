"""nsight-python 1.x names and warnings, so its scripts port with one import line.

``VerbosityLevel`` (an ``IntEnum`` as in nsight-python: SILENT < INFO < DEBUG) maps to our
verbosity strings; ``row_panel``/``col_panel`` are the marker classes nsight-python exports;
the derived-metric unit warning, the ignored-return-value warning and the unknown-metric
message use its wording.
"""

from __future__ import annotations

import enum
import functools
import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Literal

from nsight_agent.errors import InvalidRequestError, UnknownMetricError

Verbosity = Literal["quiet", "progress", "verbose"]

DERIVED_METRIC_MISSING_UNIT_WARNING = (
    "Derived metric '{}' does not have a unit specified. Return a tuple (value, unit) instead "
    "of just the value. np.nan will be added to the 'Unit' column in the dataframe."
)


class VerbosityLevel(enum.IntEnum):
    """nsight-python's verbosity: SILENT is ``"quiet"``, INFO ``"progress"``, DEBUG ``"verbose"``."""

    SILENT = 0
    INFO = 3
    DEBUG = 4


class row_panel:
    """Exported for import compatibility; ``analyze.plot(row_panels=[...])`` is the option."""


class col_panel:
    """Exported for import compatibility; ``analyze.plot(col_panels=[...])`` is the option."""


def as_verbosity(value: Any) -> Any:
    """A ``VerbosityLevel`` (or its int) as our string; anything else unchanged (checked later)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return value
    if value >= VerbosityLevel.DEBUG:
        return "verbose"
    return "progress" if value >= VerbosityLevel.INFO else "quiet"


def with_unit_warnings(derive_metric: Callable[..., Any]) -> Callable[..., Any]:
    """``derive_metric`` returning ``(value, nan)`` for a bare value, with nsight-python's
    warning (once per metric name and call of the profiled function)."""
    warned: set[str] = set()

    def warn(name: str) -> None:
        if name not in warned:
            warned.add(name)
            warnings.warn(DERIVED_METRIC_MISSING_UNIT_WARNING.format(name), UserWarning, 2)

    @functools.wraps(derive_metric)
    def derived(*args: Any) -> Any:
        result = derive_metric(*args)
        if isinstance(result, Mapping):
            out = {}
            for key, value in result.items():
                if not (isinstance(value, tuple) and len(value) >= 2):
                    warn(str(key))
                    value = (value, math.nan)
                out[key] = value
            return out
        if isinstance(result, tuple) and len(result) >= 2:
            return result
        warn(getattr(derive_metric, "__name__", "derived"))
        return (result, math.nan)

    return derived


def warn_if_returned(name: str, manifest: Mapping[str, Any]) -> None:
    """nsight-python's RuntimeWarning when the profiled function returns a value."""
    if any(call.get("returned") for call in manifest.get("calls", ())):
        warnings.warn(
            f"Function '{name}' returns a value, but the return value for a function which is "
            "decorated with nsight.analyze.kernel is ignored and instead the ProfileResults "
            "object is returned.",
            RuntimeWarning,
            stacklevel=4,
        )


def check_plot_metric(found: list[str], metric: str | None) -> None:
    """``analyze.plot`` draws one metric: nsight-python's messages when none or a wrong one is
    chosen (raised after profiling, as there; the results stay in the report)."""
    if metric is None and len(found) > 1:
        raise InvalidRequestError(
            f"Cannot visualize multiple metrics ({len(found)} > 1) with the @nsight.analyze.plot "
            f"decorator. The metrics found are: {found}",
            "Pass metric=<one of them> to analyze.plot.",
        )
    if metric is not None and metric not in found:
        raise InvalidRequestError(
            f"Metric {metric!r} not found in the profile results. The metrics found are: {found}",
            "Pass one of the metrics found (names are exact, with the rollup suffix).",
        )


def as_metrics_error(err: UnknownMetricError) -> UnknownMetricError:
    """An unknown metric with nsight-python's sentence first (its users match on it), ours after."""
    first = f"Invalid value {[err.metric]} for 'metrics' parameter for nsight.analyze.kernel()."
    if err.message.startswith(first):
        return err
    return UnknownMetricError(err.metric, err.suggestions, f"{first} {err.message}")
