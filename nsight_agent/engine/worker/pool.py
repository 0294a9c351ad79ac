"""Warm workers: one long-lived Python process per device, with torch (and triton) imported
and the CUDA context up, that runs jobs (pre-flight, timing, shipped calls) one at a time.

    pool = WorkerPool()                                 # owned by the server (lifespan)
    value = pool.run("cuda:0", CallJob(ship(fn)), timeout=60)
    pre = warm_preflight(pool, run_dir, request, "cuda:0")   # PreflightResult, as the cold one
    timed = pool.run("cpu", TimeJob(str(run_dir), "cpu"), timeout=120)  # timing.TimingResult
    pool.close()

A worker is started on first use and reused. It is killed and replaced (on the next job):
- past a job's ``timeout`` (``WorkerTimeout``; its process group and every process with its
  environment marker are killed),
- when it died during a job (``WorkerCrashed``: ``os._exit``, a segfault, the OOM killer),
- after a job that left the CUDA context broken (``JobError.poisoned``: the worker probes the
  device after every failed job; an illegal address poisons the context for good).
A job that raised an ordinary exception raises ``JobError`` here and the worker stays.

Belonging: every worker runs in its own session with the marker ``NSIGHT_AGENT_CHILD=<our
pid>-worker-<device>.<n>`` (``engine/process.py``: ``kill_all`` at server shutdown and
``reap_orphans`` reach it and its children); it also ends itself when its parent is gone
(``worker_main`` polls ``getppid``), and ``close`` / interpreter exit kill every worker.
Device "cuda:N" runs with ``CUDA_VISIBLE_DEVICES`` set to that one GPU (inside: "cuda").
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import select
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from nsight_agent.engine import children, process
from nsight_agent.engine.collection import preflight_run
from nsight_agent.engine.store.runs import PreflightResult
from nsight_agent.engine.worker import shipping
from nsight_agent.engine.worker.main import (
    DEVICE_ENV,
    PARENT_ENV,
    CallJob,
    Job,
    PreflightJob,
    TimeJob,
    send,
)
from nsight_agent.engine.worker.timing_options import TimingOptions
from nsight_agent.errors import (
    CollectionTimeoutError,
    NsightAgentError,
    RunCancelledError,
    RunInterruptedError,
)
from nsight_agent.request import ProfileRequest

START_TIMEOUT = 180.0
_HEADER = 8

__all__ = [
    "CallJob",
    "JobError",
    "PreflightJob",
    "TimeJob",
    "TimingOptions",
    "Worker",
    "WorkerCrashed",
    "WorkerError",
    "WorkerPool",
    "WorkerTimeout",
    "normalize_device",
    "warm_preflight",
]


class WorkerError(NsightAgentError):
    """A warm worker could not run a job."""


class WorkerCrashed(WorkerError):
    """The worker process died (during a job or at start); it is replaced on the next job."""

    def __init__(self, message: str, returncode: int | None, log_tail: str) -> None:
        super().__init__(message, "The next job starts a fresh worker.")
        self.returncode = returncode
        self.log_tail = log_tail


class WorkerTimeout(CollectionTimeoutError):
    """The job ran past its limit: the worker and its children were killed."""

    def __init__(self, seconds: float) -> None:
        super().__init__(
            f"The job ran past its {seconds:g} s limit; the warm worker was killed.",
            "A kernel or the setup may hang; the next job starts a fresh worker.",
        )
        self.seconds = seconds


class JobError(WorkerError):
    """The job raised in the worker; ``poisoned``: the CUDA context broke and the worker
    was replaced."""

    def __init__(self, reply: dict[str, Any]) -> None:
        self.error_type = str(reply.get("error_type", "Exception"))
        self.remote_traceback = str(reply.get("traceback", ""))
        self.poisoned = bool(reply.get("poisoned"))
        hint = "The CUDA context was broken; the worker was replaced." if self.poisoned else ""
        super().__init__(str(reply.get("error", "the job failed")), hint)


def normalize_device(device: str | int) -> str:
    """The pool's key for a device: "cpu" or "cuda:N" (an int N or plain "cuda" means that GPU / GPU 0)."""
    text = str(device).strip().lower()
    if text.isdigit():
        return f"cuda:{text}"
    if text == "cuda":
        return "cuda:0"
    if text == "cpu" or (text.startswith("cuda:") and text[5:].isdigit()):
        return text
    raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', not {device!r}")


