"""The warm worker's own process (``python -m nsight_agent.engine.worker.main``) and its wire.

Wire: each message is an 8-byte big-endian length and a pickle (cloudpickle for jobs, so
shipped callables travel by value; plain pickle for replies). Jobs arrive on stdin; replies
leave on a private copy of the original stdout, and fd 1 is pointed at stderr at start-up,
so nothing the user's code prints can corrupt the channel. Likewise jobs are read from a
private copy of stdin and fd 0 reads /dev/null, so user code that reads stdin cannot take a
job. During a job, fds 1 and 2 go to the job's output file when it names one.

At start-up the worker imports torch (and triton when installed; on "cpu" with
``TRITON_INTERPRET=1``), brings the CUDA context up on "cuda", and says ``ready``. Then it
runs one job at a time until stdin closes. After a job that failed, it probes the device
(``torch.cuda.synchronize``) and reports ``poisoned`` when the CUDA context is broken (an
illegal address, a device-side assert): the parent then replaces it. A watchdog thread ends
the worker and its process group when its parent is gone (polls ``getppid``).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import pickle
import re
import signal
import struct
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from nsight_agent.engine.worker.timing_options import TimingOptions

DEVICE_ENV = "NSIGHT_AGENT_WORKER_DEVICE"
PARENT_ENV = "NSIGHT_AGENT_WORKER_PARENT"
_HEADER = struct.Struct(">Q")
CUDA_ERROR = re.compile(
    r"CUDA error|cudaError|CUDA_ERROR|illegal memory access|illegal address|device-side assert"
    r"|unspecified launch failure|misaligned address|AcceleratorError",
    re.IGNORECASE,
)


# --- jobs (sent by the parent) ---------------------------------------------------------------


@dataclass(frozen=True)
class PreflightJob:
    """Run ``run_dir/harness.py --preflight`` in the worker, as the cold pre-flight does."""

    run_dir: str
    device: str
    prefix: str = "preflight-"
    output: str = ""  # where the program output goes (default <prefix>output.log)


@dataclass(frozen=True)
class CallJob:
    """Call a callable shipped with ``shipping.ship`` and send back its return value."""

    payload: bytes
    output: str = ""


@dataclass(frozen=True)
class TimeJob:
    """Time the variants of a rendered run directory (``timing_run.time_run_dir``); the run's
    own seed, tolerances and vary_inputs (its SPEC) replace those of ``options``."""

    run_dir: str
    device: str
    options: TimingOptions = field(default_factory=TimingOptions)
    output: str = ""


Job = PreflightJob | CallJob | TimeJob


# --- the wire --------------------------------------------------------------------------------


def send(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def recv(stream: IO[bytes]) -> Any:
    """The next message, or None when the other side closed the stream."""
    head = _read_exact(stream, _HEADER.size)
    if head is None:
        return None
    (size,) = _HEADER.unpack(head)
    body = _read_exact(stream, size)
    return None if body is None else pickle.loads(body)


def _read_exact(stream: IO[bytes], size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# --- the worker ------------------------------------------------------------------------------


def warm_up(device: str) -> dict[str, Any]:
    """Import torch (and triton), bring the CUDA context up; say what was loaded."""
    start = time.monotonic()
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "device": device, "pid": os.getpid()}
    with contextlib.suppress(ImportError):
        import triton

        info["triton"] = triton.__version__
    import nsight_agent.engine.harness.checks  # noqa: F401  (the output checks use torch)

    if device.startswith("cuda"):
        torch.cuda.init()  # type: ignore[no-untyped-call]
        torch.empty(1, device="cuda").add_(1)
        torch.cuda.synchronize()
        info["gpu"] = torch.cuda.get_device_name()
        # The pre-flight lists each call's kernels with the kineto profiler: CUPTI's first
        # start is paid here, not by the first call.
        from nsight_agent.engine.harness import runtime

        with runtime.kineto_profiler(cpu=False):
            torch.empty(1, device="cuda").add_(1)
            torch.cuda.synchronize()
    info["seconds"] = time.monotonic() - start
    return info


@contextlib.contextmanager
def _output_to(path: str) -> Iterator[None]:
    """Point fds 1 and 2 at ``path`` for the job (also what native code writes)."""
    if not path:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


@contextlib.contextmanager
def _in_run_dir(run_dir: Path, argv: list[str], env: dict[str, str]) -> Iterator[None]:
    """cwd, argv, sys.path[0] and environment as a ``python harness.py`` child would see
    them; the run's modules are dropped afterwards (the next job imports its own)."""
    cwd, old_argv, old_path, before = os.getcwd(), sys.argv, list(sys.path), set(sys.modules)
    old_env = {k: os.environ.get(k) for k in env}
    os.chdir(run_dir)
    sys.argv = argv
    sys.path.insert(0, str(run_dir))
    os.environ.update(env)
    try:
        yield
    finally:
        os.chdir(cwd)
        sys.argv, sys.path[:] = old_argv, old_path
        for key, value in old_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for name in set(sys.modules) - before:
            origin = str(getattr(sys.modules[name], "__file__", None) or "")
            if origin.startswith(str(run_dir)):
                del sys.modules[name]


