"""The GPU work of each call, read from torch.profiler's kineto events (CUPTI underneath).

A call is a CPU range named ``CALL_PREFIX<i>``; each runtime or driver call made inside it
(``cudaLaunchKernel``, ``cuLaunchKernel``, ``cudaMemcpyAsync``, ...) is matched by its
correlation id to the GPU records it caused, on whatever stream: kernels, copies, memsets.
Records that no runtime call inside a range owns (kineto's GPU-side copies of the ranges, work
launched between calls) are nobody's.

CUPTI can lose records: with CUDA 12.6u2-13.0 a kernel's record may arrive with a broken
timestamp and be dropped by kineto as out of the session (pytorch/pytorch#192021, fixed in
CUPTI 13.1; torch 2.11+cu130 carries CUPTI 13.0, though 400 sessions on the H200 lost none:
bench/probes/cupti_lost.py). A lost record is not a kernel that did not run: the launch call
is still there. So a kernel launch with no GPU record is counted as lost, and a call with a
lost launch has no trustworthy count or GPU time.

Imported by the harness (next to the user's code) and by the timing worker: standard library
only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

CALL_PREFIX = "nsight_agent::call::"
# CPU-side CUDA calls that put work on the GPU: their correlation ids name that work.
LAUNCHES = ("cuda", "cu")
# Of those, the ones that launch kernels: each must have at least one GPU record.
KERNEL_LAUNCHES = ("LaunchKernel", "LaunchCooperativeKernel")


@dataclass(frozen=True)
class Activity:
    """One GPU record of a call: its interval (ns), stream and name."""

    start: int
    end: int
    stream: int
    name: str

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


def _on_cpu(event: Any) -> bool:
    return str(event.device_type()).endswith("CPU")


def _on_gpu(event: Any) -> bool:
    return str(event.device_type()).endswith("CUDA")


def attribute(events: Sequence[Any]) -> CallActivity:
    """Each call's GPU records and lost kernel launches (see the module docstring)."""
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
    out = CallActivity()
    recorded: set[int] = set()
    for e in events:
        if not _on_gpu(e) or e.name().startswith(CALL_PREFIX):
            continue
        found = owner.get(e.correlation_id())
        if found is not None:
            recorded.add(e.correlation_id())
            start = e.start_ns()
            activity = Activity(start, start + e.duration_ns(), e.device_resource_id(), e.name())
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
