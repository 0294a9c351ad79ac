"""The one measuring call every use case and front end goes through.

``measure(request, method, where)``: under ncu (``method="ncu"``) on the executor in use, or
counter-free on a warm worker (``"timing"``); the executor queues either kind on its GPUs
(the server's local slots, or a Ray pool's hosts). Without an executor the job runs here, in
this thread; without a worker pool a timing job gets one of its own, closed when it ends.
"""

from __future__ import annotations

import contextlib
import importlib.util
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nsight_agent.engine import pinning, pipeline
from nsight_agent.engine.collection import ncu
from nsight_agent.engine.executors.base import Executor
from nsight_agent.engine.pipeline import Progress, RunResult
from nsight_agent.engine.store import retention
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.errors import NcuNotFoundError, NsightAgentError
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

    @property
    def runs_here(self) -> bool:
        """The jobs run on this machine (no executor, or a local one), not on a cluster's."""
        return self.executor is None or self.executor.checks_ncu_here


def measure(request: ProfileRequest, method: Method, where: Measuring) -> RunResult:
    """Run ``request`` (validated: ``service/validate.py``) by ``method``, once this machine
    has what that needs; afterwards the retention policy trims the runs folder (newest runs
    stay)."""
    require_torch(where)
    run = _time(request, where) if method == "timing" else _profile(request, where)
    retention.prune(run.run_dir.parent, *retention.policy())
    return run


def _profile(request: ProfileRequest, where: Measuring) -> RunResult:
    """Pre-flight, then the ncu run; without ncu here (and an executor that profiles here),
    a clear error at once."""
    require_ncu(where)
    executor = where.executor
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
    if request.language == "cuda" and where.runs_here and not pinning.has_gpu():
        raise NsightAgentError(
            "A CUDA source runs only on an NVIDIA GPU, and this machine has none: nothing was "
            "compiled or run.",
            "Time it on a machine with a GPU (the timing path needs no ncu there); on this "
            "machine, Triton and torch sources run on the CPU.",
        )
    executor = where.executor
    if executor is not None and executor.runs_timing:
        return executor.time(
            request, runs_root=where.runs_root, cancel=where.cancel, on_progress=where.on_progress
        )
    with _workers(where.workers) as pool:
        return pipeline.time_request(
            request,
            pool,
            runs_root=where.runs_root,
            cancel=where.cancel,
            on_progress=where.on_progress,
        )


@contextlib.contextmanager
def _workers(given: WorkerPool | None) -> Iterator[WorkerPool]:
    """The caller's pool, or one of our own for this call, closed when it ends."""
    if given is not None:
        yield given
        return
    with WorkerPool() as own:
        yield own


TORCH_INSTALL = (
    "pip install torch (a CPU-only machine: pip install torch --index-url "
    "https://download.pytorch.org/whl/cpu); `nsight-agent doctor` lists what else is missing"
)


def require_torch(where: Measuring) -> None:
    """Return when torch, which runs every kernel language, is installed where the job runs
    (here, unless the executor's nodes run it); else say what to install, before any run
    folder is made."""
    if where.runs_here and importlib.util.find_spec("torch") is None:
        raise NsightAgentError(
            "Measuring runs the kernel, and torch (which runs every kernel language) is not "
            "installed in this Python; nothing was run.",
            TORCH_INSTALL,
        )


def require_ncu(where: Measuring) -> None:
    """Return when ncu is where the job will run (here, unless the executor's nodes have it);
    else say so at once (doctor knows in seconds, a pre-flight first would cost a cold start),
    and name the path that answers without it."""
    if not where.runs_here:
        return
    try:
        ncu.find_ncu()
    except NcuNotFoundError as err:
        raise NcuNotFoundError(
            f"{err.message} Nothing was run.",
            f'{err.hint} Without ncu, method="timing" (--method timing) measures each '
            "call's time on this machine, checks the outputs and compares variants; counters, "
            "roofline and diagnosis need ncu.",
        ) from err
