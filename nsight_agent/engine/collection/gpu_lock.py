"""One profiler per GPU across processes: an exclusive file lock per GPU around every ncu run.

The driver lets one profiling session at a time use a GPU's performance counters. A second
ncu on the same GPU fails with "a driver resource was unavailable" and ends its program
(exit code 9): seen on the H200 with two test processes profiling at once. Within one server
the executor already runs one job per GPU; this lock makes two servers, a server and the
CLI, or two users on one machine wait their turn instead (a cancel and a limit still end the
wait). Lock files live in a folder every user may write (``NSIGHT_AGENT_LOCK_DIR``, else
``<tmp>/nsight-agent-gpu-locks``), one per GPU UUID; the holder writes its pid, run tag and
start there so that a waiter can say whom it waits for.

``flock`` locks are released by the kernel when the holder dies, so a killed server leaves
no stale lock. Tools that do not take this lock (DCGM's profiling module, Nsight Systems'
GPU metrics, an older nsight-agent) are handled by ``ncu.profile_cold``'s retry.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsight_agent.engine.pinning import nvml_query, nvml_text
from nsight_agent.errors import ProfilerBusyError

LOCK_DIR_ENV = "NSIGHT_AGENT_LOCK_DIR"
MACHINE_KEY = "all-gpus"  # a GPU is present but NVML cannot name it: one lock for the machine

log = logging.getLogger(__name__)


def lock_dir() -> Path:
    return Path(
        os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "nsight-agent-gpu-locks"
    )


def gpu_keys(visible: str | None) -> list[str]:
    """The lock names of the GPUs a child with ``CUDA_VISIBLE_DEVICES=visible`` may profile:
    their UUIDs (every GPU of the machine when ``visible`` is None); [] without a GPU.

    An index is read in NVML's order, which is CUDA's for identical GPUs (and with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` for any)."""
    entries = None if visible is None else [e.strip() for e in visible.split(",") if e.strip()]
    if entries is not None and (not entries or entries[0].startswith("-") or entries[0] == "cpu"):
        return []  # CUDA_VISIBLE_DEVICES="" or "-1": the child sees no GPU
    uuids = _nvml_uuids()
    if uuids is None:
        return [MACHINE_KEY]
    if not uuids:
        return []
    if entries is None:
        return sorted(uuids)
    keys = set()
    for entry in entries:
        if entry.isdigit():
            index = int(entry)
            keys.add(uuids[index] if index < len(uuids) else MACHINE_KEY)
        else:
            keys.add(entry)  # a UUID (GPU-..., MIG-...) as CUDA_VISIBLE_DEVICES spells it
    return sorted(keys)


def _nvml_uuids() -> list[str] | None:
    """UUIDs by NVML index; [] when no driver answers (no GPU); None when NVML is missing."""

    def uuids(nv: Any) -> list[str]:
        count = int(nv.nvmlDeviceGetCount())
        return [
            nvml_text(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))) for i in range(count)
        ]

    none: list[str] = []
    return nvml_query(uuids, no_driver=none)


@dataclass(frozen=True)
class Holder:
    """Who holds a GPU's lock, as the holder wrote it."""

    pid: int
    tag: str
    since: float

    def describe(self) -> str:
        held = max(0.0, time.time() - self.since)
        return f"pid {self.pid} ({self.tag or 'a profiling run'}, for {held:.0f} s)"


def holder(key: str) -> Holder | None:
    """What the lock file of ``key`` says about its holder (stale when nobody holds it)."""
    try:
        data = json.loads((lock_dir() / f"{key}.lock").read_text() or "{}")
        return Holder(int(data["pid"]), str(data.get("tag", "")), float(data["since"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextlib.contextmanager
def held(
    keys: list[str],
    *,
    tag: str,
    timeout: float,
    poll: Callable[[], None] | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[float]:
    """Hold the locks of ``keys`` (in sorted order: two holders never deadlock) for the block;
    yield the seconds spent waiting. ``poll`` is called while waiting (a cancel raises
    there); ``on_wait`` gets one line when the first wait begins. Past ``timeout`` seconds of
    waiting, ``ProfilerBusyError`` names the holder. A lock file that cannot be opened (another
    user's, a read-only folder) is skipped with a warning: ncu's own error is the backstop."""
    start = time.monotonic()
    fds: list[int] = []
    try:
        for key in sorted(set(keys)):
            fd = _open(key)
            if fd is None:
                continue
            try:
                _acquire(fd, key, start, timeout, poll, on_wait)
            except BaseException:
                os.close(fd)  # not ours: its holder's lines stay as they are
                raise
            fds.append(fd)
            _write_holder(fd, tag)
        yield time.monotonic() - start
    finally:
        for fd in reversed(fds):
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing releases the flock


def _open(key: str) -> int | None:
    folder = lock_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # shared by every user: sticky and world-writable
            if folder.stat().st_uid == os.getuid():
                folder.chmod(0o1777)
        fd = os.open(folder / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as err:
        log.warning("GPU lock %s not taken (%s): profiling without it", key, err)
        return None
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)  # the umask must not lock other users out
    return fd


def _acquire(
    fd: int,
    key: str,
    start: float,
    timeout: float,
    poll: Callable[[], None] | None,
    on_wait: Callable[[str], None] | None,
) -> None:
    step = 0.02
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        who = holder(key)
        if not told and on_wait is not None:
            told = True
            on_wait(f"waiting for GPU {key}'s profiler, held by {_who(who)}")
        if poll is not None:
            poll()  # a cancel raises here
        if time.monotonic() - start > timeout:
            raise ProfilerBusyError(
                f"GPU {key}'s profiler stayed held by {_who(who)} for the whole {timeout:.0f} s "
                "limit of this run; nothing was profiled.",
                "Another profiling run is using this GPU's counters: wait for it, cancel it, or "
                "give this run a longer timeout_s.",
            )
        time.sleep(step)
        step = min(step * 2, 0.25)


def _who(who: Holder | None) -> str:
    return who.describe() if who is not None else "another process"


def _write_holder(fd: int, tag: str) -> None:
    data = json.dumps({"pid": os.getpid(), "tag": tag, "since": time.time()}).encode()
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
