"""What a build made ahead of the GPU queue leaves in its build folder for the harness.

The executor builds a job's sources before the job queues for a GPU
(``executors/build_ahead.py``); the harness's import then finds the library built (a cache
hit) and, through this record, says it was built ahead and how long it took, or raises the
build's compiler errors without compiling again. The record lives while the job that wrote
it runs: the executor removes it when the job ends, and a reader ignores (and removes) one
whose owner process is gone, so a later call of the same source reads "built before".
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from nsight_agent.engine import children

RECORD = "ahead.json"


def write(folder: Path, data: dict[str, Any]) -> None:
    """Record ``data`` (ok, seconds, error, ...) for ``folder``, owned by this process."""
    folder.mkdir(parents=True, exist_ok=True)
    owned = {**data, "owner": [os.getpid(), children.start_ticks(os.getpid())]}
    tmp = folder / f"{RECORD}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(owned))
    tmp.replace(folder / RECORD)  # a reader sees the whole record or none


def read(folder: Path | str) -> dict[str, Any] | None:
    """The live record of ``folder``: None when there is none, or its owner has ended."""
    path = Path(folder) / RECORD
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    pid, ticks = (data.get("owner") or [None, None])[:2]
    if not isinstance(pid, int) or children.start_ticks(pid) != ticks:
        clear(Path(folder))  # left by a server that ended before its job did
        return None
    return data if isinstance(data, dict) else None


def clear(folder: Path) -> None:
    with contextlib.suppress(OSError):
        (folder / RECORD).unlink()


def failure(record: dict[str, Any] | None) -> str | None:
    """The compiler's errors of a build that failed ahead (None: no record, or it built)."""
    if record is None or record.get("ok", True):
        return None
    return str(record.get("error") or "the build failed")


def built(record: dict[str, Any] | None) -> bool:
    return record is not None and bool(record.get("ok"))