def _visible(index: str) -> str:
    """The CUDA_VISIBLE_DEVICES entry for GPU ``index`` as this process numbers GPUs."""
    current = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return current[int(index)] if current and int(index) < len(current) else index


class Worker:
    """One warm worker process for one device; restarts itself when the last one died."""

    def __init__(self, device: str, *, env: dict[str, str] | None = None) -> None:
        self.device = normalize_device(device)
        self.inner_device = "cpu" if self.device == "cpu" else "cuda"
        self.jobs_done = 0
        self.starts = 0
        self.info: dict[str, Any] = {}
        self._env = env
        self._proc: subprocess.Popen[bytes] | None = None
        self._marker = ""
        self._lock = threading.Lock()
        logs = Path(tempfile.gettempdir()) / "nsight-agent-workers"
        logs.mkdir(parents=True, exist_ok=True)
        self.log_path = logs / f"{os.getpid()}-{self.device.replace(':', '')}.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.alive() and self._proc is not None else None

    @property
    def marker(self) -> str:
        return self._marker

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def ready(self) -> bool:
        """Alive and done starting: a job sent now starts at once."""
        return self.alive() and bool(self.info)

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the process (if none is alive) and wait for it to say ready."""
        with self._lock:
            self._start(timeout)

    def _start(self, timeout: float) -> None:
        if self.alive():
            return
        self._kill()
        self.info = {}  # the ready message of the process now starting, once it says ready
        self._marker = children.new_marker(f"worker-{self.device.replace(':', '')}")
        env = process.child_env(self._env)
        env.update({children.MARKER: self._marker, DEVICE_ENV: self.inner_device})
        env[PARENT_ENV] = str(os.getpid())
        if self.device != "cpu":
            env["CUDA_VISIBLE_DEVICES"] = _visible(self.device.split(":")[1])
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [process.python_executable(), "-m", "nsight_agent.engine.worker.main"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        self.starts += 1
        try:
            ready = self._receive(time.monotonic() + timeout, timeout)
        except (WorkerTimeout, WorkerCrashed):
            self._kill()
            raise
        if not ready.get("ready"):
            self._kill()
            raise WorkerCrashed(f"the worker failed to start: {ready.get('error')}", 1, "")
        self.info = ready

    def run(self, job: Job, timeout: float, cancel: threading.Event | None = None) -> Any:
        """Run ``job``; return its value or raise JobError / WorkerCrashed / WorkerTimeout.

        ``cancel`` set while the job runs kills the worker (the next job starts a new one)
        and raises ``RunCancelledError``."""
        with self._lock:
            self._start(START_TIMEOUT)
            assert self._proc is not None and self._proc.stdin is not None
            try:
                send(self._proc.stdin, job)
            except (BrokenPipeError, OSError):
                raise self._crashed("the worker died before the job was sent") from None
            try:
                reply = self._receive(time.monotonic() + timeout, timeout, cancel)
            except (WorkerTimeout, RunCancelledError):
                self._kill()
                raise
            self.jobs_done += 1
            if reply.get("poisoned"):
                self._kill()  # the next job gets a fresh CUDA context
            elif reply.get("retire"):
                left = ", ".join(reply["retire"][:3])
                logging.getLogger("nsight_agent").warning(
                    "a job left what would outlive it (%s): the worker is replaced", left
                )
                self._kill()  # the next job is neither timed beside them nor changed by them
            if not reply.get("ok"):
                raise JobError(reply)
            return reply.get("value")

    def call(self, fn: Any, *args: Any, timeout: float, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` in the worker (``fn`` shipped by value)."""
        return self.run(CallJob(shipping.ship(fn, args=args, kwargs=kwargs)), timeout)

    def close(self) -> None:
        """End the worker: close its stdin (it exits), kill its group after a short wait."""
        with self._lock:
            proc = self._proc
            if proc is not None and proc.poll() is None and proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=2)
            self._kill()

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if self._marker:
            children.kill_marked(self._marker, exact=True)
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def _crashed(self, what: str) -> WorkerCrashed | RunInterruptedError:
        """Why the worker is gone: killed by the server's end (``children.ending``: not the
        job's fault), or crashed (its exit status and log tail)."""
        proc = self._proc
        code = proc.wait() if proc is not None else None
        self._kill()
        who = children.ending()
        if who is not None:
            return RunInterruptedError(who)
        tail = ""
        with contextlib.suppress(OSError):
            tail = self.log_path.read_text(errors="replace")[-4000:]
        died = f"killed by signal {-code}" if code is not None and code < 0 else f"status {code}"
        return WorkerCrashed(f"{what} ({died})", code, tail)

    def _receive(
        self, deadline: float, limit: float, cancel: threading.Event | None = None
    ) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        head = self._read(fd, _HEADER, deadline, limit, cancel)
        body = self._read(fd, int.from_bytes(head, "big"), deadline, limit, cancel)
        reply = pickle.loads(body)
        if not isinstance(reply, dict):
            raise self._crashed("the worker sent a malformed reply")
        return reply

    def _read(
        self, fd: int, size: int, deadline: float, limit: float, cancel: threading.Event | None
    ) -> bytes:
        chunks: list[bytes] = []
        while size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerTimeout(limit)
            if cancel is not None and cancel.is_set():
                raise RunCancelledError(
                    "The run was cancelled; the warm worker running it was killed (the next "
                    "call starts a new one)."
                )
            ready, _, _ = select.select([fd], [], [], min(left, 0.2))
            if not ready:
                continue
            chunk = os.read(fd, min(size, 1 << 20))
            if not chunk:
                raise self._crashed("the worker died during the job")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)


