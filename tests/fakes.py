"""Stand-ins shared by the diagnose tests (a support module, not a test file)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class FakeMetric:
    def __init__(self, value: object) -> None:
        self._value = value

    def value(self) -> object:
        return self._value


class FakeAction:
    """Stands in for ncu_report.IAction: a name, metric values and rule results."""

    def __init__(
        self,
        metrics: Mapping[str, object],
        rules: list[dict[str, Any]] | None = None,
        name: str = "k",
    ) -> None:
        self.metrics = dict(metrics)
        self.rules = rules or []
        self._name = name

    def name(self) -> str:
        return self._name

    def metric_names(self) -> Iterable[str]:
        return tuple(self.metrics)

    def __getitem__(self, name: str) -> FakeMetric:
        return FakeMetric(self.metrics[name])

    def rule_results_as_dicts(self) -> list[dict[str, Any]]:
        return self.rules


class FakeSlot:
    """A GPU slot's pool of pre-launched targets as the collect stage asks it
    (``attach.TargetSource``): one ``ready`` or not (``why``: why none), handing out
    ``target`` once (None: none ever); it counts its takes and keeps why it was turned off."""

    def __init__(
        self,
        ready: bool = True,
        target: object | None = None,
        why: str = "no pre-launched target ready yet (one is starting)",
    ) -> None:
        self.ready, self.target, self.why = ready, target, why
        self.taken = 0
        self.turned_off: list[str] = []

    def take(self) -> Any:
        self.taken += 1
        target, self.target = self.target, None
        return target

    def any_ready(self) -> bool:
        return self.ready

    def why_none(self) -> str:
        return self.why

    def turn_off(self, why: str) -> None:
        self.turned_off.append(why)
