"""One GPU of a Ray node, held for the server: the actor that runs every job given to that GPU.

    host = ray.remote(GpuHost).options(num_gpus=1, resources={RESOURCE: 1}).remote()
    out = ray.get(host.run.remote(job, key, board))    # plain data, the run folder as tar bytes
    host.cancel.remote(key)                            # from another call: the job stops

Ray gives the actor one GPU and sets its ``CUDA_VISIBLE_DEVICES``. Inside, a one-slot
``LocalExecutor`` with its own warm ``WorkerPool`` runs each job as a local server does: a
profile job's pre-flight on the warm worker and ncu cold, a timing job whole on the warm
worker. Holding the GPU for the host's life is what keeps its worker warm, and it keeps the
GPU's queue whole: a timing job never measures while an ncu job replays kernels on the same
GPU (a separate actor with a fraction of the GPU could not promise that). The server's
``ray_hosts.HostPool`` hands each host one job at a time.

Cancelling is cooperative: ``cancel`` sets the job's event, and the local executor kills the
job's processes (ncu, the harness, the warm worker mid-job), so the cancelled run folder comes
back like any other and the host stays warm for the next job. Nothing here imports Ray.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from pathlib import Path
from typing import Any

from nsight_agent.engine.executors.local import LocalExecutor
from nsight_agent.engine.executors.ray import node as ray_node
from nsight_agent.engine.pinning import has_gpu
from nsight_agent.engine.pipeline import Job, JobResult, Progress
from nsight_agent.engine.worker.pool import WorkerPool


class GpuHost:
    """The body of one GPU host actor. ``warm``: start the worker now, so the host's first
    timing job or pre-flight does not pay for Python, torch and CUDA starting."""

    def __init__(self, warm: bool = True) -> None:
        self.where = ray_node.where_here()
        # On a machine whose GPUs are only logical (a test cluster) the jobs run on the CPU.
        self.device = self.where["gpu"] if self.where["gpu"] and has_gpu() else "cpu"
        self._workers = WorkerPool()
        self._local = LocalExecutor([self.device], workers=self._workers)
        # The one worker: the local executor names its only slot's worker so too.
        self._worker = self._workers.get("cpu" if self.device == "cpu" else "cuda:0")
        self._cancels: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.jobs_done = 0
        self._warm = warm
        self._warm_up()

    def _warm_up(self) -> None:
        """Start the worker in the background unless it runs (a cancel or a crashing kernel
        kills it mid-job: the next job would pay for its start)."""
        worker = self._worker
        if self._warm and not worker.alive():
            # The worker watches its parent process, not this thread: it outlives the thread.
            # A start that fails is retried by the next job, which reports what goes wrong.
            def start() -> None:
                with contextlib.suppress(Exception):
                    worker.start()

            threading.Thread(target=start, name="nsight-agent-host-warm", daemon=True).start()

    def describe(self) -> dict[str, Any]:
        """Where the host runs (node, GPU, pid, node id), what it did and whether its worker
        is up; also the call whose answer says the host is ready."""
        return {**self.where, "device": self.device, "jobs_done": self.jobs_done,
                "warm": self._worker.ready()}  # fmt: skip

    def run(self, job: Job, key: str, board: Any) -> dict[str, Any]:
        """Run ``job`` on this GPU into a scratch runs root; the answer is plain data."""
        event = self._event(key)

        def runner(root: Path, progress: Progress) -> JobResult:
            scratch_job = dataclasses.replace(job, runs_root=root)
            return self._local.run(scratch_job, cancel=event, on_progress=progress)

        try:
            return ray_node.run_in_scratch(key, board, runner)
        finally:
            with self._lock:
                self._cancels.pop(key, None)
                self.jobs_done += 1
            self._warm_up()

    def cancel(self, key: str) -> None:
        """Stop job ``key`` (running or about to run) on this host."""
        self._event(key).set()

    def close(self) -> None:
        self._local.close()
        self._workers.close()

    def _event(self, key: str) -> threading.Event:
        # A cancel may arrive before its run call (a threaded actor does not keep call order).
        with self._lock:
            return self._cancels.setdefault(key, threading.Event())
