"""A call timed end to end, the way the field times it: the per-call time (``CALL_METRIC``)
beside the GPU time of its kernels, and KernelBench's own numbers (``KERNELBENCH_METRIC``).

    per call      on CUDA: synchronise (the inputs are ready, nothing else runs), queue the
                  L2 flush on the caller's current stream, record the start event right
                  behind it, make the call, record the end event, synchronise, read the
                  events. As KernelBench's ``time_execution_with_cuda_event`` and Triton's
                  ``do_bench`` order them: the flush in front of the start event hides as much
                  of the call's launch work as the flush takes on the GPU; what it does not hide
                  (launch gaps, host time, idle GPU between kernels) counts. On the CPU:
                  ``time.perf_counter_ns`` around the call, its wall time.
    KernelBench   its timing definition (``timing.py``, the ``cuda_event`` method its eval
                  uses): ``kernelbench.WARMUP`` calls, each synchronised; then ``trials`` +
                  ``kernelbench.DISCARD`` timed calls on the same inputs, the first discarded, each after
                  a synchronise and a 256 MiB write (its L2 flush); its runtime is their mean.

Both are timed in the pre-flight (``call_loop.py``), outside every profiler: under ncu each
kernel is replayed and serialised, and under torch's profiler (the pre-flight's kernel count,
the timing loop's GPU records) every launch pays for its tracing, so neither call is timed
as the field times it. The timing loop's clock flushes the L2 with ``L2Flush`` too. Imported
next to the user's code; torch only where a call runs on CUDA.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import nsight_agent.kernelbench as kernelbench
from nsight_agent.engine.harness import integrity, runtime

L2_FALLBACK_BYTES = 256 * 1024 * 1024


class L2Flush:
    """Empties the L2 of the previous call's data: a read of twice its size leaves it holding
    clean lines, as ncu's flush does (writing the buffer would leave dirty lines that the
    timed call pays to write back). A no-op when not ``enabled`` or not on CUDA."""

    def __init__(self, device: str, enabled: bool) -> None:
        self.buffer: Any = None
        if enabled and device.startswith("cuda"):
            import torch

            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            l2 = int(getattr(props, "L2_cache_size", 0) or 0)
            self.buffer = torch.empty(2 * l2 or L2_FALLBACK_BYTES, dtype=torch.int8, device=device)
            self._amax = torch.amax  # taken before user code runs: a replacement changes nothing

    def __call__(self) -> None:
        if self.buffer is not None:
            self._amax(self.buffer)


class CallClock:
    """Times calls end to end (see the module docstring). Made before the user's code is
    imported: the event class it holds is the original, whatever a variant replaces."""

    def __init__(self, device: str, flush_l2: bool) -> None:
        self.device = device
        self.cuda = device.startswith("cuda")
        self.flush_l2 = flush_l2
        self._flush: L2Flush | None = None
        if self.cuda:
            import torch

            runtime.pin_synchronize()
            self._event: Any = torch.cuda.Event
            self._torch = torch

    def flush(self) -> None:
        if self._flush is None:  # made at the first timed call: no buffer where none is timed
            self._flush = L2Flush(self.device, self.flush_l2)
        self._flush()

    def per_call(self, entry: Callable[..., Any], inputs: Any) -> tuple[Any, float]:
        """One call timed end to end: its output and its time (ns)."""
        if not self.cuda:
            start = time.perf_counter_ns()
            out = runtime.call(entry, inputs)
            return out, float(time.perf_counter_ns() - start)
        integrity.reset_persisting_l2()
        runtime.synchronize(self.device)
        self.flush()
        return self._between_events(entry, inputs)

    def _between_events(self, entry: Callable[..., Any], inputs: Any) -> tuple[Any, float]:
        begin, end = self._event(enable_timing=True), self._event(enable_timing=True)
        begin.record()
        out = runtime.call(entry, inputs)
        end.record()
        runtime.synchronize(self.device)
        return out, float(begin.elapsed_time(end)) * 1e6

    def kernelbench_call(self, entry: Callable[..., Any], inputs: Any) -> float:
        """One of KernelBench's timed trials (CUDA): synchronise, its 256 MiB L2 flush, the
        call between events; ns."""
        torch = self._torch
        runtime.synchronize(self.device)
        dummy = torch.empty(kernelbench.FLUSH_SHAPE, dtype=torch.int64, device=self.device)
        dummy.fill_(42)
        del dummy
        out, ns = self._between_events(entry, inputs)
        del out
        return ns

    def kernelbench(
        self,
        entry: Callable[..., Any],
        inputs: Any,
        trials: int,
        after_call: Callable[[], None] = lambda: None,
    ) -> list[float]:
        """KernelBench's timed trials of one variant on ``inputs`` (CUDA only: its timing
        asserts a GPU); ns each."""

        def warm() -> None:
            runtime.call(entry, inputs)
            runtime.synchronize(self.device)
            after_call()

        def timed() -> float:
            ns = self.kernelbench_call(entry, inputs)
            after_call()
            return ns

        return kernelbench_trials(warm, timed, trials, self._torch.cuda.empty_cache)


def kernelbench_trials(
    warm: Callable[[], None],
    timed: Callable[[], float],
    trials: int,
    release: Callable[[], None] = lambda: None,
    warmup: int = kernelbench.WARMUP,
    discard: int = kernelbench.DISCARD,
) -> list[float]:
    """KernelBench's trial loop: ``warmup`` untimed calls, ``release`` (its empty_cache: the
    allocator's cached blocks go back), then ``trials`` + ``discard`` timed calls of which the
    first ``discard`` are dropped; the ``trials`` times kept."""
    for _ in range(warmup):
        warm()
    release()
    times = [timed() for _ in range(trials + discard)]
    return times[discard:]