def run_preflight(job: PreflightJob) -> dict[str, Any]:
    """The harness's own ``main()`` in this process: what ``python harness.py --preflight``
    would do, with torch, triton and the CUDA context already up."""
    run_dir = Path(job.run_dir).resolve()
    argv = ["harness.py", "--preflight", "--device", job.device, "--prefix", job.prefix]
    output = job.output or str(run_dir / f"{job.prefix}output.log")
    start = time.monotonic()
    with _in_run_dir(run_dir, argv, {"NSIGHT_AGENT_PREFLIGHT": "1"}), _output_to(output):
        spec = importlib.util.spec_from_file_location("nsight_agent_harness", "harness.py")
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {run_dir / 'harness.py'}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        returncode = int(module.main())
    error = run_dir / f"{job.prefix}error.json"
    text = error.read_text(errors="replace") if returncode and error.exists() else ""
    return {"returncode": returncode, "seconds": time.monotonic() - start, "error": text}


def run_job(job: Job) -> Any:
    if isinstance(job, PreflightJob):
        return run_preflight(job)
    if isinstance(job, CallJob):
        from nsight_agent.engine.worker import shipping

        with _output_to(job.output):
            shipped = shipping.unship(job.payload)
            return shipped.func(*shipped.args, **shipped.kwargs)
    if isinstance(job, TimeJob):
        from nsight_agent.engine.worker import timing_run

        with _output_to(job.output):
            return timing_run.time_run_dir(Path(job.run_dir), job.device, job.options)
    raise TypeError(f"unknown job {type(job).__name__}")


def context_broken(device: str, error_text: str) -> bool:
    """Whether the CUDA context is unusable: the probe fails, or the error names CUDA."""
    if not device.startswith("cuda"):
        return bool(error_text and CUDA_ERROR.search(error_text))
    import torch

    try:
        torch.cuda.synchronize()
        torch.empty(1, device="cuda").add_(1).item()
    except Exception:
        return True
    return bool(error_text and CUDA_ERROR.search(error_text))


def handle(job: Job, device: str) -> dict[str, Any]:
    """One job of the loop, its process state put back after it (``job_state.py``: the next
    job starts as in a fresh process); ``retire`` names what it left that would outlive it
    (threads still running, settings that could not be put back)."""
    from nsight_agent.engine.worker import job_state

    start = time.monotonic()
    reply: dict[str, Any] = {"ok": True, "pid": os.getpid()}
    error_text = ""
    with job_state.kept() as outliving:
        try:
            reply["value"] = run_job(job)
            if isinstance(job, PreflightJob):
                error_text = str(reply["value"].get("error", ""))
        except BaseException as exc:
            error_text = f"{type(exc).__name__}: {exc}"
            reply.update(ok=False, error=error_text, error_type=type(exc).__name__)
            reply["traceback"] = traceback.format_exc()[-8000:]
    reply["retire"] = outliving  # they would change later jobs: the pool replaces us
    reply["poisoned"] = context_broken(device, error_text) if error_text else False
    if not reply["poisoned"]:
        release_memory(device)
    reply["seconds"] = time.monotonic() - start
    return reply


def release_memory(device: str) -> None:
    """Hand the GPU memory a finished job freed back to the driver: the job's modules are
    dropped, but cycles keep its tensors until collected, and torch's caching allocator keeps
    what was freed reserved, so a worker that served large problems in turn ran out of memory
    for the next one (a 12 GiB input beside what earlier jobs held). The next job allocates
    afresh."""
    torch = sys.modules.get("torch")
    if not device.startswith("cuda") or torch is None:
        return
    gc.collect()
    torch.cuda.empty_cache()


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            with contextlib.suppress(OSError):
                os.killpg(0, signal.SIGKILL)
            os._exit(137)
        time.sleep(0.25)


def main() -> int:
    device = os.environ.get(DEVICE_ENV, "cpu")
    parent = int(os.environ.get(PARENT_ENV, "0") or os.getppid())
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # user prints go to the worker log, never into the reply channel
    jobs = os.fdopen(os.dup(0), "rb")
    # user code that reads stdin gets an empty one, as in a fresh process, and never the jobs
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        send(replies, {"ready": True, **warm_up(device)})
    except BaseException as exc:
        send(replies, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    while True:
        job = recv(jobs)
        if job is None:
            return 0
        reply = handle(job, device)
        try:
            send(replies, reply)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            send(
                replies,
                {
                    **reply,
                    "ok": False,
                    "value": None,
                    "error_type": "PicklingError",
                    "error": f"the job's return value cannot be sent back: {exc}",
                },
            )


if __name__ == "__main__":
    # Run the imported module's main, so that jobs unpickle to the same classes it checks.
    from nsight_agent.engine.worker import main as worker_main

    sys.exit(worker_main.main())
