"""The collect stage of a tool run: the rendered harness under ncu, every (variant, config,
run) call in one process; the report, the manifest and the logs land in the run folder.

A profiled process that raised is the user's error with its stage and line (from error.json);
one that ended early (``os._exit``) is named as such, not as "no kernels". The process is a
pre-launched target when the GPU slot has one ready and the options allow an attach
(``attach.py``), else a cold ``ncu python harness.py``; the result records which and why.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from nsight_agent.engine import process
from nsight_agent.engine.collection import attach, call_markers, ncu, preflight_run, work
from nsight_agent.engine.collection.attach import TargetSource
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.store.run_files import RunFiles
from nsight_agent.errors import (
    CollectionTimeoutError,
    KernelProfileFailedError,
    NcuError,
    NoKernelsProfiledError,
    ProfiledProcessError,
)
from nsight_agent.request import ProfileRequest

__all__ = ["Collected", "TargetSource", "collect_harness", "ended_early", "forget_attempt"]


@dataclass(frozen=True)
class Collected:
    """What the collect stage did: ncu's wall time, and the path it took ("pre-launched", or
    "cold: <why>"; kept in the run's result)."""

    seconds: float
    path: str
    plain: str | None = None  # why torch operator ranges were left out (plain_collect.py)


def collect_harness(
    request: ProfileRequest,
    run_dir: Path,
    run_id: str,
    poll: Callable[[], None],
    skip: list[str] | None = None,
    targets: TargetSource | None = None,
    expected: call_markers.KernelCounts | None = None,
    gate: Path | None = None,
    cold_why: str = "no pre-launched targets here",
    op_ranges: bool = True,
) -> Collected:
    """The collect stage: the harness under ncu, every call of the run in one process; the report,
    the manifest and the logs land in ``run_dir``; ``skip``: variants dropped at the
    pre-flight, not run; ``targets``: the GPU slot's pre-launched targets, used when one is
    ready and the options allow an attach (else, or when the attach fails, a cold launch);
    ``expected``: the pre-flight's kernels per call by variant and config, which an attached
    run's call markers must bracket; ``gate``: started beside the pre-flight, the harness
    waits for its verdict in this file (``early_ncu.py``), and the limit covers both;
    ``cold_why``: what the answer says of a cold launch without ``targets``; ``op_ranges``
    False: the rendered harness's torch operator ranges left out (plain_collect.py)."""
    options = ncu_options(request)
    files = RunFiles.in_folder(run_dir)
    limit = request.timeout_s * (2 if gate is not None else 1)
    inv = ncu.Invocation(options, files, timeout=limit, poll=poll)
    harness = ["harness.py", "--device", "cuda"] + (["--skip", ",".join(skip)] if skip else [])
    harness += ["--gate", str(gate)] if gate is not None else []
    harness += [] if op_ranges else ["--no-op-ranges"]
    done: ncu.NcuRun | None = None
    try:
        why = cold_why if targets is None else cold_reason(request)
        target = targets.take() if targets is not None and why is None else None
        if targets is not None and why is None and target is None:
            why = targets.why_none()
        if target is not None:
            try:
                done = attach.profile_prelaunched(
                    target,
                    replace(inv, tag=f"{run_id}.attach"),
                    argv=harness,
                    run_dir=run_dir,
                    expected=expected,
                )
            except attach.AttachFailed as failed:
                why = f"attach failed: {failed}"
                forget_attempt(run_dir)
                if failed.lasting and targets is not None:
                    targets.turn_off(str(failed))
        if done is None:
            done = ncu.profile_cold(
                [process.python_executable(), *harness],
                replace(inv, tag=f"{run_id}.ncu"),
                cwd=run_dir,
                env=process.child_env(),
                forget=lambda: forget_attempt(run_dir),
            )
    except ProfiledProcessError as err:
        raise preflight_run.source_error(files.error, err.stderr_tail, err.returncode) from err
    except KernelProfileFailedError:
        raise  # ncu ended the program: its calls are short, and that is not the source's doing
    except CollectionTimeoutError as err:
        raise with_estimate(err, expected, request.runs, skip or []) from None
    except (NoKernelsProfiledError, NcuError) as err:
        # An early exit (os._exit at import or in the entry) looks like "no kernels".
        early = ended_early(files.manifest, request)
        if early is not None:
            raise early from err
        raise
    early = ended_early(files.manifest, request)
    if early is not None:
        raise early
    path = attach.PRELAUNCHED if why is None else f"cold: {why}"
    return Collected(done.seconds, path + _waits(done))


def ncu_options(request: ProfileRequest) -> ncu.NcuOptions:
    """What the collect stage asks ncu for, from the request."""
    return ncu.NcuOptions(
        metrics=work.collected_metrics(request),
        sections=request.sections,
        replay_mode=request.replay_mode,
        cache_control=request.cache_control,
        clock_control=request.clock_control,
        sample_launches=request.sample_launches,
    )


def cold_reason(request: ProfileRequest) -> str | None:
    """Why this request's collect stage must launch cold, or None when a target can serve it."""
    return attach.cold_reason(ncu_options(request), request.torch_ranges)


def target_will_serve(request: ProfileRequest, targets: TargetSource | None) -> bool:
    """Whether the collect stage will take a pre-launched target: one is ready and the request
    allows an attach. Otherwise the collect stage launches cold (and may start early)."""
    return targets is not None and cold_reason(request) is None and targets.any_ready()


def with_estimate(
    err: CollectionTimeoutError,
    expected: call_markers.KernelCounts | None,
    runs: int,
    skip: list[str],
    spent_s: float | None = None,
) -> CollectionTimeoutError:
    """A run cut by its limit, with the kernels it had to profile (the pre-flight's count per
    call, times the runs; counted on a GPU only) and the limit they need at the pace ncu kept
    (the sweep's level-3 steps launch hundreds of kernels a call, each replayed per pass);
    ``spent_s``: the seconds it could profile (started beside the pre-flight: since the
    verdict), else its whole limit."""
    total = sum(n for (variant, _), n in (expected or {}).items() if variant not in skip) * runs
    done = err.profiled
    if not done or total <= done:
        return err
    spent = err.limit_s if spent_s is None else min(spent_s, err.limit_s)
    need = math.ceil(spent * total / done / 30) * 30  # its start counted in: an upper end
    err.reword(
        f"{err.message} The measured calls launch {total} kernels in all (the pre-flight's "
        f"count per call, times {runs} runs): at that pace about {need} s.",
        f"Raise timeout_s to about {need}, or profile less: fewer runs or configs, fewer "
        f"sections (deep=false), or method='timing' where no counters are needed. {err.hint}",
    )
    return err


def _waits(done: ncu.NcuRun) -> str:
    """What another profiler on the GPU cost this run, said beside the path."""
    said = ""
    if done.waited_s >= 0.5:
        said += f"; waited {done.waited_s:.0f} s for the GPU's profiler (another process had it)"
    if done.attempts > 1:
        said += f"; profiled on attempt {done.attempts} (another profiler held the counters)"
    return said


def forget_attempt(run_dir: Path) -> None:
    """Remove what a failed attempt's harness left (an attach, or a cold run that met a busy
    profiler), before the next run writes its own (a stale error.json would be read as its)."""
    files = RunFiles.in_folder(run_dir)
    for path in (files.report, files.manifest, files.error, files.progress):
        path.unlink(missing_ok=True)


def ended_early(manifest: Path, request: ProfileRequest) -> SourceError | None:
    """Trust no exit status: a run whose manifest lacks calls ended early."""
    found = preflight_run.read_manifest(manifest)
    return preflight_run.early_exit(found, request, request.runs, 0)
