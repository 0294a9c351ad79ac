"""The knobs behind a profiling tool's ``options`` and which tool uses which: a knob sent to a
tool that does not use it is refused with where it applies, never ignored.

Each tool passes on the knobs it uses (``USES``); the validation stage then refuses, for
the method, what that method cannot honour (``service/validate.py``). The problems found
here (``unused``) go to that stage with the request (``validate(..., also=...)``), so one
answer says all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

import nsight_agent.kernelbench as kernelbench
from nsight_agent.arguments import TOOL_ARGUMENTS, problems_of
from nsight_agent.errors import Problem, RequestRejected
from nsight_agent.options import MIN_TIMEOUT_S
from nsight_agent.request import (
    MIN_EFFECT_PCT,
    CacheControl,
    ClockControl,
    CombineKernels,
    Correctness,
    ReplayMode,
)
from nsight_agent.time_basis import TimeBasis


class Options(BaseModel):
    """The knobs behind ``options``: checked here, so a typo is an error, not ignored."""

    model_config = ConfigDict(extra="forbid")

    setup: str = "setup"
    warmup: int | None = Field(default=None, ge=0, le=100)
    sections: list[str] | None = None
    replay_mode: ReplayMode | None = None
    cache_control: CacheControl = "all"
    clock_control: ClockControl = "none"
    timeout_s: float | None = Field(default=None, ge=MIN_TIMEOUT_S, le=3600)
    ignore_kernels: list[str] | None = None
    combine_kernels: CombineKernels = "sum"
    rtol: float | None = None
    atol: float | None = None
    vary_inputs: bool = True
    deep: bool = True
    correctness: Correctness = "default"
    min_effect_pct: float = Field(default=MIN_EFFECT_PCT, ge=0, le=100)
    budget_s: float | None = Field(default=None, ge=1, le=3600)
    # None: the tool's default (compare_variants: "call" under correctness="kernelbench",
    # else "gpu"; nsight_agent/time_basis.py)
    time_basis: TimeBasis | None = None
    num_correct_trials: int = Field(default=kernelbench.TRIALS, ge=1, le=100)
    num_perf_trials: int = Field(default=kernelbench.PERF_TRIALS, ge=1, le=10_000)

    def fields(self, *names: str) -> dict[str, Any]:
        return {n: getattr(self, n) for n in names}

    def changed(self) -> dict[str, Any]:
        """The knobs set to other than their defaults."""
        return {
            n: v for n, v in self.model_dump().items() if v != type(self).model_fields[n].default
        }


_COMMON = {"setup", "timeout_s", "cache_control", "clock_control", "vary_inputs"}
USES: dict[str, frozenset[str]] = {
    "profile_kernel": frozenset(
        _COMMON
        | {"warmup", "sections", "replay_mode", "ignore_kernels", "combine_kernels"}
        | {"correctness", "budget_s", "num_correct_trials"}
    ),
    "compare_variants": frozenset(
        _COMMON
        | {"warmup", "replay_mode", "ignore_kernels", "combine_kernels", "rtol", "atol"}
        | {"correctness", "min_effect_pct", "time_basis", "num_correct_trials", "num_perf_trials"}
    ),
    "roofline_metrics": frozenset(_COMMON | {"warmup", "ignore_kernels"}),
    "diagnose_kernel": frozenset(_COMMON | {"deep", "budget_s"}),
}
"""The knobs each tool passes on to its request (from source); a run read again by
``run_id`` (or a report) uses none but ``compare_variants``' ``min_effect_pct``."""
REREAD_USES: dict[str, frozenset[str]] = {
    "compare_variants": frozenset({"min_effect_pct", "time_basis"})
}

# What a tool without optional sections says of a budget: it would have nothing to leave out.
NOTHING_TO_LEAVE_OUT = {
    "compare_variants": "each call's time (and the work counters)",
    "roofline_metrics": "a fixed set for the roofline",
}


def options_of(raw: Mapping[str, Any] | None) -> Options:
    """The options, checked: an unknown knob or a bad value is refused as the request's own
    fields are (``RequestRejected``, each problem named ``options.<knob>``)."""
    try:
        return Options.model_validate(dict(raw or {}))
    except ValidationError as err:
        problems = problems_of(err, Options.model_fields, what="an option", prefix="options.")
        raise RequestRejected([_beside_options(p) for p in problems]) from err


def _beside_options(problem: Problem) -> Problem:
    name = problem.where.removeprefix("options.")
    if name not in TOOL_ARGUMENTS or "did you mean" in problem.message:
        return problem
    said = f"{problem.message} ({name} is an argument of the tool itself, beside options)"
    return dataclasses.replace(problem, message=said)


def unused(o: Options, tool: str, reread: bool = False) -> list[Problem]:
    """A problem for each knob set (to other than its default) that ``tool`` does not use;
    ``reread``: the tool reads an earlier run or a report, measuring nothing."""
    uses = REREAD_USES.get(tool, frozenset()) if reread else USES[tool]
    problems = []
    for name, value in o.changed().items():
        if name in uses:
            continue
        if name == "budget_s" and tool in NOTHING_TO_LEAVE_OUT and not reread:
            message = (
                f"budget_s chooses which optional sections to collect; {tool} collects "
                f"{NOTHING_TO_LEAVE_OUT[tool]}, so there is nothing to leave out"
            )
            hint = "Drop budget_s here; profile_kernel (with sections) and diagnose_kernel take it."
        else:
            takers = ", ".join(t for t, knobs in USES.items() if name in knobs)
            does = "measures nothing when it reads an earlier run or a report" if reread else ""
            message = f"{tool} {does or f'does not use {name}'}: {name}={value!r} would be ignored"
            hint = f"Drop options.{name} here; it applies to {takers} (from source)."
        problems.append(Problem("option_tool", f"options.{name}", message, hint=hint))
    return problems


def refuse_unused(
    o: Options,
    tool: str,
    reading: str = "run_id",
    arguments: Mapping[str, object] | None = None,
    also: Sequence[Problem] = (),
) -> None:
    """Raise ``RequestRejected`` when ``tool``, reading an earlier run or a report (nothing
    to validate), was sent a knob it does not use, or one of the ``arguments`` that only a
    new measurement uses (given: not None), such as a source beside ``reading``; ``also``:
    the tool's other problems, said with these."""
    problems = [*unused(o, tool, reread=True), *also]
    for name, value in (arguments or {}).items():
        if value is not None:
            problems.append(
                Problem(
                    "option_tool",
                    name,
                    f"{tool} with {reading} reads what was measured then, so {name} would be "
                    "ignored",
                    hint=f"Drop {name}, or drop {reading}: each says on its own what to read "
                    "or to measure.",
                )
            )
    if problems:
        raise RequestRejected(problems)
