"""One job's drive through the Ray executor's GPU hosts: the next free host (in arrival order,
``hosts.HostPool``), its progress read from the board, a cancel passed on to the host (which is
killed if the job has not stopped ``CANCEL_GRACE_S`` later, its run folder salvaged), and the
job run again on another host when its host or node dies, up to ``max_retries`` times.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsight_agent.engine.executors.base import JobHandle
from nsight_agent.engine.executors.ray.cluster import NodeLostError, RemoteJobError
from nsight_agent.engine.executors.ray.hosts import Host, HostPool
from nsight_agent.engine.executors.ray.landing import salvage_run
from nsight_agent.engine.pipeline import Progress
from nsight_agent.errors import RunCancelledError

CANCEL_GRACE_S = 15.0  # a cancelled job's host that has not stopped by then is killed


@dataclass
class JobDriver:
    """Drives each job of one connected executor: ``ray``, its ``hosts`` and its ``board``."""

    ray: Any
    hosts: HostPool
    board: Any
    queue_timeout_s: float
    max_retries: int

    def run(
        self, handle: JobHandle, key: str, on_progress: Progress | None, root: Path
    ) -> dict[str, Any]:
        """The job on the next free host; on another one when its host dies, up to
        ``max_retries`` times."""
        job = dataclasses.replace(handle.job, runs_root=None)
        lost = 0
        while True:
            host = self.hosts.acquire(handle.cancel_event, self.queue_timeout_s)
            handle.attempts = lost + 1
            ref = host.actor.run.remote(job, key, self.board)
            try:
                out = self._wait(handle, key, ref, host, on_progress)
            except _HostLost as err:
                self.hosts.release(host, dead=True)
                lost += 1
                if lost > self.max_retries:
                    raise NodeLostError(
                        f"The host or node running the job died {lost} time(s); it was retried "
                        f"{self.max_retries} time(s) and lost again: {err}.",
                        "The run's files stayed on the lost node. A crash in native code that "
                        "kills its parent, the OOM killer or a node going down cause this; "
                        "device_info shows the nodes still alive.",
                    ) from err.__cause__
                continue
            except _HostKilled as err:
                self.hosts.release(host, dead=True)
                handle.ended = time.time()
                raise salvage_run(
                    self.ray, handle.where, handle.ended, root, err.cancelled
                ) from None
            except BaseException:
                self.hosts.release(host)
                raise
            self.hosts.release(host)
            return out

    def _wait(
        self,
        handle: JobHandle,
        key: str,
        ref: Any,
        host: Host,
        on_progress: Progress | None,
    ) -> dict[str, Any]:
        """The host's answer, showing progress; a cancel is passed on to the host, which is
        killed if the job has not stopped ``CANCEL_GRACE_S`` later."""
        ray = self.ray
        shown: list[Any] = []
        state: dict[str, Any] | None = None
        cancelled_at: float | None = None
        while True:
            ready, _ = ray.wait([ref], timeout=0.25)
            state = self._state(key) or state
            if state is not None:
                _note_start(handle, state)
                if on_progress is not None and state.get("progress") not in ([], shown):
                    shown = list(state["progress"])
                    on_progress(int(shown[0]), int(shown[1]), str(shown[2]))
            if ready:
                break
            if handle.cancel_event.is_set() and cancelled_at is None:
                cancelled_at = time.monotonic()
                host.actor.cancel.remote(key)
            if cancelled_at is not None and time.monotonic() - cancelled_at > CANCEL_GRACE_S:
                self.hosts.kill(host)
                raise _HostKilled(
                    RunCancelledError("The job was cancelled; its GPU host (and ncu) was killed.")
                )
        try:
            out: dict[str, Any] = ray.get(ref)
            return out
        except ray.exceptions.RayActorError as err:
            raise _HostLost(type(err).__name__) from err
        except ray.exceptions.RayError as err:
            raise RemoteJobError(f"The job failed in Ray: {err}") from err

    def _state(self, key: str) -> dict[str, Any] | None:
        try:
            state: dict[str, Any] | None = self.ray.get(self.board.state.remote(key), timeout=5)
        except Exception:  # the board is only a convenience
            return None
        return state


class _HostLost(Exception):
    """The job's host actor died (its process, or its node)."""


class _HostKilled(Exception):
    """We killed the job's host: it did not stop within the grace after a cancel."""

    def __init__(self, cancelled: RunCancelledError) -> None:
        super().__init__(str(cancelled))
        self.cancelled = cancelled


def _note_start(handle: JobHandle, state: dict[str, Any]) -> None:
    info = state.get("info") or {}
    if info:
        handle.device = f"{info.get('node')}:gpu{info.get('gpu')}"
        handle.started = float(info.get("started", time.time()))
        handle.where = dict(info)
