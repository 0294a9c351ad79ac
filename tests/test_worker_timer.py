"""The timing path's clock: GPU activity attributed to calls through correlation ids, as the
kineto events recorded on the H200 carry them (bench/probes/kineto_events.py, GPU_RUNS.md)."""

from __future__ import annotations

from dataclasses import dataclass

from nsight_agent.engine.harness.runtime import union_ns
from nsight_agent.engine.worker.timer import CALL_PREFIX, attribute


@dataclass
class Event:
    """The parts of torch's ``_KinetoEvent`` the timer reads."""

    n: str
    dev: str
    start: int
    dur: int
    corr: int = 0
    stream: int = 7

    def name(self) -> str:
        return self.n

    def device_type(self) -> str:
        return f"DeviceType.{self.dev}"

    def start_ns(self) -> int:
        return self.start

    def duration_ns(self) -> int:
        return self.dur

    def correlation_id(self) -> int:
        return self.corr

    def device_resource_id(self) -> int:
        return self.stream


def test_union_counts_overlap_once_and_gaps_not_at_all() -> None:
    assert union_ns([]) == 0
    assert union_ns([(0, 10), (20, 25)]) == 15  # a gap between kernels is not GPU time
    assert union_ns([(0, 10), (5, 15)]) == 15  # two streams overlapping count once
    assert union_ns([(5, 15), (0, 30), (40, 41)]) == 31


def test_activity_is_attributed_to_the_call_that_launched_it_on_any_stream() -> None:
    # The shape read on the H200: a CPU range per call, runtime calls inside it, GPU records
    # with the runtime call's correlation id (a side stream has another resource id), and
    # kineto's own GPU-side copies of the range (named like it), which are not activity.
    events = [
        Event(f"{CALL_PREFIX}0", "CPU", 1_000, 500),
        Event("cudaLaunchKernel", "CPU", 1_100, 10, corr=8),
        Event("cudaLaunchKernel", "CPU", 1_200, 10, corr=19),
        Event("cudaMemcpyAsync", "CPU", 1_300, 10, corr=33),
        Event("elementwise", "CUDA", 5_000, 300, corr=8),
        Event("elementwise", "CUDA", 5_100, 300, corr=19, stream=13),  # unjoined side stream
        Event("Memcpy DtoD (Device -> Device)", "CUDA", 5_600, 100, corr=33),
        Event(f"{CALL_PREFIX}0", "CUDA", 5_000, 700, corr=1),
        Event(f"{CALL_PREFIX}1", "CPU", 2_000, 300),
        Event("cudaLaunchKernel", "CPU", 2_100, 10, corr=61),
        Event("elementwise", "CUDA", 6_000, 250, corr=61),
        # Launched outside any call (the L2 flush before it): nobody's.
        Event("cudaLaunchKernel", "CPU", 1_900, 10, corr=70),
        Event("flush", "CUDA", 5_900, 50, corr=70),
    ]
    found = attribute(events)
    assert sorted(found) == [0, 1]
    assert {s for _, _, s in found[0]} == {7, 13}
    assert union_ns([(a, b) for a, b, _ in found[0]]) == 400 + 100  # 5000-5400, 5600-5700
    assert found[1] == [(6_000, 6_250, 7)]
