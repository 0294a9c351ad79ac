"""Builds ahead of the GPU queue: a job's sources are compiled before it queues for a GPU slot.

Compiling a candidate's torch extension (``load_inline`` at import) or the ``cuda``
language's source takes tens of seconds of CPU and no GPU. In the job's pre-flight it would
hold a GPU slot, and concurrent calls would build one after another. So the executor's
``submit`` plans the builds the job still needs (``harness/build_plan.py``: none, and the job
queues at once), runs them in child processes (``harness/build_child.py``), every source of
every job at once within one bound for the whole process (``build_slots``: a build runs two
compilers, its C++ and its CUDA file), and only then queues the job for a GPU. Each build
leaves a record in its folder (``harness/ahead_record.py``) that the harness's import reads:
the library is found built and the answer says it was built ahead, or the compiler's errors
become the candidate's error row without compiling again. The records are removed when the
job ends. Cancelling the job while it builds kills its build children (their process
groups). A build that stops for any other reason (it timed out, the child died, the user's
import failed elsewhere) leaves no record: the harness builds or reports it in the GPU's turn.
A build's C++ file may ask for torch's header precompiled (``harness/host_pch.py``): it is
made here, in the background within the same bound, for the builds that follow.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsight_agent.engine import process
from nsight_agent.engine.executors.base import JobHandle
from nsight_agent.engine.harness import ahead_record, build_plan, ext_builds, host_pch
from nsight_agent.engine.harness.build_plan import BuildPlan, BuildTask
from nsight_agent.engine.pipeline import CUDA_CACHE, Job, Progress
from nsight_agent.engine.store.runs import default_runs_root
from nsight_agent.errors import RunCancelledError

ENABLE_ENV = "NSIGHT_AGENT_BUILD_AHEAD"  # "0": builds happen in the job's GPU turn
SLOTS_ENV = "NSIGHT_AGENT_BUILD_SLOTS"  # build children at once in this process

# Runs one build: (task file, result file) -> the child's argv (tests pass stand-ins).
Command = Callable[[Path, Path], list[str]]


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "1") != "0"


def build_slots() -> int:
    """``NSIGHT_AGENT_BUILD_SLOTS``, else half the cores: a ``load_inline`` build runs its
    C++ and its CUDA compiler side by side."""
    configured = os.environ.get(SLOTS_ENV, "")
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return max(1, (os.cpu_count() or 2) // 2)


class Bound:
    """How many build children run at once; one for the process, shared by every call."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.running = 0
        self._peaks: dict[int, int] = {}  # each running build: the most running beside it
        self._next = 0
        self._cond = threading.Condition()

    def acquire(self, cancel: threading.Event) -> int | None:
        """Wait for a slot: a token for ``release``, or None once ``cancel`` is set."""
        with self._cond:
            while self.running >= self.slots and not cancel.is_set():
                self._cond.wait(0.1)
            if cancel.is_set():
                return None
            self.running += 1
            self._next += 1
            self._peaks[self._next] = 0
            for token in self._peaks:
                self._peaks[token] = max(self._peaks[token], self.running)
            return self._next

    def release(self, token: int) -> int:
        """Free the slot; the most builds that ran at once while this one ran."""
        with self._cond:
            self.running -= 1
            self._cond.notify_all()
            return self._peaks.pop(token, 1)


_SHARED: list[Bound] = []
_SHARED_LOCK = threading.Lock()


def shared_bound() -> Bound:
    with _SHARED_LOCK:
        if not _SHARED:
            _SHARED.append(Bound(build_slots()))
        return _SHARED[0]


def child_command(task: Path, result: Path) -> list[str]:
    module = "nsight_agent.engine.harness.build_child"
    return [process.python_executable(), "-m", module, str(task), str(result)]


@dataclass
class _Building:
    """One job's builds: what it planned, the records it wrote (removed when it ends)."""

    plan: BuildPlan
    cancel: threading.Event
    written: list[Path] = field(default_factory=list)


