"""The timing path's clock: GPU activity attributed to calls through correlation ids, as the
kineto events recorded on the H200 carry them (bench/probes/kineto_events.py)."""

from __future__ import annotations

from dataclasses import dataclass

from nsight_agent.engine.harness.gpu_activity import CALL_PREFIX, Activity, attribute
from nsight_agent.engine.harness.runtime import union_ns


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
    assert sorted(found.calls) == [0, 1] and found.lost == {}
    assert {a.stream for a in found.calls[0]} == {7, 13}
    assert [a.is_copy for a in found.calls[0]] == [False, False, True]
    spans = [(a.start, a.end) for a in found.calls[0]]
    assert union_ns(spans) == 400 + 100  # 5000-5400, 5600-5700
    assert found.calls[1] == [Activity(6_000, 6_250, 7, "elementwise")]


def test_a_kernel_launch_whose_record_cupti_lost_is_counted_lost_not_as_no_kernel() -> None:
    # CUDA 12.6u2-13.0's CUPTI can drop a kernel's record (pytorch/pytorch#192021): the launch
    # is there, its GPU record is not. A copy's or a graph's launch is not a kernel launch;
    # a driver-API launch (Triton's cuLaunchKernel) is.
    events = [
        Event(f"{CALL_PREFIX}0", "CPU", 1_000, 500),
        Event("cudaLaunchKernel", "CPU", 1_100, 10, corr=8),  # its record lost
        Event("cudaMemcpyAsync", "CPU", 1_200, 10, corr=9),  # a copy with no record: not lost
        Event(f"{CALL_PREFIX}1", "CPU", 2_000, 300),
        Event("cuLaunchKernel", "CPU", 2_100, 10, corr=61),
        Event("cuLaunchKernelEx", "CPU", 2_150, 10, corr=62),  # lost
        Event("triton_add", "CUDA", 6_000, 250, corr=61),
        Event(f"{CALL_PREFIX}2", "CPU", 3_000, 300),
        Event("cudaLaunchKernel", "CPU", 3_100, 10, corr=70),
        Event("add", "CUDA", 7_000, 50, corr=70),
    ]
    found = attribute(events)
    assert found.lost == {0: 1, 1: 1}
    assert 0 not in found.calls and [a.name for a in found.calls[1]] == ["triton_add"]
    assert found.calls[2] == [Activity(7_000, 7_050, 7, "add")]
