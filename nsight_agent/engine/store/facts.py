"""What a run's stages learned about the run itself, typed: how it was measured or collected,
what the budget left out, what ncu cost, where it ran. Stored in result.json as ``facts``.

    facts = RunFacts(method="cupti", cpu_probe_ns=[...])   # a misspelt or mistyped fact raises
    facts = RunFacts.from_stored(json.loads(text))         # a result.json's facts, read leniently

Every field is optional: a timing run has no ncu facts and an ncu run no timer. Stored facts
are read leniently (``from_stored``): a result.json that keeps them in the untyped ``extra``
mapping loads too, and a fact this version does not know, or cannot read, is dropped, so a
store written by another version never stops a run from loading.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# The timing path's timers (engine/worker/timer.py): CUPTI's kernel records on a GPU, CUDA
# events where tracing is not available, perf_counter around the call on a CPU.
TimingMethod = Literal["cupti", "cuda_events", "perf_counter"]


class RanOn(BaseModel):
    """Which node, GPU and host process ran a job sent to a Ray cluster (where.json too)."""

    model_config = ConfigDict(extra="forbid")

    node: str = Field(description="The node's host name")
    gpu: str = Field(description="The host's CUDA_VISIBLE_DEVICES (Ray's choice of GPU)")
    pid: int = Field(description="The host process on the node")
    started: float = Field(description="Unix time the host began the job")
    ended: float = Field(description="Unix time the host finished it")


class RunFacts(BaseModel):
    """The facts a run's stages recorded about it, one typed field each."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # The timing path (engine/pipeline.time_request)
    method: TimingMethod | None = Field(
        default=None, description="The timer of a timing run; None for an ncu run"
    )
    order: list[tuple[int, int, str]] = Field(
        default=[], description="(config index, run, variant) in the order called (first 64)"
    )
    cpu_probe_ns: list[float] = Field(
        default=[],
        description="The CPU speed probe (ns a call) before and after the runs, then the "
        "median of one per run; on a CPU only (the gate compares machine speeds by it)",
    )

    # The ncu path's collect stage (engine/collection)
    collection: str | None = Field(
        default=None,
        description="The collect path: 'pre-launched', or 'cold: <why no target served it>'",
    )
    collected_plain: str | None = Field(
        default=None,
        description="Why a target served a launch-sampled request without sampling, if it did",
    )
    budget: str | None = Field(
        default=None, description="The profiling budget's line: what was kept and left out"
    )
    budget_left_out: list[str] = Field(default=[], description="The sections the budget left out")

    # What the ncu run cost (measure.Measured.ncu_cost; the budget's fit reads these)
    ncu_s: float | None = Field(default=None, description="The ncu run's wall time (s)")
    ncu_kernels: int | None = Field(default=None, description="Kernels the ncu run profiled")
    ncu_passes: float | None = Field(
        default=None, description="Replay passes of those kernels, summed (where ncu said)"
    )
    profile_cuda_build: dict[str, Any] | None = Field(
        default=None,
        description="The profiled process's CUDA extension build (its cache hit, seconds)",
    )

    # Where it ran, for a job a Ray cluster ran (engine/executors/ray/landing.py)
    executor: RanOn | None = Field(default=None, description="Which node, GPU and process")

    @classmethod
    def from_stored(cls, data: Mapping[str, Any]) -> RunFacts:
        """The facts of a result.json's contents: its ``facts``, else its ``extra``. A fact
        not known here, or not readable as its type, is dropped; the others are kept."""
        stored = data.get("facts")
        if stored is None:
            stored = data.get("extra")
        if not isinstance(stored, Mapping):
            return cls()
        kept = {k: v for k, v in stored.items() if k in cls.model_fields}
        try:
            return cls.model_validate(kept)
        except ValidationError as err:
            unreadable = {e["loc"][0] for e in err.errors() if e["loc"]}
            return cls.model_validate({k: v for k, v in kept.items() if k not in unreadable})
