"""A run's record while it is made: ``status.json`` (written atomically) goes from running
through its stages to passed, failed (with the stage and the message), timed_out or
cancelled; errors leaving a run carry its id; OSErrors of the run store become specific
errors with what to do.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nsight_agent.errors import (
    CollectionTimeoutError,
    NsightAgentError,
    RunCancelledError,
    RunsFolderNotWritableError,
    RunsRootNotAFolderError,
    RunStorageError,
    StorageFullError,
)

STATUS_FILE = "status.json"
FINAL = ("passed", "failed", "timed_out", "cancelled")


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
        "started": old.get("started", now),
        "updated": now,
        **fields,
    }
    if status in FINAL:
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
        err.message = f"{err.message} (run {run_id})"
        err.hint = (
            f"{err.hint} " if err.hint else ""
        ) + f"The run's status, logs and error stay readable: get_run(run_id={run_id!r})."
        err.args = (f"{err.message}\nHint: {err.hint}",)
    return err


class RunRecord:
    """The status of one run while it is made: ``stage`` as it goes, the end in ``close``."""

    def __init__(self, run_dir: Path, run_id: str) -> None:
        self.run_dir, self.run_id, self.current = run_dir, run_id, "created"

    def stage(self, name: str) -> None:
        self.current = name
        write_status(self.run_dir, self.run_id, "running", stage=name)

    def passed(self) -> None:
        write_status(self.run_dir, self.run_id, "passed", stage=self.current)

    def failed(self, err: BaseException) -> None:
        status = "failed"
        if isinstance(err, CollectionTimeoutError):
            status = "timed_out"
        elif isinstance(err, (RunCancelledError, KeyboardInterrupt)) or not isinstance(
            err, Exception
        ):
            status = "cancelled"
        stage, where = self.current, getattr(err, "stage", None)
        if where:
            stage = f"{self.current}: {where}"
        message = getattr(err, "message", None) or f"{type(err).__name__}: {err}"
        with contextlib.suppress(OSError):
            write_status(
                self.run_dir,
                self.run_id,
                status,
                stage=stage,
                message=str(message)[:4000],
                error=type(err).__name__,
            )


@contextlib.contextmanager
def run_record(run_dir: Path, run_id: str) -> Iterator[RunRecord]:
    """Keep ``status.json`` up to date around the making of a run; every error leaving the
    block is recorded (failed, timed_out or cancelled) and carries the run id."""
    record = RunRecord(run_dir, run_id)
    try:
        with storage_errors(run_dir):
            yield record
    except BaseException as err:
        record.failed(err)
        tag_run(err, run_id)
        raise
