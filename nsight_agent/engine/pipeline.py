"""The pipeline: the order of a job's stages, stated once. Every executor ends in ``run_job``
(the local one in its GPU slot threads, the Ray one inside each GPU host), and each stage
lives in its room of the engine:

    stage       profile (ncu)                     timing (no counters)        pre-flight only
    render      harness/render.py                 same                        same
    pre-flight  collection/preflight_run.py       on the warm worker          cold or warm
                (cold, or on the warm worker)     (worker/pool.py)
    collect     collection/ncu_run.py (one        worker/timing.py on the
                process: pre-launched or cold;    warm worker
                early_ncu.py: beside the pre-flight, on request)
    extract     collection/extract.py             (the timing loop's own
    aggregate   collection/measure.py,            samples: worker/timing.py)
                collection/aggregate.py
    check       collection/outputs.py             same
    store       store/runs.py, store/run_status.py (status.json from render to the end)

Each run lives in ``<runs_root>/<run_id>/``: request.json, the user's source file(s), the
rendered harness.py, manifest.json, report.ncu-rep, ncu.log, program-output.log, raw.csv,
processed.csv and result.json (what ``load_run`` rebuilds a result from). The pre-flight runs
the same harness without ncu first, so a broken source costs seconds, not an ncu run.
"""

from __future__ import annotations

import contextlib
import json
import operator
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union

from nsight_agent.engine import device, pinning
from nsight_agent.engine.collection import (
    budget,
    early_ncu,
    isolate,
    measure,
    ncu,
    ncu_run,
    outputs,
    plain_collect,
    preflight_run,
    work,
)
from nsight_agent.engine.collection.preflight_run import raise_if_broken
from nsight_agent.engine.harness import render
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.store import records
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.engine.store.run_status import RunRecord, run_record
from nsight_agent.engine.store.runs import (
    OutputCheck,
    PreflightResult,
    RunResult,
    artifact_paths,
    default_runs_root,
    load_run,
    new_run_dir,
    save_result,
    write_request,
)
from nsight_agent.engine.worker.pool import TimeJob, TimingOptions, WorkerPool, warm_preflight
from nsight_agent.errors import InvalidRequestError, RunCancelledError, UnknownMetricError
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
    """The warm worker that serves a job on this GPU (``device`` as the pool names it)."""

    pool: WorkerPool
    device: str


def run_job(
    job: Job,
    *,
    runs_root: Path | None = None,
    cancel: threading.Event | None = None,
    on_progress: Progress | None = None,
    warm: Warm | None = None,
    targets: ncu_run.TargetSource | None = None,
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
            job.request, warm.pool, runs_root=root, device=warm.device, cancel=cancel
        )
    if job.mode == "preflight":
        return preflight(job.request, runs_root=root, cancel=cancel)
    warm_pre: PreflightFn | None = None
    if warm is not None:

        def warm_pre(run_dir: Path, request: ProfileRequest, _device: str) -> PreflightResult:
            return warm_preflight(warm.pool, run_dir, request, warm.device, cancel)

    return profile(
        job.request,
        runs_root=root,
        on_progress=on_progress,
        cancel=cancel,
        preflight=warm_pre,
        targets=targets,
    )


# --- render: the start every kind of run shares -----------------------------------------------


@contextlib.contextmanager
def rendered_run(
    request: ProfileRequest, runs_root: Path | None
) -> Iterator[tuple[str, Path, RunRecord]]:
    """A new run folder, recorded in its ``status.json`` from here on, holding the request and
    the rendered harness."""
    root = runs_root or default_runs_root()
    run_id, run_dir = new_run_dir(root)
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
    targets: ncu_run.TargetSource | None = None,
) -> RunResult:
    """render -> pre-flight -> collect (every variant, config and run under ncu in one
    process) -> extract and aggregate -> check -> store.

    ``preflight``: a warm worker's pre-flight (``run_job``); ``targets``: ready ncu targets."""
    start = time.monotonic()
    ncu.find_ncu()  # fail before any work when ncu is missing
    with rendered_run(request, runs_root) as (run_id, run_dir, record):
        total = len(request.expanded_configs()) * len(request.effective_variants()) * request.runs
        say = on_progress or (lambda done, total, message: None)

        record.stage("pre-flight")
        say(0, total, "pre-flight: running the harness once without the profiler")
        poll, where = _poller(cancel, None, None, 0), _default_device()
        first = preflight or (lambda d, r, w: preflight_run.run_preflight(d, r, w, poll=poll))
        watch = _poller(cancel, on_progress, records.RunFiles.in_folder(run_dir).progress, total)
        early = early_ncu.start(request, run_dir, run_id, watch, targets)  # None: staged
        attributed = lambda: isolate.attributed(  # noqa: E731 - the pre-flight, named once
            lambda: first(run_dir, request, where), run_dir, request, where, poll
        )
        pre = early_ncu.preflight_beside(early, attributed)  # raises for a broken source
        record.stage("ncu")
        say(0, total, "profiling under ncu")
        skip, counts = sorted(pre.dropped), preflight_run.expected_kernels(pre)  # counts: attach
        asked, plan = budget.plan_request(request, counts, runs_root or default_runs_root(), skip)
        collected = early.go(skip, counts) if early is not None else plain_collect.collect(
            asked, pre, run_dir, run_id, watch, skip, targets, counts
        )  # fmt: skip

        record.stage("extract")
        result = _measured_run(request, run_dir, run_id, pre, collected.seconds)
        result.facts.collection, result.facts.collected_plain = collected.path, collected.plain
        if plan:
            result.facts.budget, result.facts.budget_left_out = plan.line(), plan.left_out
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
) -> RunResult:
    """render -> pre-flight (warm) -> collect by timing every (variant, config) interleaved on
    the warm worker (CUDA events; perf_counter on a CPU) -> check -> store. No ncu process
    starts: the worker already has torch, the CUDA context and compiled kernels."""
    start = time.monotonic()
    where = device or _default_device()
    with rendered_run(request, runs_root) as (run_id, run_dir, record):
        record.stage("pre-flight")
        pre = isolate.attributed(
            lambda: warm_preflight(pool, run_dir, request, where, cancel),
            run_dir,
            request,
            _default_device(),  # the crashing variants are found in new processes
            _poller(cancel, None, None, 0),
        )
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
        # A timing.TimingResult (that module imports torch: not imported here, so the server
        # and the CLI start where torch is not installed).
        timed: Any = pool.run(where, job, request.timeout_s, cancel)

        record.stage("check")
        frame = timed.frame()
        checks = [OutputCheck(**c) for c in timed.checks] or pre.checks
        result = RunResult(
            run_id=run_id,
            run_dir=run_dir,
            request=request,
            processed=frame,
            raw=frame.iloc[0:0],
            checks=checks,
            kernels={v.name: [] for v in request.effective_variants()},
            warnings=[
                *timed.notes,
                f"measured by {timed.method} (no ncu, no counters)",
                *outputs.short_kernel_warning(frame, timed.method),
            ],
            artifacts={k: p for k, p in artifact_paths(run_dir).items() if p.exists()},
            seconds=time.monotonic() - start,
            preflight=pre,
            facts=RunFacts(
                method=timed.method, order=timed.order[:64], cpu_probe_ns=timed.cpu_probe_ns
            ),
            dropped={**pre.dropped, **timed.dropped},
            suspects=outputs.first_per_config([*pre.suspects, *timed.suspects]),
        )

        record.stage("save")
        save_result(result)
        record.passed(_variant_failures(result.checks, result.dropped))
    return result


