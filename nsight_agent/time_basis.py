"""The two times a call has, as plain names: what a verdict may compare (``TimeBasis``), the
metric each is stored under, and each tool's default.

- ``"gpu"``: the GPU time of the call's work: under ncu the sum of its kernels' durations
  (plus its copies, from the pre-flight); on the timing path the union of the GPU activity
  it caused (CUPTI). Launch gaps and host time do not count. What a kernel author changes.
- ``"call"``: the call timed end to end the way the field times it (KernelBench's timing
  function, Triton's ``do_bench``): CUDA events on the caller's stream around the call,
  right after an L2 flush queued in front of the start event, synchronised after the end
  event. Launch gaps and the host time the flush does not hide count. What a model's step
  costs: four short launches can cost more than one longer fused one.

On a CPU both are the wall time of the call (``time.perf_counter_ns``).

Defaults: ``"call"`` where KernelBench's rule is asked for (``correctness="kernelbench"``: its
judge times the call), else ``"gpu"`` (kernel work: a fused kernel is judged by its kernels).
"""

from __future__ import annotations

from typing import Literal

TimeBasis = Literal["gpu", "call"]
BASES: tuple[TimeBasis, ...] = ("gpu", "call")

# The per-call time, beside the time metric (options.TIME_METRIC) in a run's rows: ns.
CALL_METRIC = "call__time_duration.events"
# KernelBench's own numbers of a call (its timing definition, its trial counts): ns.
KERNELBENCH_METRIC = "call__time_duration.kernelbench"


def default_basis(correctness: str) -> TimeBasis:
    """The basis a comparison reads when none is asked for (see the module docstring)."""
    return "call" if correctness == "kernelbench" else "gpu"


def other(basis: TimeBasis) -> TimeBasis:
    return "call" if basis == "gpu" else "gpu"
