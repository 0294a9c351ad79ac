"""The timing loop's clock: GPU time from the GPU's own activity records, CUDA events beside it.

On CUDA, every run's calls are traced by torch.profiler (CUPTI underneath, concurrent-kernel
records, so tracing does not serialise streams). A call is a ``record_function`` range whose
runtime calls name, by correlation id, the GPU work it launched on any stream
(``harness/gpu_activity.py``). The call's time is the union of that work's [start, end)
intervals: work on two streams that overlaps counts once, gaps between kernels (launch
latency, host work) do not count, so a single kernel's time is its execution as CUPTI records
it, shorter than ncu's duration, which also holds the GPU's launch processing (on an H100
3616 ns where ncu reads 4976 ns, 172399 ns where it reads 173353.6 ns: results.agreement of
bench/results/perf/2026-12-06-h100-80gb-hbm3-b6e4923.json, from bench/fast_loop.py). Work
left on a side stream that the entry did not join is counted too: the device is synchronised
before the trace is read. A call one of whose kernel records CUPTI lost has no GPU time (it
would read short) and is left out of the samples.

CUDA events around each call stay as a cross-check (``events_ns``); on the CPU,
``time.perf_counter_ns`` around the call is the only clock. A profiler session with its events
read costs milliseconds (bench/probes/kineto_events.py prints its cost).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nsight_agent.engine.harness import gpu_activity, integrity, runtime
from nsight_agent.engine.harness.call_time import L2Flush
from nsight_agent.engine.harness.gpu_activity import CALL_PREFIX

SPIN_CAP_CYCLES = 10_000_000  # 5 ms at 2 GHz


@dataclass
class Call:
    """One timed call: its output, and its time by each clock (ns)."""

    output: Any
    events_ns: float  # CUDA events (cuda) or perf_counter (cpu)
    gpu_ns: float | None = None  # the union of the GPU activity it caused (cuda, traced)
    activities: int = 0  # GPU activities (kernels, copies, memsets) it caused
    streams: set[int] = field(default_factory=set)
    lost: int = 0  # its kernel launches whose GPU record CUPTI lost: no GPU time then

    @property
    def ns(self) -> float:
        return self.gpu_ns if self.gpu_ns is not None else self.events_ns


class Timer:
    """Times calls: traced GPU activity and CUDA events on "cuda" (L2 flushed, persisting L2
    reset before each call), perf_counter_ns on "cpu"."""

    def __init__(self, device: str, flush_l2: bool, trace: bool = True) -> None:
        self.device = device
        self.cuda = device.startswith("cuda")
        self.method = "perf_counter"
        self.flush: L2Flush | None = None
        self.name = socket.gethostname() if not self.cuda else ""
        self.trace = False
        self.pending: dict[int, Call] = {}  # the run's traced calls by their range's index
        self._next = 0
        self._profiler: Any = None
        if self.cuda:
            import torch

            self.flush = L2Flush(device, flush_l2) if flush_l2 else None
            # Taken before user code runs: a variant that replaces them changes nothing here
            # (the waits use the synchronize the harness pinned, the first pin in the process).
            runtime.pin_synchronize()
            self._event: Any = torch.cuda.Event
            self._sleep = getattr(torch.cuda, "_sleep", None)
            self.name = torch.cuda.get_device_name()
            self.trace = trace and self._tracing_works()
            self.method = "cupti" if self.trace else "cuda_events"
        # GPU cycles to spin before the start event (see measure); grown from the calls seen.
        self.spin_cycles = 0

    def _tracing_works(self) -> bool:
        try:
            probe = runtime.kineto_profiler()
            probe.__enter__()
            probe.__exit__(None, None, None)
            probe.kineto_results.events()
        except Exception:  # CUPTI taken by another profiler, or not loadable: events only
            return False
        return True

    def start_run(self) -> None:
        """Start tracing the calls of one config's timing loop (all its runs and variants)."""
        self.pending, self._next = {}, 0
        if self.trace:
            self._profiler = runtime.kineto_profiler()
            self._profiler.__enter__()

    def end_run(self) -> None:
        """Stop tracing; fill each call of the run with its GPU time."""
        if self._profiler is None:
            return
        runtime.synchronize(self.device)
        prof, self._profiler = self._profiler, None
        prof.__exit__(None, None, None)
        found = gpu_activity.attribute(prof.kineto_results.events())
        for index, call in self.pending.items():
            spans = found.calls.get(index, [])
            call.lost = found.lost.get(index, 0)
            call.activities = len(spans)
            call.streams = {a.stream for a in spans}
            if not call.lost:  # a call missing records has no GPU time, only its events'
                call.gpu_ns = float(runtime.union_ns([(a.start, a.end) for a in spans]))

    def flush_l2(self) -> None:
        """Empty the L2 of the previous call's data before the next call (``L2Flush``)."""
        if self.flush is not None:
            self.flush()

    def measure(self, entry: Callable[..., Any], inputs: Any) -> Call:
        """One call; everything it launched has finished when this returns.

        CUDA events time the GPU's work only if the work is queued before the GPU reaches
        the start event: otherwise the time Python takes to launch it is counted as idle GPU
        time. So a short spin kernel, longer than the launch took last time, goes in front of
        the start event (untimed). The traced time needs no such padding."""
        if not self.cuda:
            start = time.perf_counter_ns()
            out = runtime.call(entry, inputs)
            return Call(out, float(time.perf_counter_ns() - start))
        self.flush_l2()
        integrity.reset_persisting_l2()
        # The inputs' copies (and the flush) are done before the call: an entry on a stream
        # that does not wait for ours would read them half made, its check a race of ours.
        runtime.synchronize(self.device)
        if self.spin_cycles and self._sleep is not None:
            self._sleep(self.spin_cycles)
        begin: Any = self._event(enable_timing=True)
        end: Any = self._event(enable_timing=True)
        begin.record()
        launch = time.perf_counter_ns()
        index, self._next = self._next, self._next + 1  # a call that raises keeps its index
        if self._profiler is not None:
            from torch.autograd.profiler import record_function

            with record_function(f"{CALL_PREFIX}{index}"):
                out = runtime.call(entry, inputs)
        else:
            out = runtime.call(entry, inputs)
        launch = time.perf_counter_ns() - launch
        end.record()
        runtime.synchronize(self.device)
        # Twice the launch time at up to 2 GHz (a slower clock only spins longer), at most 5 ms.
        self.spin_cycles = min(max(self.spin_cycles, 2 * launch * 2), SPIN_CAP_CYCLES)
        call = Call(out, float(begin.elapsed_time(end)) * 1e6)
        if self._profiler is not None:
            self.pending[index] = call
        return call


