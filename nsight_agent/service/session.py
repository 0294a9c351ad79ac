"""A serving session: what a long-lived front end (the MCP server) holds across its calls:
the runs folder, the executor that runs every measuring job, and the warm workers of the
timing path. Opened when the server starts, closed when it ends."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nsight_agent.engine import device, pinning
from nsight_agent.engine.collection import budget, ncu
from nsight_agent.engine.device import DeviceInfo
from nsight_agent.engine.executors import first_profile
from nsight_agent.engine.executors.local import LocalExecutor
from nsight_agent.engine.store import run_status
from nsight_agent.engine.store.runs import default_runs_root
from nsight_agent.engine.worker import first_ncu
from nsight_agent.errors import InvalidRequestError, NcuNotFoundError
from nsight_agent.service.measure import Executor, Measuring, Progress, WorkerPool

ExecutorKind = Literal["local", "ray"]
# A warm-up still starting its worker when the server ends is waited for this long (a worker
# starts in seconds; one that hangs is killed with the pool after it).
WARM_UP_WAIT_S = 60.0
# How long a server waits for its warm-up before it answers (``initialize`` on stdio, the first
# connection over HTTP): its first profile is then served as its later ones are.
WARM_WAIT_ENV = "NSIGHT_AGENT_WARM_WAIT_S"
WARM_WAIT_S = 25.0  # within the 30 s clients give a server to start (docs/MCP.md)

__all__ = ["DeviceInfo", "ExecutorKind", "Session", "default_runs_root"]


@dataclass(frozen=True)
class Session:
    runs_root: Path | None
    executor: Executor
    workers: WorkerPool

    def measuring(
        self, on_progress: Progress | None = None, cancel: threading.Event | None = None
    ) -> Measuring:
        """Where one call of this session measures: its executor, its workers."""
        return Measuring(self.runs_root, self.executor, self.workers, on_progress, cancel)

    def warm_up(self) -> threading.Thread | None:
        """On a machine that can profile (a GPU and ncu here), start the executor's first
        targets and warm workers in the background, so the server's first profile costs what
        its later ones do; elsewhere nothing (the thread, to be joined before closing)."""
        if not self.executor.checks_ncu_here or not pinning.has_gpu():
            return None
        try:
            ncu.find_ncu()
        except NcuNotFoundError:
            return None
        thread = threading.Thread(target=self._warm, name="nsight-agent-warm-up", daemon=True)
        thread.start()
        return thread

    def _warm(self) -> None:
        try:
            self.executor.warm_up()
        except Exception as err:  # a first job starts them itself and reports what fails
            logging.getLogger("nsight_agent").warning("warm-up at start failed: %s", err)

    def wait_warm(self, warming: threading.Thread, seconds: float) -> bool:
        """Wait up to ``seconds`` for the warm-up: the warm worker up, each GPU slot's first
        pre-launched target ready. Whether all of it is (else a first job waits for the
        rest, or goes cold and says why)."""
        deadline = time.monotonic() + seconds
        warming.join(seconds)
        left = deadline - time.monotonic()
        return not warming.is_alive() and self.executor.wait_warm(max(0.0, left))

    def slots_said(self) -> str:
        """Each slot's pre-launched targets and the warm-up's first ncu run and profile in a
        phrase ("slot 0: 1 ready, first ncu run 1.9 s, first profile 3.1 s (pre-launched)",
        "slot cpu: off: NSIGHT_AGENT_TARGETS=0"); "" for an executor that keeps neither."""
        said = []
        for slot in self.executor.pool_info().get("slots") or []:
            parts = [str(slot["targets"])] if slot.get("targets") else []
            if slot.get("first_ncu"):
                parts.append(first_ncu.FirstRun(**slot["first_ncu"]).said())
            if slot.get("first_profile"):
                parts.append(first_profile.FirstProfile(**slot["first_profile"]).said())
            if parts:
                said.append(f"slot {slot['device']}: {', '.join(parts)}")
        return "; ".join(said)

    def close(self, warming: threading.Thread | None = None) -> None:
        """End the workers and the executor, after a warm-up still starting them (else one
        it starts late would outlive the session)."""
        if warming is not None:
            warming.join(WARM_UP_WAIT_S)
        self.workers.close()
        self.executor.close()


def warm_wait_s(value: str | None = None) -> float:
    """``NSIGHT_AGENT_WARM_WAIT_S`` (default 25): the seconds a server waits for its warm-up
    before it answers; 0 answers at once and warms in the background."""
    text = (os.environ.get(WARM_WAIT_ENV, "") if value is None else value).strip()
    try:
        seconds = float(text) if text else WARM_WAIT_S
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 600:
        raise InvalidRequestError(
            f"{WARM_WAIT_ENV} must be a number of seconds from 0 to 600, not {text!r}.",
            f"Unset it (wait up to {WARM_WAIT_S:g} s for the warm-up before answering), or "
            f"set {WARM_WAIT_ENV}=0 to answer at once and warm in the background.",
        )
    return seconds


def open_session(
    runs_root: Path | None, kind: ExecutorKind = "local", ray_address: str | None = None
) -> Session:
    """The executor (Ray is imported only when asked for) and the warm workers; a worker
    starts on the first call that needs it, or at a server's start (``Session.warm_up``). A local executor runs the pre-flights on
    the session's warm workers; Ray's nodes run their own. Call ``mark_abandoned_runs`` first."""
    workers = WorkerPool()
    executor: Executor
    if kind == "ray":
        from nsight_agent.engine.executors.ray.executor import RayExecutor

        executor = RayExecutor(ray_address)
    else:
        executor = LocalExecutor(workers=workers)
    return Session(runs_root=runs_root, executor=executor, workers=workers)


def mark_abandoned_runs(runs_root: Path | None) -> list[str]:
    """Runs left ``running`` by a server that ended (killed, crashed) become ``interrupted``,
    and the log says which."""
    found = run_status.mark_abandoned(runs_root or default_runs_root())
    if found:
        logging.getLogger("nsight_agent").warning(
            "%d run(s) left running by a server that has ended are now marked interrupted: %s",
            len(found),
            ", ".join(found[:20]),
        )
    return found


def end_open_runs(who: str) -> None:
    """This process's open runs become ``interrupted`` by ``who`` (the server is ending)."""
    run_status.interrupt_open_runs(who)


def device_info(
    probe: bool = False, executor: Executor | None = None, runs_root: Path | None = None
) -> DeviceInfo:
    """Can this machine profile? With an executor, its pool (slots, busy, queued) too; what
    one ncu run costs here, fitted to the runs under ``runs_root`` (engine/collection/budget.py)."""
    info = device.device_info(probe=probe)
    if info.can_profile:
        info.ncu_cost = budget.pass_cost(runs_root or default_runs_root()).model_dump()
    if executor is not None:
        info.pool = executor.pool_info()
    return info
