"""What a job on the warm worker changed of its process, put back after it.

A cold run (the ncu path's harness, a KernelBench script) starts in a fresh process; the warm
worker serves job after job in one. A source that sets ``torch.set_default_dtype(torch.float64)``,
``torch.set_num_threads(1)`` or TF32, replaces ``torch.softmax`` or sets an environment variable
would otherwise change every later job there: the next request's inputs in float64, its calls
on one thread, measured and checked unlike the same request on the ncu path. So torch's
process-wide settings, the functions user code replaced in torch's namespaces and the
environment go back when the job ends; a thread user code left running would keep using the
CPU or GPU while later jobs are timed, so the worker is then retired (``leftover_threads``),
as it is when a process the job started still runs (``leftover_processes``).
The interpreter's own process state goes back too: warnings filters (``simplefilter("error")``
would fail every later job that warns), the recursion limit, the decimal context, the umask,
signal handlers and the interval timer, the standard streams, resource limits, the garbage
collector and trace hooks. A job that changed the CPU affinity or the scheduling priority
(``os.nice``), which torch's threads inherit, retires the worker. What cannot
be put back (a hard limit lowered) retires the worker like a leftover thread. Settings that
have no getter (``torch.set_flush_denormal``) or that torch fixes once (interop threads) are
not kept; the working directory, ``sys.path`` and ``sys.argv`` are the run's
(``main._in_run_dir``).
"""

from __future__ import annotations

import contextlib
import decimal
import gc
import os
import resource
import signal
import sys
import sysconfig
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional

from nsight_agent.engine import children

Setting = tuple[str, Callable[[], Any], Callable[[Any], None]]
MATMUL, CUDNN = "torch.backends.cuda.matmul", "torch.backends.cudnn"


def _backend(where: str, owner: Any, name: str) -> Setting:
    def put(value: Any) -> None:
        setattr(owner, name, value)

    return f"{where}.{name}", lambda: getattr(owner, name), put


def _grad(value: bool) -> None:
    torch.set_grad_enabled(value)


def _deterministic(value: tuple[bool, bool]) -> None:
    torch.use_deterministic_algorithms(value[0], warn_only=value[1])


