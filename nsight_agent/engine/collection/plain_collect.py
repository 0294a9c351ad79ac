"""A pre-launched target for a job that asked for what an attach cannot give, where the
pre-flight shows it would add nothing.

``diagnose_kernel`` from source asks for torch operator ranges (NVTX: the step view groups a
step's kernels by operator) and, for one measured call, launch sampling (ncu's count within
the NVTX filter); an attached report records no NVTX, so both send a job cold. For a source
whose every measured call launches only kernels the source defines (a Triton or CUDA kernel
of the user's, not inside any torch operator) and few of them, neither changes the answer:
no operator to group by, every launch profiled anyway. Then, where the slot has a target
ready, the collect stage runs without them (``--no-op-ranges``) through the target and the
run says so (``RunFacts.collected_plain``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from nsight_agent.engine.collection import ncu_run
from nsight_agent.engine.collection.attach import TargetSource
from nsight_agent.engine.collection.call_markers import KernelCounts
from nsight_agent.engine.collection.ncu_run import Collected
from nsight_agent.engine.store.runs import PreflightResult
from nsight_agent.request import ProfileRequest
from nsight_agent.source_kernels import defined_in, user_kernel_names

# A call of at most this many launches gains little from sampling (each is profiled once).
PLAIN_MAX_LAUNCHES = 16
SAID = "every measured call launches only the source's own kernels: no operator ranges needed"


def plain(request: ProfileRequest) -> ProfileRequest:
    """The request without torch operator ranges and launch sampling."""
    return request.model_copy(update={"torch_ranges": False, "sample_launches": False})


def source_kernels(request: ProfileRequest) -> set[str]:
    """Kernel names the request's sources define (the main one and each variant's)."""
    names = user_kernel_names(request.source)
    for v in request.variants:
        names |= user_kernel_names(v.source) if v.source else set()
    return names


def might_serve(request: ProfileRequest, targets: TargetSource | None) -> bool:
    """Before the pre-flight: a ready target could serve this job plainly (so the collect
    stage waits for the pre-flight rather than starting cold beside it)."""
    return _servable(request, targets, source_kernels(request))


def _servable(request: ProfileRequest, targets: TargetSource | None, names: set[str]) -> bool:
    return (
        targets is not None
        and ncu_run.cold_reason(request) is not None
        and ncu_run.cold_reason(plain(request)) is None
        and bool(names)
        and targets.any_ready()
    )


def served_plain(
    request: ProfileRequest, pre: PreflightResult, targets: TargetSource | None
) -> ProfileRequest | None:
    """After the pre-flight: the plain request when a ready target can serve it and the
    pre-flight's calls show the ranges and sampling would add nothing; else None."""
    names = source_kernels(request)  # the sources parsed once
    if not _servable(request, targets, names):
        return None
    calls = [call for per in (pre.kernels_per_call or {}).values() for call in per]
    if not calls:
        return None
    for call in calls:
        if not call or len(call) > PLAIN_MAX_LAUNCHES:
            return None
        if not all(defined_in(kernel, names) for kernel in call):
            return None
    return plain(request)


def collect(
    request: ProfileRequest,
    pre: PreflightResult,
    run_dir: Path,
    run_id: str,
    poll: Callable[[], None],
    skip: list[str],
    targets: TargetSource | None,
    expected: KernelCounts | None,
) -> Collected:
    """The collect stage after the pre-flight (``ncu_run.collect_harness``), plain where
    ``served_plain`` says so; ``Collected.plain`` then says why."""
    plainly = served_plain(request, pre, targets)
    done = ncu_run.collect_harness(
        plainly or request, run_dir, run_id, poll, skip, targets, expected, op_ranges=not plainly
    )
    return replace(done, plain=SAID) if plainly else done
