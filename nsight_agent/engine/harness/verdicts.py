"""One judgement of a call's outputs, for both methods: the harness program (the ncu path
and every pre-flight) and the warm timing loop call the same ``judge`` through ``Verdicts``,
so one output gets one verdict and one message whichever path measures it.

The rule, per call of every variant on inputs of one seed:
- the baseline's outputs must be tensors (or a tuple/list/dict of them), all finite
  (``checks.check_single``); otherwise nothing can be compared with them, and the request
  fails at stage ``check`` with that check's message;
- every other variant's outputs must equal the baseline's (``checks.compare``: structure,
  shape, dtype, NaN/Inf, values) and share no memory with another variant's inputs or
  outputs (``alias``). A candidate whose outputs cannot be compared at all (structure,
  shape, dtype, alias) is dropped as ``incorrect`` and not measured further; one with wrong
  values is measured and flagged (``OutputOK`` false): either way it is ``incorrect`` and
  never gets a speedup.
A variant keeps its first failure per config; a later call's failure names that call
("run 2, on new inputs: ...").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nsight_agent.engine.harness import checks, runtime
from nsight_agent.engine.harness.checks import CheckOutcome
from nsight_agent.engine.harness.errors import SourceError

ALIAS = "outputs share memory with another variant's tensors"


@dataclass(frozen=True)
class Tolerance:
    """The request's bounds: ``rtol``/``atol`` (None: ours by dtype), and a table of
    (rtol, atol) by dtype name that wins for the dtypes it names (correctness="kernelbench")."""

    rtol: float | None = None
    atol: float | None = None
    table: Mapping[str, tuple[float, float]] | None = None


def judge(
    outputs: Mapping[str, Any],
    baseline: str,
    tolerance: Tolerance,
    inputs: Mapping[str, Any] | None = None,
) -> dict[str, CheckOutcome]:
    """One outcome per variant of one call of each on inputs of one seed (``outputs`` and the
    ``inputs`` each variant was given, by variant): the module docstring's rule. Nothing is
    judged without the baseline's outputs."""
    if baseline not in outputs:
        return {}
    reference = outputs[baseline]
    found = {baseline: checks.check_single(reference)}
    for name, out in outputs.items():
        if name == baseline:
            continue
        outcome = checks.compare(out, reference, tolerance.rtol, tolerance.atol, tolerance.table)
        if outcome.ok and _shares_memory(name, outputs, inputs or {}):
            outcome = CheckOutcome(False, "alias", ALIAS)
        found[name] = outcome
    return found


def _shares_memory(name: str, outputs: Mapping[str, Any], inputs: Mapping[str, Any]) -> bool:
    mine = checks.storages(runtime.tensors_in(outputs[name]))
    others = [n for n in outputs if n != name]
    theirs = [outputs[n] for n in others] + [inputs[n] for n in others if n in inputs]
    return bool(mine & checks.storages(runtime.tensors_in(theirs)))


class Verdicts:
    """The checks of one config: each variant's first failure (or its latest pass), written
    as check rows (the manifest's format) into ``rows``; a candidate whose outputs cannot be
    compared goes into ``dropped`` with verdict ``incorrect``."""

    def __init__(
        self,
        baseline: str,
        tolerance: Tolerance,
        config_index: int,
        config: Mapping[str, Any],
        dropped: runtime.Dropped,
        rows: list[dict[str, Any]] | None = None,
    ) -> None:
        self.baseline, self.tolerance = baseline, tolerance
        self.index, self.config = config_index, dict(config)
        self.dropped = dropped
        self.rows: list[dict[str, Any]] = [] if rows is None else rows
        self.outcomes: dict[str, CheckOutcome] = {}

    def failed(self, name: str) -> bool:
        return name in self.outcomes and not self.outcomes[name].ok

    def judged(self, name: str) -> bool:
        """Still judged right: not dropped and not failed at this config."""
        return name not in self.dropped and not self.failed(name)

    def judge(
        self,
        outputs: Mapping[str, Any],
        inputs: Mapping[str, Any] | None = None,
        where: str | None = None,
        *,
        every: bool = False,
    ) -> None:
        """Judge one call of each variant (``judge``); ``where``: which call, said before a
        failure's message; ``every``: a row for every variant (the first call's), else for a
        first failure only. The baseline's invalid outputs raise ``SourceError`` (stage
        ``check``): the request fails, nothing can be compared."""
        live = {n: o for n, o in outputs.items() if n not in self.dropped}
        found = judge(live, self.baseline, self.tolerance, inputs)
        own = found.pop(self.baseline, None)
        if own is not None and not own.ok:
            raise SourceError(
                "check",
                _at(where, own.message),
                variant=self.baseline,
                config_index=self.index,
            )
        if own is not None:
            self.record(self.baseline, own, where, every=every)
        for name, outcome in found.items():
            self.record(name, outcome, where, every=every)

    def record(
        self, name: str, outcome: CheckOutcome, where: str | None = None, *, every: bool = False
    ) -> None:
        """``name``'s outcome of a call, unless it failed already at this config."""
        if self.failed(name):
            return
        if not outcome.ok:
            outcome.message = _at(where, outcome.message)
        self.outcomes[name] = outcome
        if every or not outcome.ok:
            self.rows.append(self.row(name, outcome))
        if not outcome.ok and name != self.baseline and outcome.reason in checks.STRUCTURAL:
            detail = {"stage": "check", "message": outcome.message, "config_index": self.index}
            self.dropped.drop(name, "incorrect", {**detail, "reason": outcome.reason})

    def row(self, name: str, outcome: CheckOutcome) -> dict[str, Any]:
        """A check row: variant, config_index, config and the outcome's fields."""
        row = {"variant": name, "config_index": self.index, "config": dict(self.config)}
        return {**row, **outcome.to_dict()}


def _at(where: str | None, message: str) -> str:
    return f"{where}: {message}" if where else message