# In this order when put back: the float32 matmul precision also sets the TF32 flags that
# follow it, which then take their own values.
SETTINGS: list[Setting] = [
    ("default dtype", torch.get_default_dtype, torch.set_default_dtype),
    ("intra-op threads", torch.get_num_threads, torch.set_num_threads),
    ("grad mode", torch.is_grad_enabled, _grad),
    ("anomaly detection", torch.is_anomaly_enabled, torch.set_anomaly_enabled),
    (
        "deterministic algorithms",
        lambda: (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        ),
        _deterministic,
    ),
    (
        "float32 matmul precision",
        torch.get_float32_matmul_precision,
        torch.set_float32_matmul_precision,
    ),
    _backend(MATMUL, torch.backends.cuda.matmul, "allow_tf32"),
    _backend(MATMUL, torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction"),
    _backend(MATMUL, torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction"),
    _backend(CUDNN, torch.backends.cudnn, "allow_tf32"),
    _backend(CUDNN, torch.backends.cudnn, "benchmark"),
    _backend(CUDNN, torch.backends.cudnn, "deterministic"),
    _backend(CUDNN, torch.backends.cudnn, "enabled"),
]
if hasattr(torch, "get_default_device"):  # torch >= 2.3
    SETTINGS.append(("default device", torch.get_default_device, torch.set_default_device))
# Which kernels scaled_dot_product_attention may pick and which library a matmul or a solver
# goes to: a job that turns flash attention off would slow every later job's attention.
SDP = ("flash", "mem_efficient", "math", "cudnn")
SETTINGS += [
    (
        f"torch.backends.cuda.{kind}_sdp",
        getattr(torch.backends.cuda, f"{kind}_sdp_enabled"),
        getattr(torch.backends.cuda, f"enable_{kind}_sdp"),
    )
    for kind in SDP
    if hasattr(torch.backends.cuda, f"enable_{kind}_sdp")
]
for _library in ("preferred_blas_library", "preferred_linalg_library"):
    if hasattr(torch.backends.cuda, _library):  # read without bringing CUDA up
        _get = getattr(torch.backends.cuda, _library)
        SETTINGS.append((f"torch.backends.cuda.{_library}", _get, _get))


def _warning_filters() -> tuple[list[Any], Any]:
    return list(warnings.filters), warnings.showwarning


def _put_warning_filters(value: tuple[list[Any], Any]) -> None:
    filters: list[Any] = warnings.filters  # type: ignore[assignment]  # a list at run time
    filters[:] = value[0]
    warnings.showwarning = value[1]
    # The C module caches what each filter list decided; a new version drops those caches.
    mutated = getattr(warnings, "_filters_mutated", None) or getattr(
        warnings, "_filters_mutated_lock_held", None
    )
    if mutated is not None:
        mutated()


def _umask() -> int:
    mask = os.umask(0o022)  # reading it sets it: put it straight back
    os.umask(mask)
    return mask


def _put_umask(mask: int) -> None:
    os.umask(mask)


# Signals a source may take over; the worker's own (SIGCHLD for its children) among them.
SIGNALS = [
    getattr(signal, n)
    for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGALRM", "SIGUSR1", "SIGUSR2", "SIGCHLD")
    if hasattr(signal, n)
]


def _handlers() -> dict[int, Any]:
    return {int(s): signal.getsignal(s) for s in SIGNALS}


def _put_handlers(value: dict[int, Any]) -> None:
    for number, handler in value.items():
        if signal.getsignal(number) is not handler and handler is not None:
            signal.signal(number, handler)


def _timer() -> tuple[float, float]:
    return signal.getitimer(signal.ITIMER_REAL)


def _put_timer(value: tuple[float, float]) -> None:
    signal.setitimer(signal.ITIMER_REAL, *value)  # a timer left running would end a later job


def _streams() -> tuple[Any, Any, Any]:
    return sys.stdin, sys.stdout, sys.stderr


def _put_streams(value: tuple[Any, Any, Any]) -> None:
    sys.stdin, sys.stdout, sys.stderr = value


LIMIT_NAMES = ("NOFILE", "AS", "CPU", "DATA", "FSIZE", "NPROC", "STACK", "CORE")
LIMITS = [getattr(resource, f"RLIMIT_{n}") for n in LIMIT_NAMES if hasattr(resource, f"RLIMIT_{n}")]


def _limits() -> dict[int, tuple[int, int]]:
    return {n: resource.getrlimit(n) for n in LIMITS}


def _put_limits(value: dict[int, tuple[int, int]]) -> None:
    for number, limits in value.items():
        if resource.getrlimit(number) != limits:
            resource.setrlimit(number, limits)  # raises where a hard limit was lowered


def _collector() -> tuple[bool, tuple[int, ...]]:
    return gc.isenabled(), gc.get_threshold()


def _put_collector(value: tuple[bool, tuple[int, ...]]) -> None:
    gc.set_threshold(*value[1])
    (gc.enable if value[0] else gc.disable)()


def _hooks() -> tuple[Any, Any]:
    return sys.gettrace(), sys.getprofile()


def _put_hooks(value: tuple[Any, Any]) -> None:
    sys.settrace(value[0])  # a tracer left on would slow every later job's calls
    sys.setprofile(value[1])


def _priority() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def _retire(_: object) -> None:
    """The put of a setting each thread holds for itself (Linux): putting it back on this
    thread would leave torch's thread pool, started with the job's value, as the job left it."""
    raise RuntimeError("torch's threads keep the job's value")


def _affinity() -> set[int]:
    return os.sched_getaffinity(0)


# The interpreter's process state, put back after torch's.
PROCESS_SETTINGS: list[Setting] = [
    ("warnings filters", _warning_filters, _put_warning_filters),
    ("recursion limit", sys.getrecursionlimit, sys.setrecursionlimit),
    ("decimal context", lambda: decimal.getcontext().copy(), decimal.setcontext),
    ("umask", _umask, _put_umask),
    ("signal handlers", _handlers, _put_handlers),
    ("interval timer", _timer, _put_timer),
    ("standard streams", _streams, _put_streams),
    ("resource limits", _limits, _put_limits),
    ("garbage collector", _collector, _put_collector),
    ("trace and profile hooks", _hooks, _put_hooks),
    ("thread switch interval", sys.getswitchinterval, sys.setswitchinterval),
]
if hasattr(sys, "get_int_max_str_digits"):  # Python >= 3.11
    PROCESS_SETTINGS.append(
        ("int digits limit", sys.get_int_max_str_digits, sys.set_int_max_str_digits)
    )
if hasattr(os, "sched_getaffinity"):  # Linux: the CPUs the job's calls may run on
    PROCESS_SETTINGS.append(("CPU affinity", _affinity, _retire))
if hasattr(os, "getpriority"):  # a lower priority (os.nice) would slow later CPU timings
    PROCESS_SETTINGS.append(("scheduling priority", _priority, _retire))
# Kept only where CUDA is up (reading them would bring it up): a job that made another GPU or
# a side stream current would have every later job run there.
CUDA_SETTINGS: list[Setting] = [
    ("current CUDA device", torch.cuda.current_device, torch.cuda.set_device),
    ("current CUDA stream", torch.cuda.current_stream, torch.cuda.set_stream),
]
if hasattr(torch.cuda, "get_per_process_memory_fraction"):  # a cap would fail later jobs
    CUDA_SETTINGS.append(
        (
            "CUDA memory fraction",
            torch.cuda.get_per_process_memory_fraction,
            torch.cuda.set_per_process_memory_fraction,
        )
    )


# Where a source may replace a function for the whole process (``torch.softmax = ...``,
# ``torch.Tensor.add = ...``): what user code replaced, or added to a class over an inherited
# method, goes back when its job ends. Only functions written in user code: libraries patch
# these too (importing torch._dynamo wraps torch.manual_seed and nn.Module.__init__), and
# torch keeps other state here (torch.cuda's generators) that a job may rightly change.
NAMESPACES: list[Any] = [
    torch,
    torch.nn.functional,
    torch.linalg,
    torch.fft,
    torch.special,
    torch.cuda,
    torch.Tensor,
    torch.nn.Module,
]


def _kept_settings() -> list[Setting]:
    cuda_up = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    return SETTINGS + (CUDA_SETTINGS if cuda_up else []) + PROCESS_SETTINGS


def read(settings: list[Setting] | None = None) -> dict[str, Any]:
    """Each setting's value now, by name; those that cannot be read here are left out."""
    now: dict[str, Any] = {}
    for name, get, _ in _kept_settings() if settings is None else settings:
        with contextlib.suppress(Exception):
            now[name] = get()
    return now


@contextlib.contextmanager
def kept() -> Iterator[list[str]]:
    """Run the body; then put back every setting it changed, in ``_kept_settings``' order,
    every function it replaced in ``NAMESPACES``, and the environment. Yields a list that then
    holds what the body left that would outlive it: the threads of user code still running
    (``leftover_threads``), the processes it started still running (``leftover_processes``)
    and the settings that could not be put back."""
    threads, settings = set(threading.enumerate()), _kept_settings()
    marker = os.environ.get(children.MARKER, "")
    processes = set(_ours(marker))
    before, environment = read(settings), dict(os.environ)
    functions = [(space, dict(vars(space))) for space in NAMESPACES]
    outliving: list[str] = []
    try:
        yield outliving
    finally:
        for key in set(os.environ) - set(environment):
            os.environ.pop(key, None)
        os.environ.update({k: v for k, v in environment.items() if os.environ.get(k) != v})
        for name, get, put in settings:
            try:  # one that cannot be put back spoils no other
                if name in before and get() != before[name]:
                    put(before[name])
            except Exception as err:
                outliving.append(f"{name} not put back ({type(err).__name__}: {err})")
        for space, saved in functions:
            _put_back(space, saved)
        outliving += [f"thread {name}" for name in leftover_threads(threads)]
        outliving += leftover_processes(marker, processes)


def _put_back(space: Any, saved: dict[str, Any]) -> None:
    """``space`` as in ``saved`` where user code changed it: a function it replaced back, and
    on a class one it added (it hides what the class inherits) removed; what a library or
    torch itself changed or added (a submodule imported, a cache) stays."""
    for name, value in list(vars(space).items()):
        old = saved.get(name, _NONE)
        if old is value or not _users(value):
            continue
        with contextlib.suppress(Exception):
            if old is not _NONE:
                setattr(space, name, old)
            elif isinstance(space, type):
                delattr(space, name)


_NONE = object()
# Where installed code lives (the standard library, site-packages) and this package's own
# folder: a function defined elsewhere was written by the user.
_NOT_USERS = tuple(
    {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {str(Path(__file__).resolve().parents[2])}
)


def leftover_threads(before: set[threading.Thread]) -> list[str]:
    """The names of threads running user code that started since ``before`` and still run
    (torch's and libraries' own pools, which later jobs reuse, are not counted)."""
    return [
        t.name
        for t in threading.enumerate()
        if t not in before and t.is_alive() and _users(getattr(t, "_target", None) or t.run)
    ]


# Processes libraries keep for later jobs: torch.compile's compile workers, the helpers of
# multiprocessing. Any other process a job started and left running would run beside the
# jobs after it (a cold run's would end with its harness).
# (torch starts its compile workers as .../torch/_inductor/compile_worker/__main__.py.)
POOLS = (
    "_inductor/compile_worker",
    "_inductor.compile_worker",
    "multiprocessing.resource_tracker",
    "multiprocessing.forkserver",
)


def _descendants(pid: int) -> set[int] | None:
    """This process's children and theirs, from /proc's children lists (None where the kernel
    keeps none): microseconds, where a scan of every process's environment takes
    milliseconds on a busy machine, twice a job."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        tasks = Path(f"/proc/{todo.pop()}/task")
        try:
            lists = [(t / "children").read_text() for t in tasks.iterdir()]
        except OSError:
            if not found and not (tasks / str(pid) / "children").exists():
                return None
            continue
        new = {int(c) for text in lists for c in text.split()} - found
        found |= new
        todo += new
    return found


def _ours(marker: str) -> dict[int, str]:
    """The processes this worker started, and theirs: its descendants, else those that carry
    its marker (``engine/children.py``: they inherit it): pid -> command line."""
    pids = _descendants(os.getpid())
    if pids is None:
        pids = set(children.marked_processes(marker, exact=True)) if marker else set()
    found = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return found


def leftover_processes(marker: str, before: set[int]) -> list[str]:
    """The processes started since ``before`` that still run, other than libraries' pools.
    One just forked may not have run its program yet (its command line still ours, or
    none): those are read again for up to a second (a fork that runs no other program, as
    multiprocessing's, stays ours and counts)."""
    own = Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode()

    def left() -> dict[int, str]:
        found = _ours(marker).items()
        return {p: c for p, c in found if p not in before and not any(x in c for x in POOLS)}

    found = left()
    for _ in range(20):  # a second at most, spent only where a process was left
        if not any(command in ("", own) for command in found.values()):
            break
        time.sleep(0.05)
        found = left()
    return [f"process {pid} ({command.strip()[:60]})" for pid, command in found.items()]


def _users(value: Any) -> bool:
    """Whether ``value`` is a function (or method) defined in user code."""
    if isinstance(value, types.ModuleType):
        return False
    target = getattr(value, "__func__", value)
    code = getattr(target, "__code__", None)
    file = getattr(code, "co_filename", "")
    return bool(file) and not str(Path(file).resolve()).startswith(_NOT_USERS)
