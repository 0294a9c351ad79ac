"""The pipeline: the order of a job's stages, stated once. Every executor ends in ``run_job``
(the local one in its GPU slot threads, the Ray one inside each GPU host), and each stage
lives in its room of the engine:

    stage       profile (ncu)                     timing (no counters)        pre-flight only
    render      harness/render.py                 same                        same
    pre-flight  collection/preflight_run.py       on the warm worker          cold or warm
                (cold, or on the warm worker),    (worker/pool.py)
                collection/isolate.py (a crash
                of several variants attributed)
    collect     collection/collect/ (one way      worker/timing.py on the
                chosen before the pre-flight:     warm worker
                cold, early, attached, plain;
                budgeted)
    extract     collection/extract.py             (the timing loop's own
    aggregate   collection/measure.py,            samples: worker/timing.py)
                collection/aggregate.py
    check       collection/check.py               same
    store       store/runs.py, store/run_status.py (status.json from render to the end)

Each run lives in ``<runs_root>/<run_id>/``: request.json, the user's source file(s), the
rendered harness.py, manifest.json, report.ncu-rep, ncu.log, program-output.log, raw.csv,
processed.csv and result.json (what ``load_run`` rebuilds a result from). The pre-flight runs
the same harness without ncu first, so a broken source costs seconds, not an ncu run.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union

import nsight_agent.stages as stages
from nsight_agent.engine import device, pinning
from nsight_agent.engine.collection import isolate, ncu, preflight_run, run_result
from nsight_agent.engine.collection.collect.attach import TargetSource
from nsight_agent.engine.collection.collect.choose import choose
from nsight_agent.engine.collection.collect.strategy import RunPlace
from nsight_agent.engine.collection.preflight_run import raise_if_broken
from nsight_agent.engine.harness import render
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.store import records, retention
from nsight_agent.engine.store.progress import following, latest, opening
from nsight_agent.engine.store.run_status import RunRecord, run_record
from nsight_agent.engine.store.runs import (
    OutputCheck,
    PreflightResult,
    RunResult,
    default_runs_root,
    load_run,
    new_run_dir,
    save_result,
    write_request,
)
from nsight_agent.engine.worker.pool import TimeJob, TimingOptions, WorkerPool, warm_preflight
from nsight_agent.errors import InvalidRequestError, RunCancelledError
from nsight_agent.request import ProfileRequest

Progress = Callable[[int, int, str], None]
# Runs the pre-flight of a rendered run folder on a device (cold: a new process; the server
# passes a warm worker's, which skips the interpreter and torch start-up).
PreflightFn = Callable[[Path, ProfileRequest, str], PreflightResult]
JobMode = Literal["profile", "preflight", "timing"]
JobResult = Union[RunResult, PreflightResult]  # noqa: UP007 - a runtime alias on Python 3.10

CUDA_CACHE = ".cuda-cache"


@dataclass(frozen=True)
class Job:
    """One unit of work for one GPU: profile (or only pre-flight, or time) ``request`` into
    ``runs_root`` (None: the default runs root of the process that owns the store)."""

    request: ProfileRequest
    runs_root: Path | None = None
    mode: JobMode = "profile"
    name: str = ""  # shown in pool_info (e.g. the tool that asked)


@dataclass(frozen=True)
class Warm:
    """The warm worker that serves a job on this GPU (``device`` as the pool names it; None:
    this process's default device)."""

    pool: WorkerPool
    device: str | None = None


def run_job(
    job: Job,
    *,
    runs_root: Path | None = None,
    cancel: threading.Event | None = None,
    on_progress: Progress | None = None,
    warm: Warm | None = None,
    targets: TargetSource | None = None,
) -> JobResult:
    """Run one job here, in this process and thread: what every executor ends up calling.

    ``runs_root`` overrides the job's own (a Ray node profiles into a scratch root); ``warm``
    runs a profile job's pre-flight and a timing job on a warm worker; ``targets`` its collect."""
    root = runs_root or job.runs_root
    if job.mode == "timing":
        if warm is None:
            raise InvalidRequestError(
                "A timing job runs on a warm worker, which this executor does not have.",
                "Give the local executor its workers (LocalExecutor(workers=...)), as the "
                "server does.",
            )
        return time_request(
            job.request,
            warm.pool,
            runs_root=root,
            device=warm.device,
            cancel=cancel,
            on_progress=on_progress,
        )
    if job.mode == "preflight":
        return preflight(job.request, runs_root=root, cancel=cancel)
    return profile(
        job.request,
        runs_root=root,
        on_progress=on_progress,
        cancel=cancel,
        preflight=_on_worker(warm.pool, warm.device, cancel) if warm is not None else None,
        targets=targets,
    )


# --- render: the start every kind of run shares -----------------------------------------------


@contextlib.contextmanager
def rendered_run(
    request: ProfileRequest, runs_root: Path | None
) -> Iterator[tuple[str, Path, RunRecord]]:
    """A new run folder, recorded in its ``status.json`` from here on, holding the request and
    the rendered harness; the runs root trimmed by the retention policy as it is made (the
    new run, running, is among the newest kept)."""
    root = runs_root or default_runs_root()
    run_id, run_dir = new_run_dir(root)
    retention.prune(root, *retention.policy())
    with run_record(run_dir, run_id) as record:
        record.stage("render")
        write_request(run_dir, request)
        render.write_run_files(request, run_dir, root / CUDA_CACHE)
        yield run_id, run_dir, record


# --- the three kinds of job ---------------------------------------------------------------


def preflight(
    request: ProfileRequest,
    *,
    runs_root: Path | None = None,
    device: str | None = None,
    cancel: threading.Event | None = None,
) -> PreflightResult:
    """render -> pre-flight (once per config without ncu, on ``device``, default cuda if
    present). The status ends passed or failed (stage pre-flight), timed_out or cancelled."""
    with rendered_run(request, runs_root) as (run_id, run_dir, record):
        record.stage("pre-flight")
        result = preflight_run.run_preflight(
            run_dir, request, device or _default_device(), poll=_poller(cancel, None, None, 0)
        )
        result.run_id = run_id
        if not preflight_run.broken_run(result):
            record.passed(_variant_failures(result.checks, result.dropped))
        else:
            record.failed(SourceError(result.stage or "entry", "\n".join(result.errors)))
    return result


def _variant_failures(
    checks: list[OutputCheck], dropped: dict[str, records.DroppedVariant]
) -> dict[str, dict[str, Any]]:
    """The variants that failed alone, for the run's status: wrong outputs (at the check
    stage) and those dropped with their verdicts."""
    out: dict[str, dict[str, Any]] = {
        c.variant: {"verdict": "incorrect", "stage": "check", "message": c.message}
        for c in checks
        if not c.ok
    }
    out.update({name: d.status_entry() for name, d in dropped.items()})
    return out


def profile(
    request: ProfileRequest,
    *,
    runs_root: Path | None = None,
    on_progress: Progress | None = None,
    cancel: threading.Event | None = None,
    preflight: PreflightFn | None = None,
    targets: TargetSource | None = None,
) -> RunResult:
    """render -> pre-flight (with what the collect stage's way overlaps with it) -> collect
    (every variant, config and run under ncu in one process) -> extract and aggregate ->
    check -> store.

    ``preflight``: a warm worker's pre-flight (``run_job``); ``targets``: the GPU slot's
    pre-launched ncu targets, which the way of collecting, chosen here once, may take."""
    start = time.monotonic()
    ncu.find_ncu()  # fail before any work when ncu is missing
    way = choose(request, targets, os.environ)
    with rendered_run(request, runs_root) as (run_id, run_dir, record):
        total = len(request.expanded_configs()) * len(request.effective_variants()) * request.runs
        say = _say(on_progress)
        progress = records.RunFiles.in_folder(run_dir).progress
        run = RunPlace(run_dir, run_id, _poller(cancel, on_progress, progress, total))

        record.stage("pre-flight")
        opening(say, request, total, stages.PREFLIGHT_COLD)
        pre = way.preflight(run, _isolated_preflight(request, run_dir, preflight, cancel))

        record.stage("ncu")
        say(0, total, stages.COLLECT_NCU)
        collected = way.collect(run, pre)

        record.stage("extract")
        say(total, total, stages.EXTRACT)
        peak = device.dram_peak(pinning.current_device())
        result = run_result.of_ncu_run(request, run_dir, run_id, pre, collected.seconds, peak)
        collected.record(result.facts)
        result.seconds = time.monotonic() - start

        record.stage("save")
        save_result(result)
        record.passed(_variant_failures(result.checks, result.dropped))
    say(total, total, f"done in {result.seconds:.1f} s")
    return result


def time_request(
    request: ProfileRequest,
    pool: WorkerPool,
    *,
    runs_root: Path | None = None,
    device: str | None = None,
    cancel: threading.Event | None = None,
    on_progress: Progress | None = None,
) -> RunResult:
    """render -> pre-flight (warm) -> collect by timing every (variant, config) interleaved on
    the warm worker (CUDA events; perf_counter on a CPU) -> check -> store. No ncu process
    starts: the worker already has torch, the CUDA context and compiled kernels."""
    start = time.monotonic()
    where, say = device or _default_device(), _say(on_progress)
    with rendered_run(request, runs_root) as (run_id, run_dir, record):
        record.stage("pre-flight")
        opening(say, request, 0, stages.PREFLIGHT_WARM)
        pre = _isolated_preflight(request, run_dir, _on_worker(pool, where, cancel), cancel)()
        raise_if_broken(pre)
        if cancel is not None and cancel.is_set():
            raise RunCancelledError("The run was cancelled before timing started.")

        record.stage("timing")
        options = TimingOptions(
            min_runs=max(request.runs, 5),
            warmup_min=max(request.warmup, 1),
            skip=tuple(sorted(pre.dropped)),
            flush_l2=request.cache_control == "all",  # "none": as ncu's, caches kept warm
        )
        job = TimeJob(str(run_dir), where.split(":")[0], options)
        say(0, 0, stages.timing_plan(options, len(request.expanded_configs())))
        # A timing.TimingResult (that module imports torch: not imported here, so the server
        # and the CLI start where torch is not installed).
        with following(records.RunFiles.in_folder(run_dir).progress, on_progress):
            timed: Any = pool.run(where, job, request.timeout_s, cancel)

        record.stage("check")
        say(0, 0, stages.CHECK)
        result = run_result.of_timing(request, run_dir, run_id, pre, timed)
        result.seconds = time.monotonic() - start

        record.stage("save")
        save_result(result)
        record.passed(_variant_failures(result.checks, result.dropped))
    return result


# --- helpers ----------------------------------------------------------------------------------


def _isolated_preflight(
    request: ProfileRequest,
    run_dir: Path,
    warm: PreflightFn | None,
    cancel: threading.Event | None,
) -> Callable[[], PreflightResult]:
    """The pre-flight of a profile job: on the warm worker (``warm``) or in a new process, and
    where it broke with several variants, each candidate again beside the baseline
    (``isolate.py``: its crash is its own row)."""
    poll, where = _poller(cancel, None, None, 0), _default_device()

    def first() -> PreflightResult:
        if warm is not None:
            return warm(run_dir, request, where)
        return preflight_run.run_preflight(run_dir, request, where, poll=poll)

    def attributed() -> PreflightResult:
        return isolate.attributed(first, run_dir, request, where, poll)

    return attributed


def _on_worker(pool: WorkerPool, device: str | None, cancel: threading.Event | None) -> PreflightFn:
    """The pre-flight on ``pool``'s warm worker of ``device`` (None: the pipeline's device)."""

    def on_worker(run_dir: Path, request: ProfileRequest, here: str) -> PreflightResult:
        return warm_preflight(pool, run_dir, request, device or here, cancel)

    return on_worker


def _say(on_progress: Progress | None) -> Progress:
    def say(done: int, total: int, message: str) -> None:
        if on_progress is not None:
            on_progress(done, total, message)

    return say


def _default_device() -> str:
    from nsight_agent.engine.harness.runtime import default_device

    return default_device()


def _poller(
    cancel: threading.Event | None, on_progress: Progress | None, progress: Path | None, total: int
) -> Callable[[], None]:
    """Between looks at a running ncu process: a cancel raises; the harness's latest progress
    line (its calls done of ``total``) goes to ``on_progress`` when it is new."""
    shown: list[tuple[int, int, str] | None] = [None]

    def poll() -> None:
        if cancel is not None and cancel.is_set():
            raise RunCancelledError("The run was cancelled; its processes were killed.")
        if on_progress is None or progress is None:
            return
        now = latest(progress)
        if now is not None and now != shown[0]:
            shown[0] = now
            on_progress(now[0], total, now[2])

    return poll


__all__ = [
    "Job",
    "JobMode",
    "JobResult",
    "OutputCheck",
    "PreflightFn",
    "PreflightResult",
    "RunResult",
    "Warm",
    "default_runs_root",
    "load_run",
    "preflight",
    "profile",
    "raise_if_broken",
    "run_job",
    "save_result",
    "time_request",
]
