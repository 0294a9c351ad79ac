"""Children belong to this process and die with it, whatever ends the call.

- on Linux each child is started with the parent-death signal (``PR_SET_PDEATHSIG`` =
  SIGKILL), so it dies when we do, even when we are killed with SIGKILL;
- each child carries the environment marker ``NSIGHT_AGENT_CHILD=<our pid>-<tag>``, which
  its own children inherit: a kill reaches the process group and every process carrying the
  marker (found in ``/proc/*/environ``), also those that started a session of their own;
- ``kill_all`` ends every child of this process (a server shutting down), ``reap_orphans``
  the marked processes whose owner is gone (a server killed before it could clean up).
Who ends this process is said first (``begin_ending``): a child that dies after that died of
our kill, not of its own failure. ``start_ticks`` names one process even after its pid is
reused (the owner of a record). engine/process.py starts the children and uses this.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

MARKER = "NSIGHT_AGENT_CHILD"

_live: set[subprocess.Popen[bytes] | subprocess.Popen[str]] = set()
_live_lock = threading.Lock()
_counter = itertools.count(1)
_ending: list[str] = []  # who ends this process, once it is ending (the first to say wins)


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> Callable[[], None] | None:
    """The preexec hook: SIGKILL this child when the thread that started it ends; if the
    parent is already gone (it died between fork and here), end at once."""
    prctl = _PRCTL
    if prctl is None:
        return None

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(137)

    return hook


def owner_prefix(pid: int | None = None) -> str:
    """The marker prefix of every child of the process ``pid`` (default: this one)."""
    return f"{pid if pid is not None else os.getpid()}-"


def new_marker(tag: str | None = None) -> str:
    """A marker for one child: ``<our pid>-<tag>.<n>`` (tag: the run id and stage)."""
    return f"{owner_prefix()}{tag or 'cmd'}.{next(_counter)}"


def marked_env(env: Mapping[str, str] | None, marker: str) -> dict[str, str]:
    out = dict(env) if env is not None else dict(os.environ)
    out[MARKER] = marker
    return out


def marked_processes(prefix: str, *, exact: bool = False) -> dict[int, str]:
    """Live processes whose ``NSIGHT_AGENT_CHILD`` marker starts with ``prefix`` (or is it,
    when ``exact``): pid -> marker. Processes we may not read (other users') and zombies (no
    environment) are skipped."""
    found: dict[int, str] = {}
    key = f"{MARKER}=".encode()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            data = (entry / "environ").read_bytes()
        except OSError:
            continue
        for item in data.split(b"\0"):
            if item.startswith(key):
                value = item[len(key) :].decode(errors="replace")
                if value == prefix or (not exact and value.startswith(prefix)):
                    found[int(entry.name)] = value
                break
    found.pop(os.getpid(), None)
    return found


def kill_marked(prefix: str, *, exact: bool = False) -> list[int]:
    """SIGKILL every process whose marker starts with ``prefix`` (or is it, when ``exact``);
    return their pids."""
    killed = []
    for _ in range(3):  # a child may fork while we kill: look again until none is left
        pids = list(marked_processes(prefix, exact=exact))
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        time.sleep(0.05)
    return killed


def kill_group(proc: subprocess.Popen[bytes] | subprocess.Popen[str], marker: str = "") -> None:
    """Kill the child's process group and every process that carries its marker."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if marker:
        kill_marked(marker, exact=True)
    proc.wait()


def kill_all() -> list[int]:
    """Kill every child this process started and every process carrying our marker."""
    with _live_lock:
        procs = list(_live)
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    return kill_marked(owner_prefix())


def reap_orphans() -> list[int]:
    """Kill marked processes whose owner is no longer running (left by a killed server)."""
    owners: dict[int, list[int]] = {}
    for pid, marker in marked_processes("").items():
        head = marker.split("-", 1)[0]
        if head.isdigit():
            owners.setdefault(int(head), []).append(pid)
    killed = []
    for owner, pids in owners.items():
        if owner == os.getpid() or Path(f"/proc/{owner}").exists():
            continue
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed


@contextlib.contextmanager
def tracked(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> Iterator[None]:
    with _live_lock:
        _live.add(proc)
    try:
        yield
    finally:
        with _live_lock:
            _live.discard(proc)


@contextlib.contextmanager
def die_with_us(
    on_end: Callable[[str], object] | None = None, *, leaving: str = "the server's end"
) -> Iterator[None]:
    """For a server's main thread: SIGTERM, SIGINT and SIGHUP kill every child, then end the
    process at once with status 128 + signal (a reader thread blocked on stdin would hold a
    normal exit); leaving the block (stdin closed) kills them too. Before the kill, the end
    is said (``begin_ending``: the signal's name, or ``leaving``) and ``on_end(who)`` runs
    (the server marks its open runs interrupted)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]
    previous = {s: signal.getsignal(s) for s in signals}

    def end(who: str) -> None:
        who = begin_ending(who)
        if on_end is not None:
            with contextlib.suppress(Exception):  # the kill must happen whatever
                on_end(who)
        kill_all()

    def handler(signum: int, frame: object) -> None:
        end(f"the server's shutdown ({signal.Signals(signum).name})")
        os._exit(128 + signum)

    for s in signals:
        signal.signal(s, handler)
    try:
        yield
    finally:
        end(leaving)
        for s, h in previous.items():
            signal.signal(s, h)


def begin_ending(who: str) -> str:
    """Say that this process is ending and who ends it (e.g. "the server's shutdown
    (SIGTERM)"), before its children are killed; the first to say wins. Returns who."""
    with _live_lock:
        if not _ending:
            _ending.append(who)
        return _ending[0]


def ending() -> str | None:
    """Who ends this process, once ``begin_ending`` was called; None while it serves."""
    return _ending[0] if _ending else None


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, Linux): with the pid, it names
    one process even after the pid is reused. None where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None
