"""The request pipeline: pre-flight -> render -> collect under ncu -> extract -> aggregate.

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
from pathlib import Path

import pandas as pd

from nsight_agent.engine import measure, ncu, preflight_run
from nsight_agent.engine.extract import ActionRecord
from nsight_agent.engine.harness import render
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.preflight_run import raise_if_broken
from nsight_agent.engine.run_status import RunRecord, run_record
from nsight_agent.engine.runs import (
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
from nsight_agent.errors import (
    NcuError,
    NoKernelsProfiledError,
    ProfiledProcessError,
    RunCancelledError,
)
from nsight_agent.request import TIME_METRIC, ProfileRequest

Progress = Callable[[int, int, str], None]
# Runs the pre-flight of a rendered run folder on a device (cold: a new process; the server
# passes a warm worker's, which skips the interpreter and torch start-up).
PreflightFn = Callable[[Path, ProfileRequest, str], PreflightResult]

# Check failures that make the outputs incomparable: profiling such a variant is pointless.
CUDA_CACHE = ".cuda-cache"


class CancelledError(RunCancelledError):
    """The caller cancelled the run (``cancel`` was set); its processes were killed."""


@contextlib.contextmanager
def rendered_run(
    request: ProfileRequest, runs_root: Path | None
) -> Iterator[tuple[str, Path, RunRecord]]:
    """A new run folder, recorded in its ``status.json`` from here on, holding the request and
    the rendered harness: the start that every kind of run (pre-flight, ncu, timing) shares."""
    root = runs_root or default_runs_root()
    run_id, run_dir = new_run_dir(root)
    with run_record(run_dir, run_id) as record:
        record.stage("render")
        write_request(run_dir, request)
        render.write_run_files(request, run_dir, root / CUDA_CACHE)
        yield run_id, run_dir, record


def preflight(
    request: ProfileRequest,
    *,
    runs_root: Path | None = None,
    device: str | None = None,
    cancel: threading.Event | None = None,
) -> PreflightResult:
    """Run the harness once per config without ncu (on ``device``, default cuda if present).

    The run folder's status ends passed or failed (stage pre-flight), timed_out or cancelled.
    """
    with rendered_run(request, runs_root) as (run_id, run_dir, record):
        record.stage("pre-flight")
        result = preflight_run.run_preflight(
            run_dir, request, device or _default_device(), poll=_poller(cancel, None, None, 0)
        )
        result.run_id = run_id
        if result.ok or result.stage == "check":
            record.passed()
        else:
            record.failed(SourceError(result.stage or "entry", "\n".join(result.errors)))
    return result


def profile(
    request: ProfileRequest,
    *,
    runs_root: Path | None = None,
    on_progress: Progress | None = None,
    cancel: threading.Event | None = None,
    preflight: PreflightFn | None = None,
) -> RunResult:
    """Pre-flight, then profile every (variant, config, run) under ncu in one process.

    ``preflight`` replaces the cold pre-flight process (``worker.warm_preflight``)."""
    start = time.monotonic()
    ncu.find_ncu()  # fail before any work when ncu is missing
    with rendered_run(request, runs_root) as (run_id, run_dir, record):
        total = len(request.expanded_configs()) * len(request.effective_variants()) * request.runs
        say = on_progress or (lambda done, total, message: None)

        record.stage("pre-flight")
        say(0, total, "pre-flight: running the harness once without the profiler")
        if preflight is not None:
            pre = preflight(run_dir, request, _default_device())
        else:
            poll = _poller(cancel, None, None, 0)
            pre = preflight_run.run_preflight(run_dir, request, _default_device(), poll=poll)
        raise_if_broken(pre)

        record.stage("ncu")
        say(0, total, "profiling under ncu")
        result = _profile_under_ncu(request, run_dir, run_id, pre, cancel, on_progress, record)
        result.seconds = time.monotonic() - start
        record.stage("save")
        save_result(result)
        record.passed()
    say(total, total, f"done in {result.seconds:.1f} s")
    return result


def _profile_under_ncu(
    request: ProfileRequest,
    run_dir: Path,
    run_id: str,
    pre: PreflightResult,
    cancel: threading.Event | None,
    on_progress: Progress | None,
    record: RunRecord,
) -> RunResult:
    total = len(request.expanded_configs()) * len(request.effective_variants()) * request.runs
    metrics = list(request.metrics) or [TIME_METRIC]
    options = ncu.NcuOptions(
        metrics=metrics,
        sections=request.sections,
        replay_mode=request.replay_mode,
        cache_control=request.cache_control,
        clock_control=request.clock_control,
    )
    artifacts = artifact_paths(run_dir)
    try:
        done = ncu.collect(
            [ncu.python_executable(), "harness.py", "--device", "cuda"],
            options,
            report_path=artifacts["report"],
            log_path=artifacts["ncu_log"],
            output_path=artifacts["program_output"],
            timeout=request.timeout_s,
            error_path=run_dir / "error.json",
            cwd=run_dir,
            env=ncu.child_env(),
            poll=_poller(cancel, on_progress, run_dir / "progress.txt", total),
            tag=f"{run_id}.ncu",
        )
    except ProfiledProcessError as err:
        raise preflight_run.source_error(run_dir / "error.json", err.stderr_tail) from err
    except (NoKernelsProfiledError, NcuError) as err:
        # An early exit (os._exit at import or in the entry) looks like "no kernels".
        early = _ended_early(artifacts["manifest"], request)
        if early is not None:
            raise early from err
        raise
    early = _ended_early(artifacts["manifest"], request)
    if early is not None:
        raise early
    record.stage("extract")
    manifest = measure.read_manifest(artifacts["manifest"])
    params = request.param_names()
    configs = [tuple(c[k] for k in params) for c in request.expanded_configs()]
    combine = operator.add if request.combine_kernels == "sum" else None
    measured = measure.measure(
        artifacts["report"],
        manifest,
        metrics,
        configs,
        params,
        ignore_kernels=request.ignore_kernels,
        combine=combine,
    )
    variants = [v.name for v in request.effective_variants()]
    kernels = {
        v: list(dict.fromkeys(r.kernel for r in measured.records if r.annotation == v))
        for v in variants
    }
    most = most_kernels_per_run(measured.records, variants, request.ignore_kernels)
    checks = [OutputCheck(**c) for c in manifest.get("checks", [])] or pre.checks
    processed = _with_ok_column(measured.processed, request, checks)
    manifest["kernels"] = kernels
    artifacts["manifest"].write_text(json.dumps(manifest, indent=1))
    return RunResult(
        run_id=run_id,
        run_dir=run_dir,
        request=request,
        processed=processed,
        raw=measured.raw,
        checks=checks,
        kernels=kernels,
        warnings=_warnings(request, checks, kernels, most, pre),
        artifacts={k: p for k, p in artifacts.items() if p.exists()},
        seconds=done.seconds,
        cuda_build=pre.cuda_build,
        preflight=pre,
        extra={"profile_cuda_build": manifest.get("cuda_build")},
    )


# --- helpers ----------------------------------------------------------------------------------


def most_kernels_per_run(
    records: list[ActionRecord], variants: list[str], ignore: list[str]
) -> dict[str, int]:
    """Per variant, the most distinct kernels one call launched. Counted call by call: one
    config may launch another kernel than the next (a library picks an algorithm per size)
    without launching two per run."""
    per_call: dict[tuple[str, int], set[str]] = {}
    for r in records:
        if r.annotation in variants and r.call is not None and r.kernel not in ignore:
            per_call.setdefault((r.annotation, r.call), set()).add(r.kernel)
    return {
        v: max((len(k) for (a, _), k in per_call.items() if a == v), default=0) for v in variants
    }


def _ended_early(manifest: Path, request: ProfileRequest) -> SourceError | None:
    found = preflight_run.read_manifest(manifest)
    return preflight_run.early_exit(found, request, request.runs, 0)


def _default_device() -> str:
    from nsight_agent.engine.harness.runtime import default_device

    return default_device()


def _poller(
    cancel: threading.Event | None, on_progress: Progress | None, progress: Path | None, total: int
) -> Callable[[], None]:
    shown = [-1]

    def poll() -> None:
        if cancel is not None and cancel.is_set():
            raise CancelledError("The run was cancelled; its processes were killed.")
        if on_progress is None or progress is None or not progress.exists():
            return
        lines = progress.read_text().splitlines()
        if len(lines) != shown[0] and lines:
            shown[0] = len(lines)
            message = lines[-1].split(" ", 1)[-1]
            on_progress(len(lines), total, message)

    return poll


def _with_ok_column(
    processed: pd.DataFrame, request: ProfileRequest, checks: list[OutputCheck]
) -> pd.DataFrame:
    """OutputOK per row: no speedup may be read off a row whose outputs were wrong."""
    params = request.param_names()
    configs = request.expanded_configs()
    ok: dict[tuple[str, tuple[str, ...]], bool] = {}
    for c in checks:
        key = (c.variant, tuple(str(configs[c.config_index][k]) for k in params))
        ok[key] = ok.get(key, True) and c.ok
    out = processed.copy()
    out["OutputOK"] = [
        ok.get((str(row["Annotation"]), tuple(str(row[k]) for k in params)), False)
        for _, row in out.iterrows()
    ]
    return out


def _warnings(
    request: ProfileRequest,
    checks: list[OutputCheck],
    kernels: dict[str, list[str]],
    most_per_run: dict[str, int],
    pre: PreflightResult,
) -> list[str]:
    out = [
        f"variant {c.variant!r} is WRONG for config #{c.config_index} {c.config}: {c.message}; "
        "no speedup is claimed for it"
        for c in checks
        if not c.ok
    ]
    for variant, names in kernels.items():
        kept = [n for n in names if n not in request.ignore_kernels]
        most = most_per_run.get(variant, 0)
        if most > 1 and request.combine_kernels == "sum":
            out.append(
                f"variant {variant!r} launches up to {most} kernels per run ({', '.join(kept)}); "
                "their metrics are summed. Name helpers in ignore_kernels to drop them."
            )
    out += pre.notes
    return out


__all__ = [
    "CancelledError",
    "OutputCheck",
    "PreflightFn",
    "PreflightResult",
    "RunResult",
    "default_runs_root",
    "load_run",
    "preflight",
    "profile",
    "raise_if_broken",
    "save_result",
]
