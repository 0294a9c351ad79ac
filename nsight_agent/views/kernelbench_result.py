"""KernelBench's result, as its ``KernelExecResult`` names the fields, per candidate: the
models that ``views/kernelbench.py`` fills and that ``compare_variants`` answers with under
``correctness="kernelbench"`` (``views/compare.CompareSummary.kernelbench``).

compiled: its source imported (and built, for CUDA); correctness: measured, and every check
passed; runtime and ref_runtime: ms by the report's ``timing``, geometric mean over the
configs, -1.0 if not timed; speedup: ref_runtime / runtime, if correct; verdict: ours, on
the report's ``verdict_basis``; compile: what the call's builds cost, apart from every
measured time (a candidate's load_inline, built or loaded from the cache).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from nsight_agent.time_basis import TimeBasis


class KernelBenchResult(BaseModel):
    """One candidate, as KernelBench's ``KernelExecResult`` reports it, and our judgement."""

    variant: str
    compiled: bool
    correctness: bool
    runtime: float = Field(description="ms by the report's timing; -1.0 if not timed")
    ref_runtime: float
    speedup: float | None = None
    verdict: str = Field(description="Ours, on verdict_basis")
    reason: str | None = None


class KernelBenchReport(BaseModel):
    run_id: str | None = Field(description="None: every candidate was refused before any run")
    baseline: str
    results: list[KernelBenchResult]
    timing: str | None = Field(default=None, description="How runtimes were measured")
    num_correct_trials: int | None = None
    num_perf_trials: int | None = None
    verdict_basis: TimeBasis | None = None
    compile: str | None = None
