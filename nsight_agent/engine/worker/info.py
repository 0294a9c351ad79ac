"""Information collectors in the profiled process: call each at its scope, keep what it returned
per call, and read that back in the caller.

Collectors arrive as ``(name, callback, scope)`` tuples (``nsight_agent.experimental`` turns
what the user passed into these). The child calls ``once()`` before the first config,
``start_config(values)`` before a config's runs, ``start_run()`` before each run, and the
annotation hook runs the annotation-scope ones as a range opens, before its NVTX ranges start
(a collector's own kernels are never measured). ``end_call(call)`` files one call;
``write(path)`` pickles everything. A collector that raises gives None and is noted once; a
value that cannot be pickled becomes None, noted too. ``Collected.read`` is the caller's side.
"""

from __future__ import annotations

import inspect
import pickle
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsight_agent.annotation import set_enter_hook

SCOPES = ("once", "config", "run", "annotation")
# Scopes whose values depend on nothing the profiled process holds: they run in the caller,
# as nsight-python (profiling in its own process) runs them, so their side effects are seen
# there. Run and annotation scopes run beside the kernels, in the profiled process.
IN_CALLER = ("once", "config")
Collector = tuple[str, Callable[..., Any], str]


def in_profiled(collectors: Sequence[Collector]) -> list[Collector]:
    """The collectors the profiled process runs."""
    return [c for c in collectors if c[2] not in IN_CALLER]


def in_caller(collectors: Sequence[Collector], configs: Sequence[Sequence[Any]]) -> Fixed:
    """Run the once- and config-scope collectors here, in config order, before profiling."""
    runner = Collectors([c for c in collectors if c[2] in IN_CALLER])
    runner.once()
    by_config = []
    for config in configs:
        runner.start_config(config)
        by_config.append(dict(runner.fixed))
    return Fixed(by_config, runner.failures, runner.unpicklable)


@dataclass
class Fixed:
    """Once- and config-scope values, per config index, computed in the caller."""

    by_config: list[dict[str, Any]] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    unpicklable: dict[str, str] = field(default_factory=dict)


def bind_args(
    callback: Callable[..., Any], leading: Sequence[Any], config: Sequence[Any]
) -> list[Any]:
    """The positional arguments for ``callback``: ``leading`` then as many config values as it
    takes (all of them for ``*args``, or for a callable without a signature)."""
    try:
        params = list(inspect.signature(callback).parameters.values())
    except (TypeError, ValueError):
        return [*leading, *config]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return [*leading, *config]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [*leading, *list(config)[: max(0, len(positional) - len(leading))]]


class Collectors:
    """The child's side: runs the collectors and remembers their values call by call."""

    def __init__(self, collectors: Sequence[Collector] = ()) -> None:
        self.by_scope = {s: [(n, cb) for n, cb, sc in collectors if sc == s] for s in SCOPES}
        self.active = bool(collectors)
        self.config: tuple[Any, ...] = ()
        self.fixed: dict[str, Any] = {}  # once + config values
        self.once_values: dict[str, Any] = {}
        self.run_values: dict[str, Any] = {}
        self.annotation_values: dict[str, dict[str, Any]] = {}
        self.calls: list[dict[str, Any]] = []
        self.failures: dict[str, str] = {}  # "scope:name" -> the first error
        self.unpicklable: dict[str, str] = {}
        self.lock = threading.Lock()

    @classmethod
    def load(cls, payload: bytes | None) -> Collectors:
        return cls(pickle.loads(payload) if payload else ())

    def _value(self, name: str, scope: str, callback: Callable[..., Any], args: list[Any]) -> Any:
        try:
            value = callback() if scope == "once" else callback(*args)
        except Exception as err:
            with self.lock:
                self.failures.setdefault(f"{scope}:{name}", f"{type(err).__name__}: {err}")
            return None
        try:
            pickle.dumps(value)
        except Exception as err:
            with self.lock:
                self.unpicklable.setdefault(name, f"{type(err).__name__}: {err}")
            return None
        return value

    def _scope(self, scope: str, leading: Sequence[Any] = ()) -> dict[str, Any]:
        return {
            name: self._value(name, scope, cb, bind_args(cb, leading, self.config))
            for name, cb in self.by_scope[scope]
        }

    def once(self) -> None:
        self.once_values = self._scope("once")
        if self.by_scope["annotation"]:
            set_enter_hook(self.on_annotation)

    def start_config(self, config: Sequence[Any]) -> None:
        self.config = tuple(config)
        self.fixed = {**self.once_values, **self._scope("config")}

    def start_run(self) -> None:
        self.run_values = self._scope("run")
        with self.lock:
            self.annotation_values = {}

    def on_annotation(self, name: str) -> None:
        values = self._scope("annotation", (name,))
        with self.lock:
            self.annotation_values[name] = values

    def end_call(self, call: int) -> None:
        if not self.active:
            return
        with self.lock:
            annotations = dict(self.annotation_values)
        self.calls.append(
            {"call": call, "values": {**self.fixed, **self.run_values}, "annotations": annotations}
        )

    def write(self, path: str | None) -> None:
        if not self.active or not path:
            return
        data = {"calls": self.calls, "failures": self.failures, "unpicklable": self.unpicklable}
        Path(path).write_bytes(pickle.dumps(data))


@dataclass
class Collected:
    """The caller's side: what the collectors returned, looked up by (call, annotation)."""

    names: list[str]
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    unpicklable: dict[str, str] = field(default_factory=dict)

    fixed: Fixed = field(default_factory=Fixed)
    config_of: dict[int, int] = field(default_factory=dict)  # call -> config index

    @classmethod
    def read(
        cls,
        path: Path | None,
        names: Sequence[str],
        fixed: Fixed | None = None,
        manifest: dict[str, Any] | None = None,
    ) -> Collected:
        """The child's file (none: the child died first, or ran no collector) and the values
        ``fixed`` in the caller, tied to calls by the manifest's config index."""
        fixed = fixed or Fixed()
        config_of = {int(c["call"]): int(c["config"]) for c in (manifest or {}).get("calls", ())}
        data = pickle.loads(path.read_bytes()) if path is not None and path.exists() else {}
        calls = {int(c["call"]): c for c in data.get("calls", ())}
        failures = {**fixed.failures, **data.get("failures", {})}
        unpicklable = {**fixed.unpicklable, **data.get("unpicklable", {})}
        return cls(list(names), calls, failures, unpicklable, fixed, config_of)

    def columns(self, call: int, annotation_name: str) -> dict[str, Any]:
        """One value per collector for a call's annotation; None where none was collected."""
        config = self.config_of.get(call)
        found = self.calls.get(call, {"values": {}, "annotations": {}})
        known = config is not None and config < len(self.fixed.by_config)
        values = dict(self.fixed.by_config[config]) if known and config is not None else {}
        values.update(found["values"])
        values.update(found["annotations"].get(annotation_name, {}))
        return {n: values.get(n) for n in self.names}
