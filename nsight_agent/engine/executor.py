"""Executors: where profiling jobs run, behind one interface the service calls.

    executor = LocalExecutor()                      # every GPU of this machine, one job each
    run = executor.profile(request, runs_root=root, on_progress=say, cancel=event)
    handle = executor.submit(Job(request, root))    # or asynchronously
    result = handle.result()                        # RunResult (PreflightResult for "preflight")
    executor.pool_info()                            # slots, busy, queued (for device_info)

A job is "profile this request into this runs root": ``run_job`` calls ``pipeline.profile``
(or ``pipeline.preflight`` for mode "preflight"), so every executor leaves the same run folder
and ``load_run`` reads it back whatever ran it.

``LocalExecutor`` runs one job per GPU at a time, first come first served; the others wait in
its queue (a cancelled job leaves the queue at once). Each slot is one GPU, named as this
process's ``CUDA_VISIBLE_DEVICES`` names it (or 0..N-1 as NVML counts them); a machine with no
GPU has one "cpu" slot. The job's child processes see only its GPU: the slot thread pins the
job (``pinning.pinned``) and ``ncu.child_env`` adds ``CUDA_VISIBLE_DEVICES`` from the pin.

Fairness: a comparison (every variant and config of one request) is one job, so it always runs
on one GPU, never split across GPUs whose clocks differ; independent jobs run in parallel.
``ray_executor.RayExecutor`` is the same interface over a Ray cluster.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Union

from nsight_agent.engine import pinning, pipeline, timed_run
from nsight_agent.engine.pinning import local_slots
from nsight_agent.engine.pipeline import CancelledError, Progress
from nsight_agent.engine.runs import PreflightResult, RunResult
from nsight_agent.engine.worker import WorkerPool, warm_preflight
from nsight_agent.errors import InvalidRequestError
from nsight_agent.request import ProfileRequest

JobMode = Literal["profile", "preflight", "timing"]
JobResult = Union[RunResult, PreflightResult]  # noqa: UP007 - a runtime alias on Python 3.10

__all__ = [
    "Executor",
    "Job",
    "JobFunction",
    "JobHandle",
    "JobMode",
    "JobResult",
    "LocalExecutor",
    "local_slots",
    "run_job",
]


@dataclass(frozen=True)
class Job:
    """One unit of work for one GPU: profile (or only pre-flight) ``request`` into
    ``runs_root`` (None: the default runs root of the process that owns the store)."""

    request: ProfileRequest
    runs_root: Path | None = None
    mode: JobMode = "profile"
    name: str = ""  # shown in pool_info (e.g. the tool that asked)


def run_job(
    job: Job,
    *,
    runs_root: Path | None = None,
    cancel: threading.Event | None = None,
    on_progress: Progress | None = None,
    preflight: pipeline.PreflightFn | None = None,
) -> JobResult:
    """Run one job here, in this process and thread (what every executor ends up calling).

    ``runs_root`` overrides the job's own (a Ray node profiles into a scratch root);
    ``preflight`` runs a profile job's pre-flight elsewhere (a warm worker)."""
    root = runs_root or job.runs_root
    if job.mode == "timing":
        raise InvalidRequestError(
            "A timing job runs on a warm worker, which this executor does not have.",
            "Give the local executor its workers (LocalExecutor(workers=...)), as the server does.",
        )
    if job.mode == "preflight":
        return pipeline.preflight(job.request, runs_root=root, cancel=cancel)
    return pipeline.profile(
        job.request, runs_root=root, on_progress=on_progress, cancel=cancel, preflight=preflight
    )


# What a LocalExecutor calls for each job, in the slot's thread with the slot's pin set.
JobFunction = Callable[[Job, "threading.Event | None", "Progress | None"], JobResult]


def _run_job(job: Job, cancel: threading.Event | None, on_progress: Progress | None) -> JobResult:
    return run_job(job, cancel=cancel, on_progress=on_progress)


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

    def time(
        self,
        request: ProfileRequest,
        *,
        runs_root: Path | None = None,
        cancel: threading.Event | None = None,
    ) -> RunResult:
        """The timing path as a job: queued for a GPU like the ncu jobs, so the two never
        measure on one GPU at once (ncu's replay and clock locking would skew the timing)."""
        result = self.run(Job(request, runs_root, mode="timing"), cancel=cancel)
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


# --- the local executor -----------------------------------------------------------------------


@dataclass
class _Slot:
    device: str
    job: JobHandle | None = None
    thread: threading.Thread | None = None
    done: int = 0


@dataclass
class _Queued:
    handle: JobHandle
    on_progress: Progress | None = field(default=None)


