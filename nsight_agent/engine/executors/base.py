"""Executors: where profiling jobs run, behind one interface the service calls.

    executor = LocalExecutor()                      # every GPU of this machine, one job each
    run = executor.profile(request, runs_root=root, on_progress=say, cancel=event)
    handle = executor.submit(Job(request, root))    # or asynchronously
    result = handle.result()                        # RunResult (PreflightResult for "preflight")
    executor.pool_info()                            # slots, busy, queued (for device_info)

A job (``pipeline.Job``) is "profile (or pre-flight, or time) this request into this runs
root"; every executor ends in ``pipeline.run_job``, so every executor leaves the same run
folder and ``load_run`` reads it back whatever ran it. ``local.LocalExecutor`` runs jobs on
this machine's GPUs, ``ray.executor.RayExecutor`` on a Ray cluster's.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from nsight_agent.engine.pipeline import Job, JobMode, JobResult, Progress, run_job
from nsight_agent.engine.store.runs import RunResult
from nsight_agent.request import ProfileRequest

__all__ = [
    "Executor",
    "Job",
    "JobFunction",
    "JobHandle",
    "JobMode",
    "JobResult",
    "run_job",
]

# What a LocalExecutor calls for each job, in the slot's thread with the slot's pin set.
JobFunction = Callable[[Job, "threading.Event | None", "Progress | None"], JobResult]


class JobHandle:
    """A submitted job: wait for its result, cancel it, see where it runs."""

    def __init__(
        self,
        job: Job,
        cancel: threading.Event | None = None,
        on_cancel: Callable[[JobHandle], None] | None = None,
    ) -> None:
        self.job = job
        self.cancel_event = cancel if cancel is not None else threading.Event()
        self.future: concurrent.futures.Future[JobResult] = concurrent.futures.Future()
        self.device: str | None = None  # the slot (local) or node/GPU (ray) once it runs
        self.started: float | None = None
        self.ended: float | None = None
        self.attempts = 0  # runs started (a Ray job lost with its node runs again)
        self.where: dict[str, Any] = {}  # ray: node, gpu, pid of the task
        self._on_cancel = on_cancel

    def cancel(self) -> None:
        """Ask the job to stop: a queued job leaves the queue, a running one is killed."""
        self.cancel_event.set()
        if self._on_cancel is not None:
            self._on_cancel(self)

    def done(self) -> bool:
        return self.future.done()

    def result(self, timeout: float | None = None) -> JobResult:
        """Wait for the job (watching the cancel event while it waits) and return or raise."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = 0.1 if deadline is None else max(0.0, min(0.1, deadline - time.monotonic()))
            try:
                return self.future.result(timeout=step)
            except concurrent.futures.TimeoutError:
                if self.cancel_event.is_set() and self._on_cancel is not None:
                    self._on_cancel(self)
                if deadline is not None and time.monotonic() >= deadline:
                    raise


class Executor(ABC):
    """Where jobs run. ``submit`` returns at once; ``run`` and ``profile`` block."""

    name = "executor"
    # Whether ncu must be on this machine (a local pool) or on the nodes (a cluster).
    checks_ncu_here = True
    # Whether timing jobs (method="timing", on warm workers) can be queued here.
    runs_timing = False

    @abstractmethod
    def submit(
        self,
        job: Job,
        *,
        cancel: threading.Event | None = None,
        on_progress: Progress | None = None,
    ) -> JobHandle: ...

    @abstractmethod
    def pool_info(self) -> dict[str, Any]:
        """What the pool holds and does: slots or nodes, GPUs, jobs running and queued."""

    def warm_up(self) -> None:  # noqa: B027 - optional for executors holding nothing warm
        """Start, in the background of a serving process, what a first job would wait for."""

    def wait_warm(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for what ``warm_up`` started to be ready to serve; whether
        it is (an executor holding nothing warm always is)."""
        return True

    def close(self) -> None:  # noqa: B027 - optional for executors holding nothing
        """Stop taking jobs and let go of what the executor holds."""

    def run(
        self,
        job: Job,
        *,
        cancel: threading.Event | None = None,
        on_progress: Progress | None = None,
    ) -> JobResult:
        """Submit ``job`` and wait for it; ``cancel`` set while it waits cancels it."""
        return self.submit(job, cancel=cancel, on_progress=on_progress).result()

    def profile(
        self,
        request: ProfileRequest,
        *,
        runs_root: Path | None = None,
        on_progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> RunResult:
        """``pipeline.profile``'s signature, run by this executor."""
        result = self.run(Job(request, runs_root), cancel=cancel, on_progress=on_progress)
        assert isinstance(result, RunResult)
        return result

    def __enter__(self) -> Executor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
