"""The GPU work of each call, read from torch.profiler's kineto events (CUPTI underneath).

A call is a CPU range named ``CALL_PREFIX<i>``; each runtime or driver call made inside it
(``cudaLaunchKernel``, ``cuLaunchKernel``, ``cudaMemcpyAsync``, ...) is matched by its
correlation id to the GPU records it caused, on whatever stream: kernels, copies, memsets.
Records that no runtime call inside a range owns (kineto's GPU-side copies of the ranges, work
launched between calls) are nobody's.

CUPTI can lose records: with CUDA 12.6u2-13.0 a kernel's record may arrive with a broken
timestamp and be dropped by kineto as out of the session (pytorch/pytorch#192021, fixed in
CUPTI 13.1; torch 2.11+cu130 carries CUPTI 13.0, though bench/probes/cupti_lost.py's sessions
on the H200 lost none). A lost record is not a kernel that did not run: the launch call
is still there. So a kernel launch with no GPU record is counted as lost, and a call with a
lost launch has no trustworthy count or GPU time.

Imported by the harness (next to the user's code) and by the timing worker: standard library
only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

CALL_PREFIX = "nsight_agent::call::"
# CPU-side CUDA calls that put work on the GPU: their correlation ids name that work.
LAUNCHES = ("cuda", "cu")
# Of those, the ones that launch kernels: each must have at least one GPU record.
KERNEL_LAUNCHES = ("LaunchKernel", "LaunchCooperativeKernel")


@dataclass(frozen=True)
class Activity:
    """One GPU record of a call: its interval (ns), stream and name; for a kernel, its launch
    configuration when kineto gave it (``launch_config``)."""

    start: int
    end: int
    stream: int
    name: str
    config: tuple[int, ...] | None = None
    op: str | None = None  # the outermost torch operator it ran in, with input sizes

    @property
    def is_copy(self) -> bool:
        return is_copy(self.name)


@dataclass
class CallActivity:
    """Per call index, its GPU records and its kernel launches whose records CUPTI lost."""

    calls: dict[int, list[Activity]] = field(default_factory=dict)
    lost: dict[int, int] = field(default_factory=dict)


def is_copy(name: str) -> bool:
    return name.startswith(("Memcpy", "Memset", "[memory]"))


# kineto writes a kernel record's launch into its metadata, a JSON fragment:
# ... "shared memory": 0, ... "grid": [128, 1, 1], "block": [256, 1, 1], ...
_DIMS = {
    key: re.compile(rf'"{key}"\s*:\s*\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]')
    for key in ("grid", "block")
}
_SHARED = re.compile(r'"shared memory"\s*:\s*(\d+)')


def launch_config(metadata: str) -> tuple[int, ...] | None:
    """(grid x, y, z, block x, y, z, dynamic shared memory bytes) of a kernel record's
    metadata, or None when it holds no grid and block (a copy, an older kineto)."""
    grid, block = (_DIMS[k].search(metadata) for k in ("grid", "block"))
    if grid is None or block is None:
        return None
    shared = _SHARED.search(metadata)
    dims = [int(v) for m in (grid, block) for v in m.groups()]
    return (*dims, int(shared.group(1)) if shared else 0)


def configs_of_trace(trace: dict[str, Any]) -> dict[int, tuple[int, ...]]:
    """Per correlation id, each kernel's launch configuration from kineto's Chrome trace,
    where kineto writes a kernel's grid and block as arguments (read there on the H200 when
    the events' own metadata held none)."""
    found: dict[int, tuple[int, ...]] = {}
    for e in trace.get("traceEvents", []):
        args = e.get("args") or {}
        grid, block = args.get("grid"), args.get("block")
        if e.get("cat") != "kernel" or "correlation" not in args or not grid or not block:
            continue
        shared = int(args.get("shared memory", 0) or 0)
        found[int(args["correlation"])] = (*map(int, grid), *map(int, block), shared)
    return found


def _config(event: Any) -> tuple[int, ...] | None:
    metadata = getattr(event, "metadata_json", None)
    try:
        text = metadata() if callable(metadata) else None
    except Exception:  # a build of torch without it: the launch is simply not known
        return None
    return launch_config(text) if isinstance(text, str) else None


_TORCH_OP = re.compile(r"^(aten::|autograd::|\w+Backward\d*\b)")


