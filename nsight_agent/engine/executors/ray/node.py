"""The node side of the Ray executor, shared by its GPU hosts (``gpu_host``): how a job runs
into a scratch runs root and its run folder travels back, the board through which a job says
where it runs and how far it is, and what each node offers (GPUs, the ncu resource; why a
node gets no jobs).

A job profiles into a scratch runs root (``$TMPDIR/nsight-agent-ray/<pid>-*``), then returns
the whole run folder as tar bytes with the result (or the error, as data); the server unpacks
it into its own runs root, so ``load_run`` reads it like any local run. Nothing here imports
Ray: the executor wraps ``Board``, ``node_facts`` and ``salvage`` with ``ray.remote``.

Belonging on the node: every process the pipeline starts dies with its host (``process``:
parent-death signal), so a killed host takes ncu with it; what ncu started carries the run's
marker and is reaped by the next job on the node (``children.reap_orphans``), which also
removes scratch folders of dead hosts.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import pickle
import shutil
import socket
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nsight_agent.engine import children
from nsight_agent.engine.executors.base import JobResult
from nsight_agent.engine.executors.ray.scratch import pack, scratch_base, sweep_scratch
from nsight_agent.engine.pipeline import Progress
from nsight_agent.engine.store.runs import PreflightResult, check_run_id
from nsight_agent.errors import InvalidRequestError, RunIdCollisionError

_STANDARD = {"CPU", "GPU", "memory", "object_store_memory"}


class Board:
    """Where each job's host reports its start (node, GPU, pid; again on a retry) and its
    progress; the server polls it. A Ray actor (``num_cpus=0``) on the server's node."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}

    def started(self, key: str, info: dict[str, Any]) -> None:
        self.jobs.setdefault(key, {"progress": []})["info"] = info

    def progress(self, key: str, done: int, total: int, message: str) -> None:
        self.jobs.setdefault(key, {"progress": []})["progress"] = [done, total, message]

    def state(self, key: str) -> dict[str, Any] | None:
        return self.jobs.get(key)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return dict(self.jobs)

    def forget(self, key: str) -> None:
        self.jobs.pop(key, None)


def where_here() -> dict[str, Any]:
    """This process on its node: host name, GPU (Ray's ``CUDA_VISIBLE_DEVICES``), pid, node id."""
    return {
        "node": socket.gethostname(),
        "gpu": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "pid": os.getpid(),
        "node_id": _node_id(),
    }


# Runs a job into a scratch runs root, reporting progress: (root, progress) -> result.
Runner = Callable[[Path, Progress], JobResult]


def run_in_scratch(key: str, board: Any, runner: Runner) -> dict[str, Any]:
    """Run one job on this node into a new scratch runs root: the answer is plain data, the
    run folder as tar bytes included, whether the job passed or raised."""
    children.reap_orphans()
    sweep_scratch()
    base = scratch_base()
    base.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=base))
    # scratch and node id: for salvage() when the host is killed mid-job
    info = {**where_here(), "started": time.time(), "scratch": str(scratch)}
    _tell(board, "started", key, info)

    def progress(done: int, total: int, message: str) -> None:
        _tell(board, "progress", key, done, total, message)

    out: dict[str, Any] = {**info, "ok": True}
    try:
        try:
            result = runner(scratch, progress)
        except Exception as err:  # shipped back as data, rebuilt by the server
            out.update(ok=False, error=error_payload(err), run_id=getattr(err, "run_id", None))
        else:
            out["run_id"] = result.run_id
            if isinstance(result, PreflightResult):
                out["preflight"] = result.model_dump_json()
        out["ended"] = time.time()
        out["tar"] = pack(scratch)
        return out
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _node_id() -> str | None:
    with contextlib.suppress(Exception):  # outside Ray (tests run jobs directly)
        ray = importlib.import_module("ray")
        return str(ray.get_runtime_context().get_node_id())
    return None


def _tell(board: Any, method: str, *args: Any) -> None:
    if board is None:
        return
    with contextlib.suppress(Exception):  # the board is a convenience: never fail a job on it
        getattr(board, method).remote(*args)


# --- what a node offers (from ray.nodes()) --------------------------------------------------------


def why_not(node: dict[str, Any], resource: str) -> str | None:
    """Why a node is given no jobs, or None when it is."""
    res = node.get("Resources") or {}
    if not node.get("Alive"):
        return "the node is dead"
    if float(res.get("GPU", 0)) < 1:
        return "no GPU"
    if float(res.get(resource, 0)) < 1:
        return (
            f"it does not advertise {resource!r} (no ncu, or no counter permission): start it "
            f"with --resources '{{\"{resource}\": N}}' once ncu runs there"
        )
    return None


