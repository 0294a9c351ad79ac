"""Plain-served: a job that asked for what an attach cannot give, served by a pre-launched
target without it where the pre-flight shows it would add nothing.

``diagnose_kernel`` from source asks for torch operator ranges (NVTX: the step view groups a
step's kernels by operator) and, for one measured call, launch sampling (ncu's count within
the NVTX filter); an attached report records no NVTX, so either sends a job cold. For a source
whose every measured call launches only kernels the source defines (a Triton or CUDA kernel
of the user's, not inside any torch operator) and few of them, neither changes the answer:
no operator to group by, every launch profiled anyway. Then, where the slot has a target
ready after the pre-flight, the job runs without them (``--no-op-ranges``) through the target
(``attached.py``, with its fallbacks) and the run says so (``RunFacts.collected_plain``);
otherwise it launches cold with them, saying why.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, replace

from nsight_agent.engine.collection.collect.attach import TargetSource
from nsight_agent.engine.collection.collect.attached import Attached
from nsight_agent.engine.collection.collect.cold import Cold
from nsight_agent.engine.collection.collect.strategy import (
    Collected,
    CollectJob,
    RunPlace,
    Strategy,
)
from nsight_agent.engine.store.runs import PreflightResult
from nsight_agent.source_kernels import defined_in

# A call of at most this many launches gains little from sampling (each is profiled once).
PLAIN_MAX_LAUNCHES = 16
SAID = "every measured call launches only the source's own kernels: no operator ranges needed"


def only_own_kernels(pre: PreflightResult, own_kernels: Set[str]) -> bool:
    """After the pre-flight: every measured call launched a few kernels, each the sources'."""
    calls = [call for per in (pre.kernels_per_call or {}).values() for call in per]
    return bool(calls) and all(
        call
        and len(call) <= PLAIN_MAX_LAUNCHES
        and all(defined_in(kernel, own_kernels) for kernel in call)
        for call in calls
    )


@dataclass
class PlainServed(Strategy):
    """A target serves the job plainly if the pre-flight's calls allow it; else cold, saying
    what kept the target from it (``why``)."""

    job: CollectJob
    targets: TargetSource
    own_kernels: frozenset[str]
    why: str

    def collect(self, run: RunPlace, pre: PreflightResult) -> Collected:
        if not (self.targets.any_ready() and only_own_kernels(pre, self.own_kernels)):
            return Cold(self.job, self.why).collect(run, pre)
        done = Attached(self.job.as_plain(), self.targets).collect(run, pre)
        return replace(done, plain=SAID)