class WorkerPool:
    """One ``Worker`` per device, started on first use; ``close`` ends them all."""

    def __init__(self, *, env: dict[str, str] | None = None) -> None:
        self._env = env
        self._workers: dict[str, Worker] = {}
        self._lock = threading.Lock()
        _POOLS.add(self)

    def get(self, device: str | int) -> Worker:
        key = normalize_device(device)
        with self._lock:
            worker = self._workers.get(key)
            if worker is None:
                worker = self._workers[key] = Worker(key, env=self._env)
        return worker

    def run(
        self, device: str | int, job: Job, timeout: float, cancel: threading.Event | None = None
    ) -> Any:
        return self.get(device).run(job, timeout, cancel)

    def close(self) -> None:
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        for worker in workers:
            worker.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_POOLS: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for pool in list(_POOLS):
        pool.close()


# --- the pre-flight on a warm worker ---------------------------------------------------------


def warm_preflight(
    pool: WorkerPool,
    run_dir: Path,
    request: ProfileRequest,
    device: str | int,
    cancel: threading.Event | None = None,
) -> PreflightResult:
    """``preflight_run.run_preflight`` on a warm worker: same files, same result, no new
    interpreter. A worker that dies in the job is reported as the cold path reports a
    harness that died (and replaced); a timeout raises ``CollectionTimeoutError``."""
    prefix = preflight_run.PREFLIGHT_PREFIX
    worker = pool.get(device)
    output = run_dir / f"{prefix}output.log"
    job = PreflightJob(str(run_dir), worker.inner_device, prefix, str(output))
    start = time.monotonic()
    try:
        value = worker.run(job, request.timeout_s, cancel)
        returncode = int(value["returncode"])
    except WorkerCrashed as err:
        returncode = err.returncode if err.returncode is not None else -1
    except JobError as err:  # the harness itself failed to load (not the user's code)
        with output.open("a") as out:
            out.write(err.remote_traceback)
        returncode = 1
    except WorkerTimeout:
        raise CollectionTimeoutError(
            f"The pre-flight ran past its {request.timeout_s:g} s limit and was killed.",
            f"A kernel or the setup may hang; its output so far is in {output}.",
        ) from None
    seconds = time.monotonic() - start
    return preflight_run.result_from_files(
        run_dir, request, worker.inner_device, returncode, seconds, warm=True
    )
