"""Derived metrics (nsight-python's ``derive_metric``): a function of one kernel's metric
values and its config's parameters, returning a value or several, each with its unit."""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

DeriveMetric = Callable[..., Any]

__all__ = ["DeriveMetric", "check_derive_signature", "derive", "number"]


def number(value: Any) -> float:
    """A metric value as a float; NaN for one that is not a number."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def check_derive_signature(derive_metric: DeriveMetric, n_metrics: int, n_params: int) -> None:
    params = inspect.signature(derive_metric).parameters.values()
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return
    if len(params) != n_metrics + n_params:
        raise TypeError(
            f"derive_metric takes {len(params)} arguments but is called with {n_metrics} metric "
            f"value(s) followed by the {n_params} config parameter(s): "
            f"define it as f(<one argument per metric>, <one per parameter>)."
        )


def derive(
    derive_metric: DeriveMetric, values: list[float], config: tuple[Any, ...]
) -> list[tuple[str, float, Any]]:
    name = getattr(derive_metric, "__name__", "derived")
    result = derive_metric(*values, *config)
    if isinstance(result, Mapping):
        return [(str(k), *_value_unit(str(k), v)) for k, v in result.items()]
    return [(name, *_value_unit(name, result))]


def _value_unit(name: str, value: Any) -> tuple[float, Any]:
    if isinstance(value, tuple) and len(value) >= 2:
        return number(value[0]), value[1]
    warnings.warn(
        f"Derived metric {name!r} has no unit: return (value, unit) to set one; Unit is NaN.",
        stacklevel=4,
    )
    return number(value), math.nan
