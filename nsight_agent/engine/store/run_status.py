"""A run's record while it is made: ``status.json`` (written atomically) goes from running
through its stages (with the wall seconds of each) to passed, failed (with the stage and the
message), timed_out, cancelled or interrupted (``ended_by`` says who ended it: the caller, the
server's shutdown, the client's exit, or a server that died while it ran, found at the next
start); errors leaving a run carry its id; OSErrors of the run store become specific errors
with what to do.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nsight_agent.engine import children
from nsight_agent.errors import (
    CollectionTimeoutError,
    NsightAgentError,
    RunCancelledError,
    RunInterruptedError,
    RunsFolderNotWritableError,
    RunsRootNotAFolderError,
    RunStorageError,
    StorageFullError,
)

STATUS_FILE = "status.json"
FINAL = ("passed", "failed", "timed_out", "cancelled", "interrupted")
HOST = socket.gethostname()
CANCELLED_BY = "the caller (an MCP client's cancel or a closed request; JobHandle.cancel)"


@contextlib.contextmanager
def storage_errors(where: Path) -> Iterator[None]:
    """OSErrors of the run store -> specific errors with what to do."""
    try:
        yield
    except RunStorageError:
        raise
    except (NotADirectoryError, FileExistsError) as err:
        raise RunsRootNotAFolderError(
            f"The runs folder {where} cannot be created: {err.filename} is a file, not a folder.",
            "Point the runs folder elsewhere (NSIGHT_AGENT_RUNS=/path or --runs-root), or move "
            "that file away.",
        ) from err
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StorageFullError(
                f"The disk holding the runs folder {where} is full: {err}",
                "Delete old runs (each is a folder under the runs folder) or point the runs "
                "folder at a larger disk (NSIGHT_AGENT_RUNS or --runs-root).",
            ) from err
        if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise RunsFolderNotWritableError(
                f"The runs folder {where} is not writable: {err}",
                "Give this user write access to it, or point the runs folder at a writable "
                "place (NSIGHT_AGENT_RUNS=/path or --runs-root).",
            ) from err
        raise RunStorageError(
            f"Cannot write the run's files under {where}: {err}",
            "Check the runs folder (NSIGHT_AGENT_RUNS or --runs-root) exists and is writable.",
        ) from err


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_status(run_dir: Path, run_id: str, status: str, **fields: Any) -> None:
    """Write ``status.json`` atomically: a reader sees the old status or the new one."""
    old = read_status(run_dir) or {}
    now = time.time()
    data = {
        "run_id": run_id,
        "status": status,
        "stage": fields.pop("stage", old.get("stage")),
        "message": "",
        "pid": os.getpid(),
        "pid_started": children.start_ticks(os.getpid()),
        "host": HOST,
        "started": old.get("started", now),
        "updated": now,
        **fields,
    }
    if status in FINAL and "seconds" not in fields:
        data["seconds"] = round(now - float(data["started"]), 3)
    write_atomic(run_dir / STATUS_FILE, json.dumps(data, indent=1, default=str))


def read_status(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def tag_run(err: BaseException, run_id: str) -> BaseException:
    """Put the run id on an error raised while a run was made: ``err.run_id`` and, for our
    errors, "(run <id>)" in the message, so that the answer names the run to read."""
    if getattr(err, "run_id", None):
        return err
    setattr(err, "run_id", run_id)  # noqa: B010 - an attribute the error classes do not declare
    if isinstance(err, NsightAgentError):
        err.reword(
            f"{err.message} (run {run_id})",
            (f"{err.hint} " if err.hint else "")
            + f"The run's status, logs and error stay readable: get_run(run_id={run_id!r}).",
        )
    return err


def failed_alone(variants: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A passed run's variants that failed alone (name -> verdict, stage, message), said in
    its message too: a reader of "passed" alone is not misled."""
    said = "; ".join(f"{n} {d.get('verdict')} at {d.get('stage')}" for n, d in variants.items())
    return {"variants_failed": variants, "message": f"variants failed alone: {said}"}


def add_failed_alone(run_dir: Path, variants: dict[str, dict[str, Any]]) -> None:
    """A finished run's record with more variants that failed alone (those not yet named);
    everything else it says stays as written."""
    status = read_status(run_dir)
    if status is None:
        return
    failed = {**status.get("variants_failed", {})}
    failed |= {n: d for n, d in variants.items() if n not in failed}
    status |= failed_alone(failed)
    write_atomic(run_dir / STATUS_FILE, json.dumps(status, indent=1, default=str))