def _op_label(event: Any) -> str:
    """A torch operator as torch's NVTX ranges name it (``emit_nvtx(record_shapes=True)``:
    "aten::add, seq = 1, op_id = 2, sizes = [[4], [4]]", read by diagnose/places.clean_op)."""
    shapes = getattr(event, "shapes", None)
    try:
        sizes = shapes() if callable(shapes) else None
    except Exception:  # shapes not recorded
        sizes = None
    return f"{event.name()}, sizes = {sizes}" if sizes else str(event.name())


def outer_ops(events: Sequence[Any]) -> dict[int, str]:
    """Per launch's correlation id, the outermost torch operator open on its thread when it
    launched (what the step view groups a kernel by)."""
    by_thread: dict[int, list[tuple[int, int, int, Any]]] = {}  # (time, kind, -end, event)
    for e in events:
        if not _on_cpu(e):
            continue
        thread = int(getattr(e, "start_thread_id", lambda: 0)())
        start = e.start_ns()
        if _TORCH_OP.match(e.name()):
            by_thread.setdefault(thread, []).append((start, 0, -(start + e.duration_ns()), e))
        elif e.name().startswith(LAUNCHES):
            by_thread.setdefault(thread, []).append((start, 1, 0, e))
    found: dict[int, str] = {}
    for items in by_thread.values():
        items.sort(key=lambda x: (x[0], x[1], x[2]))
        open_ops: list[tuple[int, Any]] = []  # (end, event), outermost first
        for start, kind, neg_end, e in items:
            while open_ops and open_ops[-1][0] < start:
                open_ops.pop()
            if kind == 0:
                open_ops.append((-neg_end, e))
            elif open_ops:
                found[e.correlation_id()] = _op_label(open_ops[0][1])
    return found


def _on_cpu(event: Any) -> bool:
    return str(event.device_type()).endswith("CPU")


def _on_gpu(event: Any) -> bool:
    return str(event.device_type()).endswith("CUDA")


def attribute(
    events: Sequence[Any],
    configs: bool = False,
    known: Callable[[], dict[int, tuple[int, ...]]] | None = None,
) -> CallActivity:
    """Each call's GPU records and lost kernel launches (see the module docstring);
    ``configs``: each kernel's launch configuration and torch operator read too (not needed
    to time a call), from its metadata or else from ``known()`` (``configs_of_trace`` by
    correlation id), asked once, at the first kernel whose metadata holds none."""
    windows = []
    for e in events:
        name = e.name()
        if name.startswith(CALL_PREFIX) and _on_cpu(e):
            windows.append(
                (e.start_ns(), e.start_ns() + e.duration_ns(), int(name.rsplit(":", 1)[1]))
            )
    windows.sort()
    owner: dict[int, int] = {}
    kernel_launches: dict[int, int] = {}  # correlation id -> call, of kernel launches only
    for e in events:
        if not _on_cpu(e) or not e.name().startswith(LAUNCHES):
            continue
        t = e.start_ns()
        for lo, hi, call in windows:
            if lo <= t <= hi:
                owner[e.correlation_id()] = call
                if any(k in e.name() for k in KERNEL_LAUNCHES):
                    kernel_launches[e.correlation_id()] = call
                break
    ops = outer_ops(events) if configs else {}
    traced: dict[int, tuple[int, ...]] | None = None

    def config_of(e: Any) -> tuple[int, ...] | None:
        nonlocal traced
        found = _config(e)
        if found is None and known is not None and not is_copy(e.name()):
            traced = known() if traced is None else traced
            found = traced.get(e.correlation_id())
        return found

    out = CallActivity()
    recorded: set[int] = set()
    for e in events:
        if not _on_gpu(e) or e.name().startswith(CALL_PREFIX):
            continue
        found = owner.get(e.correlation_id())
        if found is not None:
            recorded.add(e.correlation_id())
            start = e.start_ns()
            activity = Activity(
                start,
                start + e.duration_ns(),
                e.device_resource_id(),
                e.name(),
                config_of(e) if configs else None,
                ops.get(e.correlation_id()),
            )
            out.calls.setdefault(found, []).append(activity)
    for corr, call in kernel_launches.items():
        if corr not in recorded:
            out.lost[call] = out.lost.get(call, 0) + 1
    return out


def lost_note(launches: int, calls: int, what: str) -> str:
    """What the answer says when CUPTI lost records (``what``: what was done about it)."""
    return (
        f"CUPTI delivered no GPU record for {launches} kernel launch(es) in {calls} call(s) "
        "(a known CUPTI fault of CUDA 12.6u2-13.0, fixed in 13.1: pytorch/pytorch#192021); "
        f"{what}"
    )
