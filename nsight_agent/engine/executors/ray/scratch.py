"""A Ray node's scratch runs roots: where its GPU hosts' jobs write, how a run folder is packed
to travel back, and the salvage of a killed host's folder. A host's root is
``$TMPDIR/nsight-agent-ray/<host pid>-*``.

Kept apart from ``node`` for the salvage: it runs as a Ray task in a new worker process on a
node whose host did not stop a cancelled job in time (a busy node, often), so it imports
nothing heavy. Through ``node`` it imported the whole engine (pandas among it), and on a
loaded two-core machine the task took more than the 60 s the cancel waits for it.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

from nsight_agent.engine import children
from nsight_agent.engine.store.run_status import CANCELLED_BY, FINAL, read_status, write_status

SCRATCH = "nsight-agent-ray"


def scratch_base() -> Path:
    return Path(tempfile.gettempdir()) / SCRATCH


def sweep_scratch() -> None:
    """Remove scratch roots whose host is gone (killed, or crashed)."""
    base = scratch_base()
    if not base.is_dir():
        return
    for d in base.iterdir():
        pid = d.name.split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(d, ignore_errors=True)


def pack(root: Path) -> bytes:
    """Every run folder under ``root`` (not the CUDA build cache) as an uncompressed tar."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for d in sorted(root.iterdir()):
            if not d.name.startswith(".") and d.is_dir():
                tar.add(d, arcname=d.name)
    return buffer.getvalue()


def salvage(scratch: str, pid: int) -> bytes:
    """On the node of a host killed mid-job: once the host ``pid`` is gone, kill what it
    left (its marked children), mark its run folders cancelled and send them back as tar bytes
    (then remove the scratch root), so the server's store keeps the cancelled run as a local
    cancel would. Only a folder under this node's scratch base is read."""
    folder = Path(scratch).resolve()
    if folder.parent != scratch_base().resolve() or not folder.is_dir():
        return b""
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    children.kill_marked(children.owner_prefix(pid))
    for run_dir in (d for d in folder.iterdir() if d.is_dir() and not d.name.startswith(".")):
        status = read_status(run_dir) or {}
        if status.get("status") not in FINAL:
            write_status(
                run_dir,
                run_dir.name,
                "cancelled",
                message="cancelled: its GPU host was killed (it had not stopped the job in time)",
                ended_by=f"{CANCELLED_BY}; the server killed the GPU host",
            )
    data = pack(folder)
    shutil.rmtree(folder, ignore_errors=True)
    return data