class RunRecord:
    """The status of one run while it is made: ``stage`` as it goes, then its end (passed,
    failed, ...); once an end is written (or the server marked the run interrupted) nothing
    overwrites it."""

    def __init__(self, run_dir: Path, run_id: str) -> None:
        self.run_dir, self.run_id, self.current = run_dir, run_id, "created"
        self.ended = False
        self._lock = threading.Lock()
        # wall seconds per stage, in the status (where a slow run's time went)
        self.stage_seconds: dict[str, float] = {}
        self._since = time.monotonic()

    def _write(self, status: str, **fields: Any) -> None:
        with self._lock:
            if self.ended:
                return
            self.ended = status in FINAL
            now = time.monotonic()
            spent = self.stage_seconds.get(self.current, 0.0) + now - self._since
            self.stage_seconds[self.current], self._since = round(spent, 3), now
            seconds = dict(self.stage_seconds)
            write_status(self.run_dir, self.run_id, status, stage_seconds=seconds, **fields)

    def stage(self, name: str) -> None:
        self._write("running", stage=name)  # closes the previous stage's seconds
        self.current = name

    def passed(self, variants: dict[str, dict[str, Any]] | None = None) -> None:
        """The run passed; ``variants``: those that failed alone (name -> verdict, stage,
        message), recorded as such rather than hidden behind "passed"."""
        self._write("passed", stage=self.current, **(failed_alone(variants) if variants else {}))

    def interrupted(self, who: str) -> None:
        """Ended by the server's own end (``who``): never blamed on the run's source."""
        with contextlib.suppress(OSError):
            self._write(
                "interrupted",
                stage=self.current,
                message=RunInterruptedError(who).message,
                error=RunInterruptedError.__name__,
                ended_by=who,
            )

    def failed(self, err: BaseException) -> None:
        who = err.ended_by if isinstance(err, RunInterruptedError) else children.ending()
        if who is not None:  # its processes died of our kill, whatever the error says
            self.interrupted(who)
            return
        status, extra = "failed", {}
        if isinstance(err, CollectionTimeoutError):
            status = "timed_out"
        elif isinstance(err, (RunCancelledError, KeyboardInterrupt)) or not isinstance(
            err, Exception
        ):
            status, extra = "cancelled", {"ended_by": CANCELLED_BY}
        stage, where = self.current, getattr(err, "stage", None)
        if where:
            stage = f"{self.current}: {where}"
        message = getattr(err, "message", None) or f"{type(err).__name__}: {err}"
        with contextlib.suppress(OSError):
            self._write(
                status, stage=stage, message=str(message)[:4000], error=type(err).__name__, **extra
            )


_OPEN: set[RunRecord] = set()  # the runs this process is making now
_OPEN_LOCK = threading.Lock()


def interrupt_open_runs(who: str) -> list[str]:
    """Mark every run this process is making ``interrupted`` by ``who`` (the server's end,
    before it kills their processes); return their ids."""
    with _OPEN_LOCK:
        records = list(_OPEN)
    for record in records:
        record.interrupted(who)
    return [r.run_id for r in records]


def owner_gone(status: dict[str, Any]) -> bool:
    """Whether the process that wrote ``status`` has ended (on this host; a record written on
    another host is never judged): its pid is free, or now names another process."""
    pid = status.get("pid")
    if not isinstance(pid, int) or status.get("host", HOST) != HOST:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # another user's process: alive
    ticks = status.get("pid_started")
    return ticks is not None and children.start_ticks(pid) not in (None, ticks)


def mark_abandoned(root: Path) -> list[str]:
    """At a server's start: runs under ``root`` left ``running`` by a process that has ended
    (a server killed with SIGKILL, a crash, a reboot) become ``interrupted``; return their ids."""
    found = []
    with contextlib.suppress(OSError):
        for run_dir in sorted(root.iterdir()):
            status = read_status(run_dir)
            if status is None or status.get("status") in FINAL or not owner_gone(status):
                continue
            who = f"the end of its server (pid {status.get('pid')})"
            message = (
                f"The run was interrupted by {who}, which ended while the run was at stage "
                f"{status.get('stage')} (killed, crashed, or the machine restarted) without "
                f"recording an end; marked when the server pid {os.getpid()} started on this "
                "runs folder. Nothing points at the kernel source."
            )
            with contextlib.suppress(OSError):
                write_status(
                    run_dir,
                    str(status.get("run_id", run_dir.name)),
                    "interrupted",
                    message=message,
                    error=RunInterruptedError.__name__,
                    ended_by=who,
                    seconds=None,  # unknown: the record stopped with its server
                )
                found.append(run_dir.name)
    return found


@contextlib.contextmanager
def run_record(run_dir: Path, run_id: str) -> Iterator[RunRecord]:
    """Keep ``status.json`` up to date around the making of a run; every error leaving the
    block is recorded (failed, timed_out, cancelled or interrupted) and carries the run id."""
    record = RunRecord(run_dir, run_id)
    with _OPEN_LOCK:
        _OPEN.add(record)
    try:
        with storage_errors(run_dir):
            yield record
    except BaseException as err:
        record.failed(err)
        tag_run(err, run_id)
        raise
    finally:
        with _OPEN_LOCK:
            _OPEN.discard(record)
