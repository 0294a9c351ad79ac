"""Information collectors: extra columns captured per session, config, run or annotation.

nsight-python 1.1's experimental API with its semantics. A collector is a function marked with
``collect(scope=...)``, an ``InfoCollector(name, callback, scope)`` or a ``(name, callback,
scope)`` tuple, passed to ``analyze.kernel(info_collectors=[...])``. It runs in the profiled
process (where the GPU work runs), outside any measured range:

- ``once``: at the start, with no arguments (driver version, host facts);
- ``config``: once per config, with the config's values (sizes derived from it);
- ``run``: before every run of a config, with the config's values (clocks, temperature);
- ``annotation``: when an annotated range opens, with the range's name then the config.

A collector with a fixed number of positional parameters gets only that many leading values
(``bind_args``, in the engine, which runs the collectors). A collector that raises gives
``None`` for that call, with one ``RuntimeWarning`` per collector. Its column is named after
the collector; numeric columns of the config, run and annotation scopes are aggregated into
``<name>_Avg``, ``_Std``, ``_Min``, ``_Max``.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from nsight_agent.engine.worker import shipping
from nsight_agent.engine.worker.info import Collected, bind_args
from nsight_agent.errors import InvalidRequestError

F = TypeVar("F", bound=Callable[..., Any])
Normalized = tuple[str, Callable[..., Any], str]


class CollectionScope(enum.Enum):
    """When a collector runs: ONCE, per CONFIG, per RUN, or per ANNOTATION entered."""

    ONCE = "once"
    CONFIG = "config"
    RUN = "run"
    ANNOTATION = "annotation"


@dataclass
class InfoCollector:
    """A collector given by parts: its column ``name``, the ``callback`` and its ``scope``."""

    name: str
    callback: Callable[..., Any]
    scope: CollectionScope

    def collect(self, *args: Any) -> Any:
        """Call the callback: no arguments for ONCE, ``args`` for the other scopes."""
        if self.scope == CollectionScope.ONCE:
            return self.callback()
        return self.callback(*args)


# Columns of the result frames: a collector of that name would overwrite real data.
RESERVED_COLUMN_NAMES = frozenset(
    {
        "Annotation", "Value", "Metric", "Kernel", "GPU", "Host", "ComputeClock",
        "MemoryClock", "Unit", "AvgValue", "StdDev", "MinValue", "MaxValue", "NumRuns",
        "CI95_Lower", "CI95_Upper", "RelativeStdDevPct", "StableMeasurement", "Geomean",
        "Normalized", "NormalizationValue", "MedianValue", "P20Value", "P80Value",
    }
)  # fmt: skip


def canonical_scope(scope: Any) -> str:
    """A scope (enum member or its string) as its string; anything else is refused."""
    if isinstance(scope, CollectionScope):
        return scope.value
    try:
        return CollectionScope(scope).value
    except (TypeError, ValueError):
        valid = ", ".join(repr(s.value) for s in CollectionScope)
        raise InvalidRequestError(
            f"Invalid collection scope {scope!r}. Expected one of {valid} or a CollectionScope."
        ) from None


@overload
def collect(_func: F, *, scope: CollectionScope | str) -> F: ...


@overload
def collect(_func: None = None, *, scope: CollectionScope | str) -> Callable[[F], F]: ...


def collect(_func: F | None = None, *, scope: CollectionScope | str) -> F | Callable[[F], F]:
    """Mark a function as an information collector of ``scope``; its name names the column.

    ``@collect(scope=CollectionScope.RUN)`` above a function, or ``collect(fn, scope="run")``.
    """
    value = canonical_scope(scope)

    def mark(func: F) -> F:
        if not callable(func):
            raise TypeError("collect can only decorate a callable")
        func._nsight_collector_scope = value  # type: ignore[attr-defined]
        func._nsight_collector_name = func.__name__  # type: ignore[attr-defined]
        return func

    return mark if _func is None else mark(_func)


def _one(collector: Any) -> Normalized:
    if isinstance(collector, InfoCollector):
        return collector.name, collector.callback, _scope_of(collector.scope, collector.name)
    if isinstance(collector, tuple):
        if len(collector) != 3:
            raise InvalidRequestError(
                f"Tuple-format info collector must be (name, callback, scope); got {collector!r}."
            )
        name, callback, scope = collector
        if not isinstance(name, str) or not callable(callback):
            raise TypeError(
                "Tuple-format info collector must be (str name, callable callback, scope); "
                f"got {collector!r}."
            )
        return name, callback, _scope_of(scope, name)
    if callable(collector):
        if not hasattr(collector, "_nsight_collector_scope"):
            name = getattr(collector, "__name__", repr(collector))
            raise InvalidRequestError(
                f"Collector function {name} is missing @nsight.experimental.collect(scope=...) "
                "decorator",
                "Mark it with @nsight_agent.experimental.collect(scope=...), or pass "
                "(name, callback, scope).",
            )
        name = collector._nsight_collector_name
        return name, collector, _scope_of(collector._nsight_collector_scope, name)
    raise TypeError(
        f"Invalid collector type: {type(collector)}. "
        "Expected tuple (name, callback, scope) or decorated function."
    )


def _scope_of(scope: Any, name: str) -> str:
    if isinstance(scope, CollectionScope):
        return scope.value
    valid = sorted(s.value for s in CollectionScope)
    if isinstance(scope, str) and scope in valid:
        return scope
    raise InvalidRequestError(
        f"Invalid scope {scope!r} for collector {name!r}. "
        f"Expected one of {valid} or a CollectionScope."
    )


def normalize(collectors: Iterable[Any] | None) -> list[Normalized]:
    """Every accepted form as ``(name, callback, scope string)``, in the order given."""
    return [_one(c) for c in collectors or ()]


def validate(collectors: Sequence[Normalized], params: Sequence[str], func_name: str) -> None:
    """Refuse a collector whose column would overwrite another column (nsight-python's checks)."""
    seen: set[str] = set()
    for name, _, _ in collectors:
        if name in seen:
            raise InvalidRequestError(
                f"Duplicate info collector name '{name}'. Each collector must have a unique "
                "name (the function name becomes the column name)."
            )
        seen.add(name)
        if name in RESERVED_COLUMN_NAMES:
            raise InvalidRequestError(
                f"Info collector name '{name}' collides with a reserved profiler column. "
                f"Reserved names: {sorted(RESERVED_COLUMN_NAMES)}."
            )
        if name in params:
            raise InvalidRequestError(
                f"Info collector name '{name}' collides with a parameter of '{func_name}'. "
                "Rename the collector so it does not shadow a function argument column."
            )


def ship(collectors: Sequence[Normalized]) -> bytes | None:
    """The collectors as a payload for the profiled process (by value, as the function goes)."""
    if not collectors:
        return None
    modules = [
        m for _, cb, _ in collectors if isinstance(m := getattr(cb, "__module__", None), str)
    ]
    try:
        return shipping.dumps(list(collectors), modules)
    except Exception as err:
        raise shipping.ShippingError(
            f"The information collectors {[c[0] for c in collectors]} cannot be sent to the "
            f"profiled process: {type(err).__name__}: {err}",
            "Build unpicklable objects (locks, open files, streams) inside the collector.",
        ) from err


def warn_collected(collected: Collected) -> None:
    """nsight-python's warnings for what went wrong in the profiled process: one per failing
    collector, one for values that could not be sent back."""
    for key, error in collected.failures.items():
        scope, _, name = key.partition(":")
        warnings.warn(
            f"Info collector '{name}' ({scope} scope) raised {error}. Its column will be None "
            "for failed runs.",
            RuntimeWarning,
            stacklevel=4,
        )
    if collected.unpicklable:
        detail = "; ".join(f"{n}: {e}" for n, e in collected.unpicklable.items())
        warnings.warn(
            f"Some collected info was not picklable ({detail}); non-picklable collector values "
            "have been replaced with None.",
            RuntimeWarning,
            stacklevel=4,
        )


__all__ = [
    "RESERVED_COLUMN_NAMES",
    "CollectionScope",
    "InfoCollector",
    "bind_args",
    "collect",
    "normalize",
    "ship",
    "validate",
    "warn_collected",
]