class BuildsAhead:
    """Plans and runs jobs' builds before they queue (``LocalExecutor`` calls it)."""

    def __init__(
        self, command: Command | None = None, bound: Bound | None = None, headers: bool = True
    ) -> None:
        self.command = command or child_command
        self.bound = bound or shared_bound()
        self.headers = headers  # precompile the torch headers builds asked for (host_pch)
        self._jobs: dict[int, _Building] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._headers_started: set[Path] = set()

    def plan(self, job: Job) -> BuildPlan | None:
        """The builds ``job`` needs before its GPU turn; None when there are none."""
        cache = (job.runs_root or default_runs_root()) / CUDA_CACHE
        try:
            found = build_plan.plan(job.request, cache)
        except Exception as err:  # the harness builds (or reports) it, as without this stage
            logging.getLogger("nsight_agent").warning("no build ahead: %s", err)
            return None
        return found if found.tasks else None

    def start(
        self,
        handle: JobHandle,
        plan: BuildPlan,
        on_progress: Progress | None,
        then: Callable[[], None],
    ) -> None:
        """Build ``plan`` in a thread of its own, then call ``then`` (queue the job); a
        cancel, or an error of this stage, ends the handle instead."""
        building = _Building(plan, handle.cancel_event)
        with self._lock:
            self._jobs[id(handle)] = building
        handle.future.add_done_callback(lambda _: self._finish(handle, building))

        def build_then_queue() -> None:
            try:
                self.build(building, on_progress)
                then()
            except BaseException as err:  # handed to the caller waiting on the handle
                if not handle.future.done():
                    handle.future.set_exception(err)

        threading.Thread(target=build_then_queue, name="nsight-agent-build", daemon=True).start()

    def build(self, building: _Building, on_progress: Progress | None = None) -> None:
        """Every task of the plan at once, within the bound; RunCancelledError if cancelled."""
        plan, cancel = building.plan, building.cancel
        if on_progress is not None:
            on_progress(0, 1, f"building {len(plan.tasks)} source(s) before queueing for a GPU")
        with tempfile.TemporaryDirectory(prefix="nsight-agent-build-") as tmp:
            folder = Path(tmp)
            for name, text in plan.files.items():
                (folder / name).write_text(text)
            threads = [
                threading.Thread(target=self._one, args=(building, folder, task, i), daemon=True)
                for i, task in enumerate(plan.tasks)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if cancel.is_set():
            raise RunCancelledError("The job was cancelled while its sources were built.")
        self.precompile_headers()

    def precompile_headers(self) -> None:
        """Precompile, in the background within the bound, each torch header a build asked
        for (``host_pch.want``) and none has made yet: later builds with those flags read it."""
        if not self.headers:
            return
        with self._lock:
            todo = [f for f in host_pch.wanted() if f not in self._headers_started]
            self._headers_started.update(todo)
        for folder in todo:
            threading.Thread(
                target=self._header, args=(folder,), name="nsight-agent-pch", daemon=True
            ).start()

    def cancel_all(self) -> None:
        """Cancel every job still building (the executor is closing)."""
        self._closing.set()
        with self._lock:
            for building in self._jobs.values():
                building.cancel.set()

    def info(self) -> dict[str, Any]:
        with self._lock:
            jobs = len(self._jobs)
        return {"jobs": jobs, "running": self.bound.running, "slots": self.bound.slots}

    # --- inside -------------------------------------------------------------------------------

    def _one(self, building: _Building, folder: Path, task: BuildTask, index: int) -> None:
        asked = time.monotonic()
        token = self.bound.acquire(building.cancel)
        if token is None:
            return
        waited = time.monotonic() - asked
        try:
            result = self._run_child(building, folder, task, index)
        except Exception as err:  # this stage's own failure: the harness builds it
            logging.getLogger("nsight_agent").warning("build ahead failed: %s", err)
            result = None
        finally:
            at_once = self.bound.release(token)
        if result is None or "skipped" in result or not result.get("built", True):
            return
        record = {
            "ok": bool(result.get("ok")),
            "seconds": round(float(result.get("seconds") or 0.0), 3),
            "compiled": result.get("compiled") or [],
            "at_once": at_once,
            "waited": round(waited, 3),
        }
        if not record["ok"]:
            record.update({k: result.get(k) for k in ("error", "line", "log")})
        ahead_record.write(Path(task.folder), record)
        building.written.append(Path(task.folder))

    def _run_child(
        self, building: _Building, folder: Path, task: BuildTask, index: int
    ) -> dict[str, Any] | None:
        plan = building.plan
        task_file, result_file = folder / f"build-{index}.json", folder / f"build-{index}.out"
        details = {"dir": str(folder), "cache": str(plan.cache), "language": plan.language}
        task_file.write_text(json.dumps({**task.to_dict(), **details}))

        def poll() -> None:
            if building.cancel.is_set():
                raise RunCancelledError("The job was cancelled while its sources were built.")

        try:
            process.run_to_file(
                self.command(task_file, result_file),
                output_path=folder / f"build-{index}.log",
                timeout=ext_builds.LOCK_WAIT_S,
                env=process.child_env(),
                poll=poll,
                poll_interval=0.2,
                tag="build-ahead",
            )
        except (RunCancelledError, process.RunTimeout):  # killed: no record
            return None
        try:
            found = json.loads(result_file.read_text())
        except (OSError, ValueError):  # the child died before it said: the harness decides
            return None
        return found if isinstance(found, dict) else None

    def _header(self, folder: Path) -> None:
        token = self.bound.acquire(self._closing)
        if token is None:
            return
        try:
            argv = [process.python_executable(), "-m", "nsight_agent.engine.harness.host_pch"]
            process.run_to_file(
                [*argv, str(folder)],
                output_path=folder / "precompile.log",
                timeout=host_pch.BUILD_TIMEOUT_S + 60,
                env=process.child_env(),
                poll=self._stop_if_closing,
                tag="pch",
            )
        except Exception as err:  # builds go on reading the header itself
            logging.getLogger("nsight_agent").warning("torch header not precompiled: %s", err)
        finally:
            self.bound.release(token)

    def _stop_if_closing(self) -> None:
        if self._closing.is_set():
            raise RunCancelledError("The executor was closed.")

    def _finish(self, handle: JobHandle, building: _Building) -> None:
        with self._lock:
            self._jobs.pop(id(handle), None)
        for folder in building.written:
            ahead_record.clear(folder)
