"""How a job's collect stage runs, chosen once, before its pre-flight: one pure function of
the request, the GPU slot's pre-launched targets and the environment.

    targets     the job's options                      early start  ->  way (the answer's path)
    none        any                                    allowed      ->  Early ("cold: no
                                                       not allowed  ->  Cold   targets here")
    ready       an attach serves them                  -            ->  Attached ("pre-launched")
    not ready   an attach serves them                  allowed      ->  Early ("cold: <why none>")
                                                       not allowed  ->  Attached (a target ready
                                                                        by then, else cold)
    ready       only operator ranges or sampling keep  -            ->  PlainServed (after the
                it from a target, and the sources                       pre-flight: plainly
                define kernels (not ready: as above)                    through a target, or cold)
    any         anything else an attach cannot serve   allowed      ->  Early ("cold: <why>")
                                                       not allowed  ->  Cold ("cold: <why>")

The early start is allowed unless ``NSIGHT_AGENT_EARLY_NCU=0`` or a budget waits for the
pre-flight's kernel counts to fit its sections; a budgeted job's way is then wrapped in
``Budgeted``. Each way owns its fallback from there (``attached.py``, ``plain.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

from nsight_agent.annotation import NCU_NVTX_INCLUDE
from nsight_agent.engine.collection.collect import early
from nsight_agent.engine.collection.collect.attach import TargetSource
from nsight_agent.engine.collection.collect.attached import Attached
from nsight_agent.engine.collection.collect.budgeted import Budgeted
from nsight_agent.engine.collection.collect.cold import NO_TARGETS, Cold
from nsight_agent.engine.collection.collect.early import Early
from nsight_agent.engine.collection.collect.plain import PlainServed
from nsight_agent.engine.collection.collect.strategy import CollectJob, Strategy
from nsight_agent.engine.collection.ncu_args import NcuOptions
from nsight_agent.request import ProfileRequest
from nsight_agent.source_kernels import defined_by


def choose(
    request: ProfileRequest, targets: TargetSource | None, env: Mapping[str, str]
) -> Strategy:
    """The way ``request``'s collect stage runs, given the slot's ``targets`` (None: the slot
    keeps none) and ``env`` (the process's environment)."""
    job = CollectJob.of(request)
    budget_s = request.budget_s if request.sections else None  # it fits sections, or nothing
    way = _way(request, job, targets, staged=budget_s is not None or not early.enabled(env))
    if budget_s is None:
        return way
    assert not isinstance(way, Early)  # staged: nothing starts beside the pre-flight
    keep = max(request.budget_keep, 0 if request.metrics else 1)  # a run needs something
    return Budgeted(way, budget_s, keep)


def _way(
    request: ProfileRequest, job: CollectJob, targets: TargetSource | None, staged: bool
) -> Cold | Early | Attached | PlainServed:
    if targets is None:
        return _cold(job, NO_TARGETS, staged)
    why = cold_reason(job.options, job.op_ranges)
    in_time = staged or targets.any_ready()  # a target ready now, or maybe by the collect stage
    if why is None:
        return Attached(job, targets) if in_time else Early(job, targets.why_none())
    if in_time and cold_reason(job.as_plain().options) is None:
        # Only what a plain job leaves out keeps a target from it: where the sources define
        # kernels of their own, the pre-flight may show them alone (plain.py decides then).
        own = frozenset(defined_by(request.sources()))
        if own:
            return PlainServed(job, targets, own, why)
    return _cold(job, why, staged)


def _cold(job: CollectJob, why: str, staged: bool) -> Cold | Early:
    return Cold(job, why) if staged else Early(job, why)


def cold_reason(options: NcuOptions, torch_ranges: bool = False) -> str | None:
    """Why these options need a cold launch, or None when a pre-launched target serves them;
    ``torch_ranges``: the job groups kernels by torch operator ranges (NVTX)."""
    if torch_ranges:
        return "torch operator ranges (NVTX, which an attached report does not record)"
    if options.replay_mode != "kernel":
        # ncu refuses application replay in attach mode; range replay there is unmeasured.
        return f"replay_mode={options.replay_mode} (targets serve kernel replay only)"
    if tuple(options.nvtx_include) != (NCU_NVTX_INCLUDE,):
        return "an NVTX filter other than the harness's"
    if options.extra_args:
        return "extra ncu arguments"
    if options.sample_launches:
        # per-launch-config counts the launches the filter lets through: without the NVTX
        # filter, the set-up's and the warm-up's launches would take each configuration's one
        return "launch sampling (needs the NVTX filter, which attach mode lacks)"
    return None
