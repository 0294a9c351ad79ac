"""The local executor: one job per GPU of this machine at a time, the others queued.

``LocalExecutor`` runs jobs first come first served; a cancelled job leaves the queue at once.
Each slot is one GPU, named as this process's ``CUDA_VISIBLE_DEVICES`` names it (or 0..N-1 as
NVML counts them); a machine with no GPU has one "cpu" slot. The job's child processes see
only its GPU: the slot thread pins the job (``pinning.pinned``) and ``process.child_env`` adds
``CUDA_VISIBLE_DEVICES`` from the pin.

Fairness: a comparison (every variant and config of one request) is one job, so it always runs
on one GPU, never split across GPUs whose clocks differ; independent jobs run in parallel.

A job whose sources build a library (a candidate's ``load_inline``, the ``cuda`` language)
builds it first, holding no slot (``build_ahead.py``), and queues once it is built.

Each GPU slot can also keep pre-launched ncu targets (``worker/targets.py``; ``targets`` or
``NSIGHT_AGENT_TARGETS``, default 1; 0 off; docs/ARCHITECTURE.md), started at the first
profile job, replenished after each take, killed at ``close``; a profile job's collect takes
one when it is ready.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsight_agent.engine import pinning
from nsight_agent.engine.executors import build_ahead, first_profile
from nsight_agent.engine.executors.base import Executor, JobFunction, JobHandle
from nsight_agent.engine.executors.build_ahead import BuildsAhead
from nsight_agent.engine.pinning import local_slots
from nsight_agent.engine.pipeline import Job, JobResult, Progress, Warm, run_job
from nsight_agent.engine.worker import first_ncu
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.engine.worker.targets import COUNT_ENV, TargetPool, configured_count
from nsight_agent.errors import RunCancelledError

__all__ = ["LocalExecutor", "local_slots"]


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
    run each profile job's pre-flight on the slot's GPU, so only the ncu process starts cold;
    ``targets``: pre-launched ncu targets per GPU slot (default ``NSIGHT_AGENT_TARGETS``, else
    1; 0 off). Only ``run_job`` uses them, and a "cpu" slot only when a number is given
    (``targets`` or the variable: a stand-in ncu that runs the target on the CPU, in tests).
    ``builds``: what builds a job's sources before it queues (default: ``BuildsAhead`` with
    ``run_job``, unless ``NSIGHT_AGENT_BUILD_AHEAD=0``; none with a stand-in job function).
    """

    name = "local"

    def __init__(
        self,
        slots: list[str] | None = None,
        *,
        job_function: JobFunction | None = None,
        workers: WorkerPool | None = None,
        targets: int | None = None,
        builds: BuildsAhead | None = None,
    ) -> None:
        self._devices = list(slots) if slots is not None else None
        self._workers = workers
        self.runs_timing = workers is not None
        self._function = job_function or self._run_job_here
        self._target_count = configured_count() if targets is None else max(0, targets)
        self._targets_on_cpu = targets is not None or COUNT_ENV in os.environ
        self._targets_wanted = job_function is None
        wanted = job_function is None and build_ahead.enabled()
        self._builds = builds if builds is not None else (BuildsAhead() if wanted else None)
        self._pools: dict[str, TargetPool] = {}
        self._first_runs: dict[str, first_ncu.FirstRun] = {}  # the warm-up's, by slot
        self._first_profiles: dict[str, first_profile.FirstProfile] = {}  # likewise
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
        plan = self._builds.plan(job) if self._builds is not None else None
        if plan is not None and self._builds is not None:  # queued once its sources are built
            with self._cond:
                if self._closed:
                    raise RuntimeError("the executor is closed")
                self._start_slots()
                if job.mode == "profile":
                    self._start_targets()  # they start while it builds
            self._builds.start(
                handle, plan, on_progress, lambda: self._queue_job(handle, on_progress)
            )
            return handle
        self._queue_job(handle, on_progress)
        return handle

    def _queue_job(self, handle: JobHandle, on_progress: Progress | None) -> None:
        job = handle.job
        with self._cond:
            if self._closed:
                raise RuntimeError("the executor is closed")
            self._start_slots()
            if job.mode == "profile":
                self._start_targets()
            busy = sum(1 for s in self._slots if s.job is not None)
            ahead, total = busy + len(self._queue), len(self._slots)
            self._queue.append(_Queued(handle, on_progress))
            self._cond.notify()
        if ahead >= total and on_progress is not None:
            on_progress(0, 1, f"queued: {ahead} job(s) ahead for {total} GPU slot(s)")

    def pool_info(self) -> dict[str, Any]:
        with self._cond:
            self._start_slots()
            slots: list[dict[str, Any]] = [
                {
                    "device": s.device,
                    "state": "busy" if s.job is not None else "idle",
                    "job": s.job.job.name if s.job is not None else None,
                    "jobs_done": s.done,
                }
                for s in self._slots
            ]
            for row in slots:  # pre-launched targets, where the slot keeps them
                if row["device"] in self._pools:
                    row["targets"] = self._pools[row["device"]].info()
                if row["device"] in self._first_runs:  # the warm-up's first ncu run
                    row["first_ncu"] = dataclasses.asdict(self._first_runs[row["device"]])
                if row["device"] in self._first_profiles:  # and its throwaway profile
                    row["first_profile"] = dataclasses.asdict(self._first_profiles[row["device"]])
            return {
                "executor": self.name,
                "slots": slots,
                "gpus": sum(1 for s in self._slots if s.device != "cpu"),
                "running": sum(1 for s in self._slots if s.job is not None),
                "queued": len(self._queue),
                **({"building": self._builds.info()} if self._builds is not None else {}),
            }

    def start_targets(self) -> None:
        """Start the slots' pre-launched targets now (else the first profile job does)."""
        with self._cond:
            self._start_slots()
            self._start_targets()

    def warm_up(self) -> None:
        """Start what a first profile job would otherwise wait for: each GPU slot's pre-launched
        targets and its warm worker (the pre-flight), and runs ncu once on each GPU (the
        machine's first run costs what no later one does: ``worker/first_ncu.py``); then one
        throwaway profile per GPU slot through its own path (``first_profile.py``), so a
        server's first profile is served as its later ones are. Slots without a GPU keep
        nothing warm. The torch headers earlier builds asked for are precompiled
        (``build_ahead``)."""
        with self._cond:
            self._start_slots()
            self._start_targets()
            gpu_slots = [s.device for s in self._slots if s.device != "cpu"]
        # The machine's first ncu run, per GPU, beside the workers' start; not where a
        # stand-in job function (tests) runs the jobs, which never run ncu.
        paying = [
            threading.Thread(target=self._pay_first_ncu, args=(slot,), daemon=True)
            for slot in (gpu_slots if self._targets_wanted else [])
        ]
        for thread in paying:
            thread.start()
        if self._builds is not None:  # the torch headers that earlier builds asked for
            self._builds.precompile_headers()
        for slot in gpu_slots:
            self._start_worker(slot)
        for thread in paying:
            thread.join(first_ncu.TIMEOUT_S + 5.0)
        if self._targets_wanted:  # never with a stand-in job function (tests)
            self.pay_first_profiles(gpu_slots)

    def pay_first_profiles(self, slots: list[str]) -> None:
        """One throwaway profile job for each of ``slots`` that has a target ready (else its
        first profile goes cold and says why), queued as a user's job is; their run folders
        are dropped."""
        with tempfile.TemporaryDirectory(prefix="nsight-agent-first-profile-") as root:
            handles: dict[str, JobHandle] = {}
            for slot in slots:
                pool = self._pools.get(slot)
                if pool is not None and pool.wait_ready(first_profile.READY_S):
                    handles[slot] = JobHandle(
                        first_profile.job(Path(root)), on_cancel=self._drop_if_queued
                    )
                    self._queue_job(handles[slot], None)
            for slot, handle in handles.items():
                done = first_profile.outcome(handle)
                with self._cond:
                    self._first_profiles[slot] = done

    def _start_worker(self, slot: str) -> None:
        if self._workers is None:
            return
        try:
            self._workers.get(self._worker_device(slot)).start()
        except Exception as err:  # the first job starts it again and reports the failure
            logging.getLogger("nsight_agent").warning(
                "warm worker for %s did not start: %s", slot, err
            )

    def _pay_first_ncu(self, slot: str) -> None:
        done = first_ncu.pay(slot)
        with self._cond:
            self._first_runs[slot] = done

    def wait_warm(self, seconds: float) -> bool:
        """Wait until each slot's pool has a target ready or is off (its profiles go cold and
        say why: that is its settled state, not one still warming)."""
        deadline = time.monotonic() + seconds
        with self._cond:
            pools = list(self._pools.values())
        return all(
            pool.wait_ready(max(0.0, deadline - time.monotonic())) or bool(pool.off_reason())
            for pool in pools
        )

    def target_pool(self, slot: str) -> TargetPool | None:
        """The pre-launched targets of ``slot``, once started (None: it keeps none)."""
        return self._pools.get(slot)

    def close(self) -> None:
        """Refuse new jobs, cancel the queued ones; running jobs finish (or are cancelled by
        their own event)."""
        with self._cond:
            self._closed = True
            dropped = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
            pools = list(self._pools.values())
        if self._builds is not None:  # jobs still building end cancelled, their builds killed
            self._builds.cancel_all()
        for q in dropped:
            q.handle.future.set_exception(RunCancelledError("The executor was closed."))
        for pool in pools:  # the waiting targets; a running job kills the one it took
            pool.close()

    # --- inside -------------------------------------------------------------------------------

    def _run_job_here(
        self, job: Job, cancel: threading.Event | None, on_progress: Progress | None
    ) -> JobResult:
        """``run_job`` with the warm worker and the pre-launched targets of this thread's slot."""
        slot = pinning.current_device()
        warm = None
        if self._workers is not None:
            warm = Warm(self._workers, self._worker_device(slot))
        targets = self._pools.get(slot or "") if job.mode == "profile" else None
        return run_job(job, cancel=cancel, on_progress=on_progress, warm=warm, targets=targets)

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

    def _start_targets(self) -> None:
        """The slots' target pools, at the first profile job (never for a stand-in job
        function, nor a "cpu" slot unless asked for by number)."""
        if self._pools or not self._targets_wanted or self._closed:
            return
        for slot in self._slots:
            if slot.device != "cpu" or self._targets_on_cpu:
                pool = self._pools[slot.device] = TargetPool(slot.device, self._target_count)
                pool.start()

    def _drop_if_queued(self, handle: JobHandle) -> None:
        with self._cond:
            found = [q for q in self._queue if q.handle is handle]
            for q in found:
                self._queue.remove(q)
        if found and not handle.future.done():
            handle.future.set_exception(
                RunCancelledError("The job was cancelled while it waited for a GPU.")
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
            handle.future.set_exception(RunCancelledError("The job was cancelled before it ran."))
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
