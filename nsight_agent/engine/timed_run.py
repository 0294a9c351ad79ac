"""The counter-free path of a request: pre-flight and interleaved CUDA-event timing on a warm
worker, kept as a run like an ncu run (same folder, same RunResult, same views).

No ncu process starts: the worker (engine/worker.py) already has torch, the CUDA context and
compiled kernels, so a call costs the work itself. The rows are the engine's processed columns
plus ``Method`` (cuda_events, or perf_counter on a CPU-only machine).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from nsight_agent.engine import preflight_run
from nsight_agent.engine.harness.runtime import default_device
from nsight_agent.engine.pipeline import rendered_run
from nsight_agent.engine.runs import (
    OutputCheck,
    RunResult,
    artifact_paths,
    save_result,
)
from nsight_agent.engine.worker import TimeJob, WorkerPool, warm_preflight
from nsight_agent.errors import RunCancelledError
from nsight_agent.request import ProfileRequest


def time_request(
    request: ProfileRequest,
    pool: WorkerPool,
    *,
    runs_root: Path | None = None,
    device: str | None = None,
    cancel: threading.Event | None = None,
) -> RunResult:
    """Pre-flight on the warm worker, then time every (variant, config) interleaved."""
    start = time.monotonic()
    where = device or default_device()
    with rendered_run(request, runs_root) as (run_id, run_dir, record):
        record.stage("pre-flight")
        pre = warm_preflight(pool, run_dir, request, where, cancel)
        preflight_run.raise_if_broken(pre)
        if cancel is not None and cancel.is_set():
            raise RunCancelledError("The run was cancelled before timing started.")
        record.stage("timing")
        options: dict[str, float] = {
            "min_runs": max(request.runs, 5),
            "warmup_min": max(request.warmup, 1),
        }
        options |= {k: v for k, v in (("rtol", request.rtol), ("atol", request.atol)) if v}
        result: Any = pool.run(
            where, TimeJob(str(run_dir), where.split(":")[0], options), request.timeout_s, cancel
        )
        # A timing.TimingResult (that module imports torch: not imported here, so the server
        # and the CLI start where torch is not installed).
        frame = result.frame()
        checks = [OutputCheck(**c) for c in result.checks] or pre.checks
        variants = [v.name for v in request.effective_variants()]
        out = RunResult(
            run_id=run_id,
            run_dir=run_dir,
            request=request,
            processed=frame,
            raw=frame.iloc[0:0],
            checks=checks,
            kernels={v: [] for v in variants},
            warnings=[
                *result.notes,
                f"measured by {result.method} (no ncu, no counters)",
                *short_kernel_warning(frame, result.method),
            ],
            artifacts={k: p for k, p in artifact_paths(run_dir).items() if p.exists()},
            seconds=time.monotonic() - start,
            preflight=pre,
            extra={"method": result.method, "order": result.order[:64]},
        )
        record.stage("save")
        save_result(out)
        record.passed()
    return out


# Below this, CUDA events read a kernel's time with a few microseconds of launch and event
# overhead that ncu's gpu__time_duration leaves out: 15-48 % high from 4 to 31 us on the H200
# (docs/BENCHMARKS.md), within 4 % above 50 us.
SHORT_KERNEL_NS = 50_000.0


def short_kernel_warning(frame: Any, method: str) -> list[str]:
    """One warning when CUDA-event medians are short enough to be read high."""
    if method != "cuda_events" or "MedianValue" not in getattr(frame, "columns", ()):
        return []
    short = [float(v) for v in frame["MedianValue"] if float(v) < SHORT_KERNEL_NS]
    if not short:
        return []
    return [
        f"{len(short)} row(s) under 50 us (shortest {min(short) / 1e3:.1f} us): CUDA-event "
        "times this short read 15-48 % above ncu's kernel duration (launch and event "
        "overhead); compare them with method='ncu'"
    ]
