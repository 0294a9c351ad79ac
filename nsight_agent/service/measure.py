"""The one measuring call every use case and front end goes through.

``measure(request, method, where)``: under ncu (``method="ncu"``) on the executor in use, or
counter-free on a warm worker (``"timing"``); the executor queues either kind on its GPUs
(the server's local slots, or a Ray pool's hosts). Without an executor the job runs here, in
this thread; without a worker pool a timing job gets one of its own, closed when it ends.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from nsight_agent.engine import pipeline
from nsight_agent.engine.collection import ncu
from nsight_agent.engine.executors.base import Executor
from nsight_agent.engine.pipeline import PreflightResult, Progress, RunResult
from nsight_agent.engine.store import retention
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.errors import NcuNotFoundError
from nsight_agent.request import ProfileRequest

# The front ends name these types; they come from the engine through this module only.
__all__ = ["Executor", "Measuring", "Method", "Progress", "RunResult", "WorkerPool", "measure"]

Method = Literal["ncu", "timing"]


@dataclass(frozen=True)
class Measuring:
    """Where and how a use case measures: the runs folder, the executor (None: here, in this
    thread), the warm workers of the timing path (None: one started for the call), and the
    caller's progress hook and cancel event."""

    runs_root: Path | None = None
    executor: Executor | None = None
    workers: WorkerPool | None = None
    on_progress: Progress | None = None
    cancel: threading.Event | None = None

    def with_calls(self, on_progress: Progress | None, cancel: threading.Event | None) -> Measuring:
        """The same place, for one call with its own progress hook and cancel event."""
        return replace(self, on_progress=on_progress, cancel=cancel)


def measure(request: ProfileRequest, method: Method, where: Measuring) -> RunResult:
    """Run ``request`` by ``method``; afterwards the retention policy trims the runs folder
    (newest runs stay)."""
    run = _time(request, where) if method == "timing" else _profile(request, where)
    retention.prune(run.run_dir.parent, *retention.policy())
    return run


def _profile(request: ProfileRequest, where: Measuring) -> RunResult:
    """Pre-flight, then the ncu run; without ncu here (and an executor that profiles here),
    the pre-flight alone and a clear error."""
    executor = where.executor
    if executor is None or executor.checks_ncu_here:
        ncu_or_preflight(request, where.runs_root, where.cancel)
    if executor is None:
        return pipeline.profile(
            request, runs_root=where.runs_root, on_progress=where.on_progress, cancel=where.cancel
        )
    return executor.profile(
        request, runs_root=where.runs_root, on_progress=where.on_progress, cancel=where.cancel
    )


def _time(request: ProfileRequest, where: Measuring) -> RunResult:
    """The counter-free path: a warm worker pre-flights and times the variants interleaved;
    an executor that queues timing jobs runs it on one of its GPUs, never beside an ncu job."""
    executor = where.executor
    if executor is not None and executor.runs_timing:
        return executor.time(request, runs_root=where.runs_root, cancel=where.cancel)
    with _workers(where.workers) as pool:
        return pipeline.time_request(request, pool, runs_root=where.runs_root, cancel=where.cancel)


@contextlib.contextmanager
def _workers(given: WorkerPool | None) -> Iterator[WorkerPool]:
    """The caller's pool, or one of our own for this call, closed when it ends."""
    if given is not None:
        yield given
        return
    with WorkerPool() as own:
        yield own


def preflight_text(pre: PreflightResult) -> str:
    """What the pre-flight showed, for an answer that cannot go on to ncu."""
    ran = (
        f"The pre-flight passed on {pre.device}: the source imports, and setup and every entry "
        "ran on each config"
    )
    if pre.ok:
        checked = ", outputs checked" if pre.checks else ""
        return f"{ran}{checked}; only the profiler is missing."
    wrong = "; ".join(pre.errors[:3]) + (" ..." if len(pre.errors) > 3 else "")
    return (
        f"{ran}, but some outputs are wrong ({wrong}); with ncu those variants would be "
        "profiled and reported 'incorrect'."
    )


def ncu_or_preflight(
    request: ProfileRequest, runs_root: Path | None, cancel: threading.Event | None = None
) -> None:
    """Return when ncu is here. Without it, run the harness once (on the CPU when there is
    no GPU) so source errors still come first, then raise "ncu not found" with what the
    pre-flight showed (and its run id)."""
    try:
        ncu.find_ncu()
    except NcuNotFoundError as err:
        pre = pipeline.preflight(request, runs_root=runs_root, cancel=cancel)
        pipeline.raise_if_broken(pre)  # a SourceError with stage and line
        text = f"{err.message} {preflight_text(pre)} (pre-flight run {pre.run_id})"
        raise NcuNotFoundError(text, err.hint) from err