def peak_dram_bytes_per_s() -> float | None:
    """This GPU's peak DRAM bandwidth from NVML (2 x max memory clock x bus width)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        import torch

        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(
            uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        )
        clock = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)
        bus = pynvml.nvmlDeviceGetMemoryBusWidth(handle)
        return 2.0 * float(clock) * 1e6 * float(bus) / 8 if clock and bus else None
    except Exception:  # no NVML: no floor check
        return None


# The CPU speed probe (judge/gate.py): a fixed torch workload on the intra-op thread pool, as the
# timed ops run, repeated for a span longer than a scheduler's time slice so that another
# process's load is sampled, not missed. On a 2-core CPU machine a call takes 93.4-104.0 us
# quiet and 8009-8129 us beside two busy processes (baseline.cpu_probe_us and the reasons of
# checks.unchanged_under_load in bench/results/gate-under-load/2026-12-06-cpu-a09b578.json,
# from bench/gate_under_load.py).
CPU_PROBE_SPAN_NS = 200_000_000
CPU_PROBE_ENV = "NSIGHT_AGENT_CPU_PROBE"  # "0": skip it (the tests' stand-in runs set it)


def cpu_probe_ns(span_ns: int = CPU_PROBE_SPAN_NS) -> float | None:
    """How fast this CPU runs now: the median time (ns) of one softmax over 256x1024 floats,
    called for ``span_ns`` after one untimed call; None when the probe is turned off.
    The untimed call keeps torch's first-call set-up out of it, and the median keeps one
    descheduled call on a loaded machine from standing for the machine's speed."""
    if not cpu_probe_on():
        return None
    import statistics

    probe_call_ns()
    calls: list[float] = []
    start = time.perf_counter_ns()
    while not calls or time.perf_counter_ns() - start < span_ns:
        calls.append(probe_call_ns())
    return float(statistics.median(calls))


def cpu_probe_on() -> bool:
    import os

    return os.environ.get(CPU_PROBE_ENV) != "0"


def probe_call_ns() -> float:
    """One call of the probe's workload (ns): the timing loop makes one after each run, so
    the machine's speed is also sampled while the variants are measured, not only around."""
    import torch

    x = torch.ones(256, 1024)
    start = time.perf_counter_ns()
    torch.softmax(x, dim=-1)
    return float(time.perf_counter_ns() - start)
