"""The interpreter's and the operating system's state of a warm worker's process that a job may
change, and the processes a job leaves running (``job_state.kept`` uses both).

Warnings filters (``simplefilter("error")`` would fail every later job that warns), the
recursion limit, the decimal context, the umask, signal handlers and the interval timer, the
standard streams, resource limits, the garbage collector and trace hooks are put back. The CPU
affinity and the scheduling priority (``os.nice``) are per thread on Linux and torch's thread
pool inherits them, so a job that changed one retires the worker instead (``_retire``), as
does one that leaves a process of its own running (``leftover_processes``). The working
directory, ``sys.path`` and ``sys.argv`` are the run's (``main._in_run_dir``).
"""

from __future__ import annotations

import contextlib
import decimal
import gc
import os
import resource
import signal
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nsight_agent.engine import children

# (name, read it, put it back): the put of a setting whose value the job changed.
Setting = tuple[str, Callable[[], Any], Callable[[Any], None]]


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


def our_processes(marker: str) -> set[int]:
    """The processes this worker started, and theirs: its descendants, else those that carry
    its marker (``engine/children.py``: they inherit it)."""
    pids = _descendants(os.getpid())
    if pids is None:
        pids = set(children.marked_processes(marker, exact=True)) if marker else set()
    return pids


def _command(pid: int | str) -> str | None:
    """A process's command line, None once it has ended."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return None


def leftover_processes(marker: str, before: set[int]) -> list[str]:
    """The processes started since ``before`` that still run, other than libraries' pools.
    Command lines are read only for those. One just forked may not have run its program yet
    (its command line still ours, or none): those are read again for up to a second (a fork
    that runs no other program, as multiprocessing's, stays ours and counts)."""

    def left() -> dict[int, str]:
        found = {p: _command(p) for p in our_processes(marker) - before}
        return {p: c for p, c in found.items() if c is not None and not any(x in c for x in POOLS)}

    found = left()
    own = _command("self") if found else None
    for _ in range(20):  # a second at most, spent only where a process was left
        if not any(command in ("", own) for command in found.values()):
            break
        time.sleep(0.05)
        found = left()
    return [f"process {pid} ({command.strip()[:60]})" for pid, command in found.items()]