# --- the ncu stages -------------------------------------------------------------------------


def _measured_run(
    request: ProfileRequest, run_dir: Path, run_id: str, pre: PreflightResult, seconds: float
) -> RunResult:
    """extract and aggregate (report + manifest -> rows -> frame), then check (outputs and
    kernel counts -> OutputOK, warnings)."""
    files = records.RunFiles.in_folder(run_dir)
    metrics = work.row_metrics(request)
    added = work.added_metrics(request)  # read for the work check, not asked for
    manifest = measure.read_manifest(files.manifest)
    params = request.param_names()
    configs = [tuple(c[k] for k in params) for c in request.expanded_configs()]
    baseline = request.baseline_name()
    droppable = {v.name: "" for v in request.effective_variants() if v.name != baseline}

    def measured_with(names: list[str]) -> measure.Measured:
        return measure.measure(
            files.report,
            manifest,
            names,
            configs,
            params,
            ignore_kernels=request.ignore_kernels,
            combine=operator.add if request.combine_kernels == "sum" else None,
            droppable=droppable,
            expected_kernels=preflight_run.expected_kernels(pre),
        )

    try:
        measured = measured_with(metrics)
    except UnknownMetricError as err:  # a report without the work metrics: no work check
        if err.metric not in added:
            raise
        measured = measured_with([m for m in metrics if m not in added])
    uneven = {
        name: records.DroppedVariant(verdict="suspect", stage="profile", message=why)
        for name, why in droppable.items()
        if why
    }
    variants = [v.name for v in request.effective_variants()]
    kernels = {
        v: list(dict.fromkeys(r.kernel for r in measured.records if r.annotation == v))
        for v in variants
    }
    most = outputs.most_kernels_per_run(measured.records, variants, request.ignore_kernels)
    checks = [OutputCheck(**c) for c in manifest.get("checks", [])] or pre.checks
    manifest["kernels"] = kernels
    found_suspects = [
        *records.suspects_from(manifest.get("suspects")),
        *outputs.floor_suspects(
            measured.processed,
            request,
            manifest.get("out_bytes") or [],
            device.dram_peak(pinning.current_device()),
        ),
        *work.work_suspects(measured.processed, request),
    ]
    processed, raw = work.without(measured.processed, added), work.without(measured.raw, added)
    files.manifest.write_text(json.dumps(manifest, indent=1))
    facts = measured.ncu_cost(seconds)
    facts.profile_cuda_build = manifest.get("cuda_build")
    return RunResult(
        run_id=run_id,
        run_dir=run_dir,
        request=request,
        processed=outputs.with_ok_column(processed, request, checks),
        raw=raw,
        checks=checks,
        kernels=kernels,
        warnings=outputs.ncu_run_warnings(request, checks, kernels, most, pre),
        artifacts={k: p for k, p in artifact_paths(run_dir).items() if p.exists()},
        seconds=seconds,
        cuda_build=pre.cuda_build,
        preflight=pre,
        facts=facts,
        dropped={**pre.dropped, **records.dropped_from(manifest.get("dropped")), **uneven},
        suspects=outputs.first_per_config(found_suspects),
    )


# --- helpers ----------------------------------------------------------------------------------


def _default_device() -> str:
    from nsight_agent.engine.harness.runtime import default_device

    return default_device()


def _poller(
    cancel: threading.Event | None, on_progress: Progress | None, progress: Path | None, total: int
) -> Callable[[], None]:
    shown = [-1]

    def poll() -> None:
        if cancel is not None and cancel.is_set():
            raise RunCancelledError("The run was cancelled; its processes were killed.")
        if on_progress is None or progress is None or not progress.exists():
            return
        lines = progress.read_text().splitlines()
        if len(lines) != shown[0] and lines:
            shown[0] = len(lines)
            message = lines[-1].split(" ", 1)[-1]
            on_progress(len(lines), total, message)

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
