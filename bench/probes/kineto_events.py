"""Probe (H200): what torch.profiler's kineto events carry for one timed call, so the timing
path can read GPU-side times for every kernel a call launched, on any stream.

Prints, for a call that launches a kernel on the current stream, a kernel on an unjoined side
stream and a device-to-device copy: each kineto event's name, device type, start/duration in
ns, correlation ids and stream; then the profiler's cost per session. No assertion: it is a
reading, kept with the project so the fact can be re-read.
"""

from __future__ import annotations

import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function


def call(x: torch.Tensor, y: torch.Tensor, side: torch.cuda.Stream) -> torch.Tensor:
    out = x * 2.0
    with torch.cuda.stream(side):
        y.mul_(3.0)  # left on the side stream, not joined
    z = torch.empty_like(x)
    z.copy_(x)  # a device-to-device copy, not a kernel
    return out + z


def main() -> None:
    dev = "cuda"
    x = torch.randn(1 << 24, device=dev)
    y = torch.randn(1 << 24, device=dev)
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    for _ in range(3):
        call(x, y, side)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(2):
            with record_function(f"nsa::call::{i}"):
                call(x, y, side)
            torch.cuda.synchronize()
    res = prof.profiler.kineto_results  # type: ignore[union-attr]
    events = res.events()
    print("n events", len(events), "trace_start_ns", getattr(res, "trace_start_ns", lambda: None)())
    attrs = [a for a in dir(events[0]) if not a.startswith("_")]
    print("attrs", attrs)
    for e in events:
        row = {"name": e.name()[:50], "dev": str(e.device_type())}
        for a in (
            "start_ns",
            "duration_ns",
            "correlation_id",
            "linked_correlation_id",
            "device_index",
            "device_resource_id",
            "is_async",
            "stream",
        ):
            f = getattr(e, a, None)
            if callable(f):
                try:
                    row[a] = f()
                except Exception as err:
                    row[a] = f"err {err}"
        print(row)
    fe = [e for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]
    print(
        "FunctionEvent CUDA", [(e.name[:30], e.time_range.start, e.time_range.end) for e in fe][:10]
    )
    # cost of a profiler session
    t = time.perf_counter()
    for _ in range(10):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p2:
            with record_function("nsa::call::0"):
                call(x, y, side)
            torch.cuda.synchronize()
        p2.profiler.kineto_results.events()  # type: ignore[union-attr]
    print(f"profiler session + events: {(time.perf_counter() - t) / 10 * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
