"""The one way this package runs a subprocess: argv list, timeout, whole-group kill, poll hook.

Every child gets its own session (process group), so a kill reaches what it started too; a
SIGTERM to us while a child runs (main thread only) unwinds through the same kill. Output goes
to a file for long runs (no pipe to fill up), or is captured for short queries.

Children belong to this process and die with it, whatever ends the call:
- on Linux each child is started with the parent-death signal (``PR_SET_PDEATHSIG`` =
  SIGKILL), so it dies when we do, even when we are killed with SIGKILL;
- each child carries the environment marker ``NSIGHT_AGENT_CHILD=<our pid>-<tag>``, which
  its own children inherit: a kill reaches the process group and every process carrying the
  marker (found in ``/proc/*/environ``), also those that started a session of their own;
- ``kill_all`` ends every child of this process (a server shutting down), ``reap_orphans``
  the marked processes whose owner is gone (a server killed before it could clean up).
Who ends this process is said first (``begin_ending``): a child that dies after that died of
our kill, and ``run_to_file`` raises ``RunInterruptedError`` naming who, not the child's status.
Program output kept in a file is capped after the run: the head and the tail stay, and the
cut is stated in the file.
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nsight_agent.engine import bytecode, pinning
from nsight_agent.errors import RunInterruptedError

MARKER = "NSIGHT_AGENT_CHILD"
OUTPUT_HEAD = 256 * 1024
OUTPUT_TAIL = 256 * 1024

_live: set[subprocess.Popen[bytes] | subprocess.Popen[str]] = set()
_live_lock = threading.Lock()
_counter = itertools.count(1)
_ending: list[str] = []  # who ends this process, once it is ending (the first to say wins)


class Terminated(BaseException):
    """SIGTERM arrived while a child ran: unwind so its process group is killed first."""


class RunTimeout(Exception):
    """The child ran past its limit and was killed (with its whole group)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"ran past {seconds:.0f} s")
        self.seconds = seconds


@dataclass(frozen=True)
class Finished:
    returncode: int
    seconds: float


@dataclass(frozen=True)
class Captured:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


# --- belonging: the parent-death signal and the environment marker ---------------------------


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> Callable[[], None] | None:
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


def _marked_env(env: Mapping[str, str] | None, marker: str) -> dict[str, str]:
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
def _tracked(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> Iterator[None]:
    with _live_lock:
        _live.add(proc)
    try:
        yield
    finally:
        with _live_lock:
            _live.discard(proc)


@contextlib.contextmanager
def children_die_with_us(
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


# --- Python children: their interpreter and environment --------------------------------------

# The folder that holds the nsight_agent package: child processes import it from there.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def python_executable() -> str:
    """The interpreter a Python child (the profiled program, a worker) runs in: ours."""
    return sys.executable or "python3"


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A Python child's environment: ours, this package importable, a bytecode cache."""
    env = dict(os.environ)
    bytecode.add_cache(env)
    parts = [str(PACKAGE_ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(pinning.pinned_env())  # the executor's GPU for this job, when it pinned one
    env.update(extra or {})
    return env


# --- running ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """A child in its own session would not get our SIGTERM: turn the signal into an
    exception (main thread only; signals go nowhere else) and kill the group on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def cap_output(path: Path, head: int = OUTPUT_HEAD, tail: int = OUTPUT_TAIL) -> bool:
    """Keep the first ``head`` and last ``tail`` bytes of a long output file, and say what was
    cut; return whether anything was."""
    try:
        size = path.stat().st_size
    except OSError:
        return False
    if size <= head + tail + 1024:
        return False
    with open(path, "rb") as f:
        first = f.read(head)
        f.seek(size - tail)
        last = f.read(tail)
    cut = size - head - tail
    note = (
        f"\n[... nsight-agent cut {cut} bytes of program output here: the output was {size} "
        f"bytes; the first {head} and the last {tail} are kept ...]\n"
    ).encode()
    tmp = path.with_name(path.name + ".cap")
    tmp.write_bytes(first + note + last)
    tmp.replace(path)
    return True


def run_to_file(
    argv: Sequence[str],
    *,
    output_path: Path,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    poll: Callable[[], None] | None = None,
    poll_interval: float = 0.5,
    tag: str | None = None,
    cap: bool = True,
) -> Finished:
    """Run ``argv`` with stdout+stderr in ``output_path``; raise ``RunTimeout`` past ``timeout``.

    ``poll`` is called while waiting (progress); an exception it raises, such as a
    cancellation, kills the group (and every process with the child's marker) the same way a
    timeout does and propagates. ``tag`` names the child in its marker (run id and stage).
    The output file is capped (head and tail kept) when the child is done, whatever the end.
    """
    start = time.monotonic()
    marker = new_marker(tag)
    try:
        with open(output_path, "wb") as out, _sigterm_raises():
            proc = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env=_marked_env(env, marker),
                start_new_session=True,
                preexec_fn=_die_with_parent(os.getpid()),
            )
            with _tracked(proc):
                try:
                    rc = _wait(proc, start, timeout, poll, poll_interval)
                except BaseException:
                    kill_group(proc, marker)
                    raise
                kill_marked(marker, exact=True)  # whatever it left running in the background
                if ending() is not None:  # it died of our kill: not its own failure
                    raise RunInterruptedError(ending() or "")
    finally:
        if cap:
            cap_output(output_path)
    return Finished(rc, time.monotonic() - start)


def _wait(
    proc: subprocess.Popen[bytes],
    start: float,
    timeout: float,
    poll: Callable[[], None] | None,
    poll_interval: float,
) -> int:
    # Poll often at first (a cancel soon after the start is seen at once), then every
    # poll_interval.
    step = min(0.05, poll_interval)
    while True:
        try:
            return proc.wait(timeout=step)
        except subprocess.TimeoutExpired:
            if poll is not None:
                poll()
            if time.monotonic() - start > timeout:
                raise RunTimeout(timeout) from None
            step = min(step * 2, poll_interval)


def run_capture(
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Captured:
    """Run a short command and capture its text output; raise ``RunTimeout`` past ``timeout``.

    Raises OSError when the program cannot be started.
    """
    start = time.monotonic()
    marker = new_marker("capture")
    with (
        _sigterm_raises(),
        subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=_marked_env(env, marker),
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()),
        ) as proc,
        _tracked(proc),
    ):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc, marker)
            raise RunTimeout(timeout) from None
        except BaseException:
            kill_group(proc, marker)
            raise
    return Captured(proc.returncode, out, err, time.monotonic() - start)