class LocalExecutor(Executor):
    """One job per GPU of this machine at a time; the others queue (first come, first served).

    ``slots``: the devices to use (default ``local_slots()``); ``job_function``: what runs a
    job in a slot (default ``run_job``; tests pass a stand-in); ``workers``: warm workers that
    run each profile job's pre-flight on the slot's GPU, so only the ncu process starts cold.
    """

    name = "local"

    def __init__(
        self,
        slots: list[str] | None = None,
        *,
        job_function: JobFunction | None = None,
        workers: WorkerPool | None = None,
    ) -> None:
        self._devices = list(slots) if slots is not None else None
        self._workers = workers
        self.runs_timing = workers is not None
        self._function = job_function or (_run_job if workers is None else self._run_job_warm)
        self._queue: collections.deque[_Queued] = collections.deque()
        self._cond = threading.Condition()
        self._slots: list[_Slot] = []
        self._closed = False

    def slots(self) -> list[str]:
        with self._cond:
            self._start_slots()
            return [s.device for s in self._slots]

    def submit(
        self,
        job: Job,
        *,
        cancel: threading.Event | None = None,
        on_progress: Progress | None = None,
    ) -> JobHandle:
        handle = JobHandle(job, cancel, on_cancel=self._drop_if_queued)
        with self._cond:
            if self._closed:
                raise RuntimeError("the executor is closed")
            self._start_slots()
            busy = sum(1 for s in self._slots if s.job is not None)
            ahead, total = busy + len(self._queue), len(self._slots)
            self._queue.append(_Queued(handle, on_progress))
            self._cond.notify()
        if ahead >= total and on_progress is not None:
            on_progress(0, 1, f"queued: {ahead} job(s) ahead for {total} GPU slot(s)")
        return handle

    def pool_info(self) -> dict[str, Any]:
        with self._cond:
            self._start_slots()
            slots = [
                {
                    "device": s.device,
                    "state": "busy" if s.job is not None else "idle",
                    "job": s.job.job.name if s.job is not None else None,
                    "jobs_done": s.done,
                }
                for s in self._slots
            ]
            return {
                "executor": self.name,
                "slots": slots,
                "gpus": sum(1 for s in self._slots if s.device != "cpu"),
                "running": sum(1 for s in self._slots if s.job is not None),
                "queued": len(self._queue),
            }

    def close(self) -> None:
        """Refuse new jobs, cancel the queued ones; running jobs finish (or are cancelled by
        their own event)."""
        with self._cond:
            self._closed = True
            dropped = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        for q in dropped:
            q.handle.future.set_exception(CancelledError("The executor was closed."))

    # --- inside -------------------------------------------------------------------------------

    def _run_job_warm(
        self, job: Job, cancel: threading.Event | None, on_progress: Progress | None
    ) -> JobResult:
        """``run_job`` with the pre-flight on the warm worker of this thread's slot; a timing
        job runs there whole."""
        assert self._workers is not None
        pool, device = self._workers, self._worker_device(pinning.current_device())
        if job.mode == "timing":
            return timed_run.time_request(
                job.request, pool, runs_root=job.runs_root, device=device, cancel=cancel
            )

        def warm(run_dir: Path, request: ProfileRequest, _device: str) -> PreflightResult:
            return warm_preflight(pool, run_dir, request, device, cancel)

        return run_job(job, cancel=cancel, on_progress=on_progress, preflight=warm)

    def _worker_device(self, slot: str | None) -> str:
        """The worker pool's name for a slot: the slot's position, as ``cuda:N`` ("cpu" stays).

        Slots are this process's CUDA_VISIBLE_DEVICES entries (maybe UUIDs) in order, and the
        worker maps position N back to entry N."""
        devices = [s.device for s in self._slots]
        if slot is None or slot == "cpu" or slot not in devices:
            return "cpu" if slot == "cpu" or not devices else "cuda:0"
        return f"cuda:{devices.index(slot)}"

    def _start_slots(self) -> None:
        """Create the slot threads on first use (counting GPUs may import NVML or torch)."""
        if self._slots:
            return
        for device in self._devices if self._devices is not None else local_slots():
            slot = _Slot(device)
            slot.thread = threading.Thread(
                target=self._serve, args=(slot,), name=f"nsight-agent-slot-{device}", daemon=True
            )
            self._slots.append(slot)
            slot.thread.start()

    def _drop_if_queued(self, handle: JobHandle) -> None:
        with self._cond:
            found = [q for q in self._queue if q.handle is handle]
            for q in found:
                self._queue.remove(q)
        if found and not handle.future.done():
            handle.future.set_exception(
                CancelledError("The job was cancelled while it waited for a GPU.")
            )

    def _serve(self, slot: _Slot) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                item = self._queue.popleft()
                slot.job = item.handle
            try:
                self._run_one(slot, item)
            finally:
                with self._cond:
                    slot.job = None
                    slot.done += 1

    def _run_one(self, slot: _Slot, item: _Queued) -> None:
        handle = item.handle
        if handle.future.done():
            return
        if handle.cancel_event.is_set():
            handle.future.set_exception(CancelledError("The job was cancelled before it ran."))
            return
        handle.device, handle.started, handle.attempts = slot.device, time.time(), 1
        try:
            with pinning.pinned(slot.device):
                result = self._function(handle.job, handle.cancel_event, item.on_progress)
        except BaseException as err:  # handed to the waiting caller
            handle.ended = time.time()
            handle.future.set_exception(err)
        else:
            handle.ended = time.time()
            handle.future.set_result(result)
