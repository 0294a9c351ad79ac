"""Pre-launched ncu targets: per GPU slot, processes waiting under ``ncu --mode launch``.
Each has Python, torch and triton imported (``worker/target.py``), so a profile job skips
that start (seconds of imports).

    pool = TargetPool("0", size=1)     # owned by the local executor, one per GPU slot
    pool.start()                       # a keeper thread launches the targets
    target = pool.take()               # a ready Target, now the caller's, or None
    ... collection/collect/attach.profile_prelaunched(target, ...)   # hand it the job, attach, kill it
    pool.close()                       # kill every waiting target

Each target is single use (ncu attaches once per process); after each take the keeper
launches a new one. A target runs in its own session with the slot's ``CUDA_VISIBLE_DEVICES``,
its own block of ports, and the environment marker ``NSIGHT_AGENT_CHILD=<our pid>-target-
<slot>.<n>`` (``engine/process.py``: ``kill_all`` at a server's end and ``reap_orphans`` reach
it); a kill is its whole process group (a SIGTERM to the launcher alone leaves the Python
target behind), and the target ends itself when we are gone. The pool turns itself off, with
the reason, when ncu is missing, refuses the launch (an option such as the NVTX filter), or
three launches in a row fail: every job then launches cold, as before.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nsight_agent.engine import children, pinning, process
from nsight_agent.engine.collection import ncu
from nsight_agent.engine.collection.ncu_args import launch_argv
from nsight_agent.engine.collection.ncu_log import ERROR_LINE
from nsight_agent.engine.worker import target as target_program
from nsight_agent.errors import InvalidRequestError, NcuNotFoundError

COUNT_ENV = "NSIGHT_AGENT_TARGETS"
START_TIMEOUT = 180.0  # a launch that is not ready by then failed
FAILURES_OFF = 3  # launches failed in a row before the pool turns itself off
# ncu listens on a block of ports from --port (64 by default: 49152-49215). Each target gets
# its own block above the default one, which cold ncu runs may use.
PORT_FIRST, PORT_BLOCK, PORT_LAST = 49152 + 4 * 64, 64, 65535

_ports_used: set[int] = set()
_ports_lock = threading.Lock()
_counter = itertools.count(1)


def configured_count(value: str | None = None) -> int:
    """Targets per GPU slot: ``NSIGHT_AGENT_TARGETS`` (default 1; 0 turns them off). An
    attached run reads as a cold one on the H200 (docs/ARCHITECTURE.md, "Pre-launched
    targets"); where ncu cannot attach, the pool turns itself off and says why."""
    text = (os.environ.get(COUNT_ENV, "1") if value is None else value).strip() or "1"
    if not text.isdigit():
        raise InvalidRequestError(
            f"{COUNT_ENV} must be a whole number >= 0, not {text!r}.",
            f"Set {COUNT_ENV}=1 (one pre-launched ncu target per GPU, the default), a larger "
            "number, or 0 to launch every ncu run cold.",
        )
    return int(text)


def _claim_port() -> int:
    """A block of ports no other target of ours holds and nothing listens on."""
    with _ports_lock:
        for port in range(PORT_FIRST, PORT_LAST - PORT_BLOCK, PORT_BLOCK):
            if port in _ports_used:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind(("", port))
                except OSError:
                    continue
            _ports_used.add(port)
            return port
    raise OSError(f"no free block of {PORT_BLOCK} ports from {PORT_FIRST}")


def _release_port(port: int) -> None:
    with _ports_lock:
        _ports_used.discard(port)


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent's wait does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


class Target:
    """One target process under ``ncu --mode launch``, from launch to its single job's end."""

    def __init__(self, slot: str, env: dict[str, str] | None = None, nvtx: bool = True) -> None:
        self.slot = slot
        self.nvtx = nvtx
        self.port = _claim_port()
        n = next(_counter)
        name = f"{os.getpid()}-{slot.replace('/', '_')}-{n}"
        self.folder = Path(tempfile.gettempdir()) / "nsight-agent-targets" / name
        self.folder.mkdir(parents=True, exist_ok=True)
        self.log_path = self.folder / "launch.log"
        self.marker = children.new_marker(f"target-{slot}")
        self.started = time.monotonic()
        self._killed = False
        with pinning.pinned(slot):  # the slot's GPU, as a job pinned to it gets
            full_env = process.child_env(env)
        full_env[children.MARKER] = self.marker
        full_env[target_program.SERVER_ENV] = str(os.getpid())
        program = [process.python_executable(), "-m", target_program.__name__, str(self.folder)]
        try:
            # No NVTX filter: ncu 2025.3.1 refuses --nvtx-include in launch and attach mode.
            argv = launch_argv(ncu.find_ncu(), self.port, self.nvtx, program)
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=full_env,
                    start_new_session=True,  # a kill reaches the launcher and its target
                )
        except BaseException:
            self._cleanup()
            raise

    # --- state ---------------------------------------------------------------------------

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ready(self) -> bool:
        """Waiting for a job: launched, imports done, not ended."""
        return self.alive() and (self.folder / target_program.READY_FILE).exists()

    def info(self) -> dict[str, Any]:
        """What the target said when ready (pid, import seconds, versions); {} before."""
        with contextlib.suppress(OSError, ValueError):
            data = json.loads((self.folder / target_program.READY_FILE).read_text())
            return data if isinstance(data, dict) else {}
        return {}

    def launch_log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")
        return ""

    # --- attach.Prelaunched --------------------------------------------------------------

    def hand(
        self, run_dir: Path, argv: Sequence[str], output: Path, env: dict[str, str] | None = None
    ) -> None:
        job = target_program.TargetJob(str(run_dir), list(argv), str(output), dict(env or {}))
        target_program.write_job(self.folder, job)

    def ended(self) -> bool:
        if not self.alive():
            return True
        pid = self.info().get("pid")
        exited = (self.folder / target_program.EXIT_FILE).exists()
        return exited and isinstance(pid, int) and not _running(pid)

    def exit_status(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            data = json.loads((self.folder / target_program.EXIT_FILE).read_text())
            return int(data["returncode"])
        return self.proc.poll()

    def kill(self) -> None:
        """Kill the launcher's process group and every process with the marker; forget the
        folder and the ports."""
        if self._killed:
            return
        self._killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        children.kill_marked(self.marker, exact=True)
        self.proc.wait()
        self._cleanup()

    def _cleanup(self) -> None:
        _release_port(self.port)
        shutil.rmtree(self.folder, ignore_errors=True)


class TargetPool:
    """One GPU slot's pre-launched targets: ``size`` kept ready by a keeper thread."""

    def __init__(self, slot: str, size: int = 1, *, env: dict[str, str] | None = None) -> None:
        self.slot = slot
        self.size = size
        self.taken = 0
        self._env = env
        self._waiting: list[Target] = []
        self._failures = 0
        self._nvtx = True  # --nvtx at launch until ncu refuses it
        self._off = "" if size > 0 else f"{COUNT_ENV}=0"
        self._closed = False
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()
        _POOLS.add(self)

    def start(self) -> None:
        """Start the keeper (idempotent); off at once, with why, when ncu is missing."""
        with self._cond:
            if self._thread is not None or self._closed or self._off:
                return
            try:
                ncu.find_ncu()
            except NcuNotFoundError:
                self._off = "ncu not found"
                return
            self._thread = threading.Thread(
                target=self._keep, name=f"nsight-agent-targets-{self.slot}", daemon=True
            )
            self._thread.start()

    def take(self) -> Target | None:
        """A ready target, now the caller's (it must end it: ``kill``), or None; the keeper
        launches the next one."""
        with self._cond:
            for target in self._waiting:
                if target.ready():
                    self._waiting.remove(target)
                    self.taken += 1
                    self._cond.notify_all()
                    return target
        return None

    def turn_off(self, why: str) -> None:
        """Stop serving jobs (what targets give cannot be used here); the keeper kills the
        waiting ones."""
        with self._cond:
            self._off = self._off or why
            self._cond.notify_all()

    def off_reason(self) -> str:
        """Why this pool serves no job ("NSIGHT_AGENT_TARGETS=0", "ncu not found", ...); ""
        while it is on."""
        with self._cond:
            return self._off

    def any_ready(self) -> bool:
        with self._cond:
            return not self._off and not self._closed and any(t.ready() for t in self._waiting)

    def why_none(self) -> str:
        with self._cond:
            if self._off:
                return f"pre-launched targets are off ({self._off})"
            if self._closed:
                return "pre-launched targets closed (the executor is closing)"
            if self._thread is None:
                return "pre-launched targets not started"
            return "no pre-launched target ready yet (one is starting)"

    def info(self) -> str:
        """One phrase for pool_info: "1 ready", "0 ready, 1 starting", or "off: why"."""
        with self._cond:
            if self._off:
                return f"off: {self._off}"
            ready = sum(1 for t in self._waiting if t.ready())
            starting = len(self._waiting) - ready
            return f"{ready} ready" + (f", {starting} starting" if starting else "")

    def wait_ready(self, timeout: float) -> bool:
        """Wait until a target is ready (tests, benchmarks); False past ``timeout`` or off."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not any(t.ready() for t in self._waiting):
                left = deadline - time.monotonic()
                if self._off or self._closed or left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
            return True

    def close(self) -> None:
        """Stop launching and kill every waiting target (a taken one is its job's)."""
        with self._cond:
            self._closed = True
            waiting, self._waiting = self._waiting, []
            self._cond.notify_all()
            thread = self._thread
        for target in waiting:
            target.kill()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    # --- the keeper ----------------------------------------------------------------------

    def _keep(self) -> None:
        while True:
            with self._cond:
                if not self._closed:
                    self._check()
                if self._closed or self._off:  # nothing more to launch; none left waiting
                    doomed, self._waiting = self._waiting, []
                    break
                wanted = self.size - len(self._waiting)
            if wanted > 0:
                self._launch()  # one at a time, outside the lock: take() never waits on it
                continue
            with self._cond:
                if not self._closed:
                    self._cond.wait(0.1 if self._starting() else 1.0)
        for target in doomed:
            target.kill()

    def _launch(self) -> None:
        try:
            target = Target(self.slot, self._env, self._nvtx)
        except (OSError, NcuNotFoundError) as err:
            with self._cond:
                self._off = f"cannot launch a target: {err}"
            return
        with self._cond:
            if not self._closed:
                self._waiting.append(target)
                return
        target.kill()  # the pool closed while this one launched

    def _starting(self) -> bool:
        return any(not t.ready() for t in self._waiting)

    def _check(self) -> None:
        """Forget targets that ended or never got ready; count failed launches in a row and
        turn the pool off, saying why, past ``FAILURES_OFF`` or on an option ncu refused.
        ncu prints "Waiting for profiler to attach" as it launches, before the target imports
        anything: the line says nothing about a CUDA call (taken for one, it would kill every
        target while it imports and turn the pool off)."""
        for target in list(self._waiting):
            if target.ready():
                self._failures = 0
                continue
            log = target.launch_log()
            late = time.monotonic() - target.started > START_TIMEOUT
            if target.alive() and not late:
                continue
            self._waiting.remove(target)
            target.kill()
            self._failures += 1
            errors = ERROR_LINE.findall(log)
            why = errors[0].strip() if errors else (log.strip().splitlines() or ["no output"])[-1]
            if late:
                why = f"not ready within {START_TIMEOUT:g} s"
            if target.nvtx and any("--nvtx" in e for e in errors):
                self._nvtx, self._failures = False, 0  # try once more, without --nvtx
                self._cond.notify_all()
                continue
            if any("option" in e.lower() for e in errors) or self._failures >= FAILURES_OFF:
                self._off = f"the launch failed {self._failures} time(s): {why[:300]}"
            self._cond.notify_all()


_POOLS: weakref.WeakSet[TargetPool] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for pool in list(_POOLS):
        pool.close()
