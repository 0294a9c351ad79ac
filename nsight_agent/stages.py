"""The stages of a measuring call in the words every front end shows: the command line's
progress lines on stderr (or its spinner on a terminal) and MCP progress notifications.

A stage text reads "<stage>: <what happens now>"; the part before the first colon names the
stage, so a reader that shows one line per stage (``cli/progress_lines.py``) sees where a new
one begins. The order of a call: validation, compile (only where a source builds code),
pre-flight, then on the timing path its plan and "config i of n: run j", on the ncu path
"config i of n: run j of m" from the profiled program, and collect.
"""

from __future__ import annotations

from typing import Protocol

VALIDATION = "validation: checking the request and its sources"
COMPILE = (
    "compile: the CUDA and torch extension sources build first in the pre-flight's process "
    "(cached by source for later runs)"
)
PREFLIGHT_COLD = "pre-flight: running the harness once without the profiler"
PREFLIGHT_WARM = "pre-flight: running every config once on the warm worker"
COLLECT_NCU = "collect: profiling under ncu"
EXTRACT = "collect: reading the report"
CHECK = "collect: reading the times and checks, saving the run"


def stage_of(message: str) -> str:
    """The stage a text belongs to: what comes before its first colon."""
    return message.partition(":")[0].strip()


class LoopPlan(Protocol):
    """How many runs the timing loop makes (the engine's ``TimingOptions``)."""

    @property
    def min_runs(self) -> int: ...
    @property
    def max_runs(self) -> int: ...
    @property
    def ci_target_pct(self) -> float: ...
    @property
    def max_seconds(self) -> float: ...


def timing_plan(plan: LoopPlan, configs: int) -> str:
    """The timing loop's run count as it starts: adaptive, so said before, not only after."""
    return (
        f"timing: runs adaptive from {plan.min_runs} up to {plan.max_runs} a config until "
        f"stable (each median's 95% interval within {plan.ci_target_pct:g} %), at most "
        f"{plan.max_seconds:g} s a config, {configs} config(s)"
    )


def config_run(
    config: int, configs: int, run: int, runs: int | None = None, variant: str | None = None
) -> str:
    """ "config 2 of 3: run 4 of 10, fused" (0-based ``config`` and ``run`` in); ``runs``
    None: the timing path's adaptive count, said as "run 4 (adaptive)"."""
    of = f" of {runs}" if runs else " (adaptive)"
    who = f", {variant}" if variant else ""
    return f"config {config + 1} of {configs}: run {run + 1}{of}{who}"