def node_facts() -> dict[str, Any]:
    """What this node offers for profiling, read on the node (a Ray task pinned to it): its
    GPUs (name, SMs, max clocks), its ncu and whether counters look permitted. Compact, for
    ``device_info``'s pool; no kernel is run."""
    from nsight_agent.engine.device import device_info

    info = device_info(probe=False)
    return {
        "gpu_models": [
            {
                "name": g.name,
                "sms": g.sm_count,
                "sm_clock_max_mhz": g.sm_clock_max_mhz,
                "memory_clock_max_mhz": g.memory_clock_max_mhz,
            }
            for g in info.gpus
        ],
        "ncu_version": info.ncu_version,
        "counters": info.counters.permitted,
    }


def node_info(node: dict[str, Any], resource: str) -> dict[str, Any]:
    res = node.get("Resources") or {}
    why = why_not(node, resource)
    custom = {
        k: v
        for k, v in res.items()
        if k not in _STANDARD and not k.startswith(("node:", "accelerator_type:"))
    }
    return {
        "node": node.get("NodeManagerHostname"),
        "address": node.get("NodeManagerAddress"),
        "alive": bool(node.get("Alive")),
        "gpus": float(res.get("GPU", 0)),
        "ncu_slots": float(res.get(resource, 0)),
        "resources": custom,
        "accepts_jobs": why is None,
        "why_not": why,
    }


# --- the run folder on the wire ---------------------------------------------------------------


def unpack(data: bytes, root: Path) -> list[str]:
    """Unpack run folders into the runs root; return their run ids. Only plain files and
    folders under a valid run id are accepted; an existing run id is never overwritten."""
    root.mkdir(parents=True, exist_ok=True)
    incoming = Path(tempfile.mkdtemp(prefix=".incoming-", dir=root))
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            members = tar.getmembers()
            for m in members:
                _check_member(m)
            if hasattr(tarfile, "data_filter"):
                tar.extractall(incoming, members=members, filter="data")
            else:  # pragma: no cover - Python without extraction filters
                tar.extractall(incoming, members=members)
        moved = []
        for d in sorted(incoming.iterdir()):
            target = root / d.name
            if target.exists():
                raise RunIdCollisionError(f"Run {d.name} already exists in {root}.")
            d.rename(target)
            moved.append(d.name)
        return moved
    finally:
        shutil.rmtree(incoming, ignore_errors=True)


def _check_member(m: tarfile.TarInfo) -> None:
    parts = Path(m.name).parts
    bad = not (m.isfile() or m.isdir()) or Path(m.name).is_absolute() or ".." in parts
    if bad or not parts:
        raise InvalidRequestError(f"A node sent back an unsafe entry: {m.name!r}")
    check_run_id(parts[0])


# --- errors as data ---------------------------------------------------------------------------


def error_payload(err: BaseException) -> dict[str, Any]:
    """An exception as data: its class by name, ``args`` and attributes (those that pickle),
    rebuilt by ``rebuild_error`` without calling its ``__init__``."""
    state: dict[str, bytes] = {}
    for name, value in vars(err).items():
        with contextlib.suppress(Exception):
            state[name] = pickle.dumps(value)
    return {
        "module": type(err).__module__,
        "qualname": type(err).__qualname__,
        "args": [str(a) for a in err.args],
        "state": state,
        "text": str(err),
        "type": type(err).__name__,
    }


def rebuild_error(payload: dict[str, Any], scratch: str, root: Path) -> BaseException | None:
    """The node's exception as its own class (nsight_agent's and builtins only), with the
    node's scratch root replaced by the server's runs root in its text; None if it cannot."""
    module = str(payload.get("module", ""))
    if not (module == "builtins" or module.startswith("nsight_agent.")):
        return None
    try:
        cls = importlib.import_module(module)
        for part in str(payload.get("qualname", "")).split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError):
        return None
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        return None
    err = cls.__new__(cls)
    err.args = tuple(_here(a, scratch, root) for a in payload.get("args", []))
    for name, blob in dict(payload.get("state", {})).items():
        with contextlib.suppress(Exception):
            value = pickle.loads(blob)
            setattr(err, name, _here(value, scratch, root) if isinstance(value, str) else value)
    return err


def _here(text: str, scratch: str, root: Path) -> str:
    return text.replace(scratch, str(root)) if scratch else text
