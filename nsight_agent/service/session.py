"""A serving session: what a long-lived front end (the MCP server) holds across its calls:
the runs folder, the executor that runs every measuring job, and the warm workers of the
timing path. Opened when the server starts, closed when it ends."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nsight_agent.engine import device
from nsight_agent.engine.collection import budget
from nsight_agent.engine.device import DeviceInfo
from nsight_agent.engine.executors.local import LocalExecutor
from nsight_agent.engine.store import run_status
from nsight_agent.engine.store.runs import default_runs_root
from nsight_agent.service.measure import Executor, Measuring, Progress, WorkerPool

ExecutorKind = Literal["local", "ray"]

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

    def close(self) -> None:
        self.workers.close()
        self.executor.close()


def open_session(
    runs_root: Path | None, kind: ExecutorKind = "local", ray_address: str | None = None
) -> Session:
    """The executor (Ray is imported only when asked for) and the warm workers; a worker
    starts on the first call that needs it, not here. A local executor runs the pre-flights on
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
