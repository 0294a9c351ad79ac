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
    has what that needs: one job, on the executor in use when it queues that kind (an ncu job
    always; a timing job where its GPUs time, never beside an ncu job), else here, on warm
    workers for a timing job (the caller's, or a pool of its own for this call). The store
    trims the runs folder as it makes the run's."""
    require_torch(where)
    if method == "ncu":
        require_ncu(where)
    elif request.language == "cuda" and where.runs_here and not pinning.has_gpu():
        raise NsightAgentError(
            "A CUDA source runs only on an NVIDIA GPU, and this machine has none: nothing was "
            "compiled or run.",
            "Time it on a machine with a GPU (the timing path needs no ncu there); on this "
            "machine, Triton and torch sources run on the CPU.",
        )
    mode: pipeline.JobMode = "profile" if method == "ncu" else "timing"
    executor = where.executor
    if executor is not None and (method == "ncu" or executor.runs_timing):
        run = executor.run(
            pipeline.Job(request, where.runs_root, mode),
            cancel=where.cancel,
            on_progress=where.on_progress,
        )
    else:
        with _warm(where.workers, method) as warm:
            run = pipeline.run_job(
                pipeline.Job(request, where.runs_root, mode),
                cancel=where.cancel,
                on_progress=where.on_progress,
                warm=warm,
            )
    assert isinstance(run, RunResult)
    return run


@contextlib.contextmanager
def _warm(given: WorkerPool | None, method: Method) -> Iterator[pipeline.Warm | None]:
    """The warm worker a timing job runs on here; none for an ncu job (its pre-flight starts
    cold here)."""
    if method == "ncu":
        yield None
        return
    with _workers(given) as pool:
        yield pipeline.Warm(pool)


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


NO_NCU_TIMING = (
    'Without ncu, method="timing" (--method timing) measures each call\'s time on this '
    "machine, checks the outputs and compares variants; counters, roofline and diagnosis need ncu."
)
"""What answers without ncu, for a use case that takes a method (profile, compare)."""
NO_NCU_COUNTERS = (
    "{what} reads ncu's counters, so it needs ncu. Without ncu, method='timing' of "
    "profile_kernel or compare_variants times each call on this machine and checks the "
    "outputs; a .ncu-rep recorded elsewhere is read here without ncu "
    "({tool}(report_path=<FILE.ncu-rep>))."
)
"""What answers without ncu where the use case (diagnose, roofline) has no method."""


def require_ncu(where: Measuring, without: str = NO_NCU_TIMING) -> None:
    """Return when ncu is where the job will run (here, unless the executor's nodes have it);
    else say so at once (doctor knows in seconds, a pre-flight first would cost a cold start),
    and name what answers without it (``without``: in the terms of the caller's use case)."""
    if not where.runs_here:
        return
    try:
        ncu.find_ncu()
    except NcuNotFoundError as err:
        raise NcuNotFoundError(f"{err.message} Nothing was run.", f"{err.hint} {without}") from err
