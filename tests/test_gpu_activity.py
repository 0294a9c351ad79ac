"""What a lost CUPTI record costs (``harness/gpu_activity.py``): the pre-flight does not count
that call, and the timing path leaves it out of the times, saying so. Driven through the real
functions with kineto's event shape (as read on the H200: tests/test_worker_timer.py) in place
of a GPU's."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from nsight_agent.engine import process
from nsight_agent.engine.harness import runtime
from nsight_agent.engine.harness.gpu_activity import CALL_PREFIX
from nsight_agent.engine.worker import timing
from nsight_agent.engine.worker.timer import Call
from tests.test_worker_timer import Event


def _fake_profiler(monkeypatch: pytest.MonkeyPatch, events: list[Event]) -> None:
    """The kineto profiler yielding ``events`` as its kineto events; no CUDA needed."""

    @contextlib.contextmanager
    def profile(cpu: bool = True, shapes: bool = False) -> Iterator[Any]:
        yield SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: events))

    monkeypatch.setattr(runtime, "kineto_profiler", profile)
    monkeypatch.setattr(runtime, "synchronize", lambda device: None)
    monkeypatch.setattr(runtime, "LOST_CALLS", [])


def test_the_preflight_counts_kernels_and_copies_of_a_call(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_profiler(
        monkeypatch,
        [
            Event(f"{CALL_PREFIX}0", "CPU", 0, 10_000),
            Event("cudaLaunchKernel", "CPU", 100, 10, corr=5),
            Event("cudaMemcpyAsync", "CPU", 200, 10, corr=6),
            Event("gemm", "CUDA", 1_000, 500, corr=5),
            Event("Memcpy DtoD (Device -> Device)", "CUDA", 1_600, 300, corr=6),
            Event(f"{CALL_PREFIX}0", "CUDA", 1_000, 900, corr=1),  # kineto's copy of the range
        ],
    )
    out, kernels, copies_ns = runtime.call_counting_kernels(lambda x: x + 1, (1,), "cuda")
    assert (out, kernels, copies_ns) == (2, ["gemm"], 300.0)
    assert runtime.LOST_CALLS == []


def test_a_call_whose_kernel_record_was_lost_is_not_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Read as 0 kernels, an honest baseline would be "suspect: the number of kernels changes
    # between runs ([0, 1])" (seen on the H200) and the whole comparison would fail.
    _fake_profiler(
        monkeypatch,
        [
            Event(f"{CALL_PREFIX}0", "CPU", 0, 10_000),
            Event("cudaLaunchKernel", "CPU", 100, 10, corr=5),
        ],
    )
    out, kernels, copies_ns = runtime.call_counting_kernels(lambda x: x * 3, (2,), "cuda")
    assert (out, kernels, copies_ns) == (6, None, None)
    assert runtime.LOST_CALLS == [1]


def test_a_call_that_launched_nothing_still_counts_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_profiler(monkeypatch, [Event(f"{CALL_PREFIX}0", "CPU", 0, 10_000)])
    assert runtime.call_counting_kernels(lambda: 7, (), "cuda") == (7, [], 0.0)


def _result() -> timing.TimingResult:
    return timing.TimingResult(rows=[], checks=[], order=[], method="cupti", device="x", params=[])


def test_timing_leaves_a_lost_call_out_and_says_so() -> None:
    timed = {
        "base": [Call(None, 11.0, 10.0), Call(None, 12.0, lost=1), Call(None, 11.0, 10.5)],
        "fast": [Call(None, 6.0, 5.0), Call(None, 6.0, 5.2)],
    }
    result = _result()
    samples = timing._samples(timed, runtime.Dropped("base"), result)
    assert samples == {"base": [10.0, 10.5], "fast": [5.0, 5.2]}
    assert len(result.notes) == 1 and "1 kernel launch(es) in 1 call(s)" in result.notes[0]
    assert "left out of the times" in result.notes[0] and "CUDA events" not in result.notes[0]


def test_a_variant_with_every_call_lost_is_timed_by_events() -> None:
    timed = {
        "base": [Call(None, 11.0, 10.0)],
        "odd": [Call(None, 7.0, lost=2), Call(None, 8.0, lost=1)],
    }
    result = _result()
    samples = timing._samples(timed, runtime.Dropped("base"), result)
    assert samples == {"base": [10.0], "odd": [7.0, 8.0]}
    assert "odd had none left and were timed by CUDA events" in result.notes[0]
    assert "3 kernel launch(es) in 2 call(s)" in result.notes[0]


def test_nothing_lost_means_no_note() -> None:
    result = _result()
    timing._samples({"base": [Call(None, 11.0, 10.0)]}, runtime.Dropped("base"), result)
    assert result.notes == []


def test_a_lost_call_is_not_a_call_that_launched_no_work() -> None:
    timer = SimpleNamespace(trace=True)
    assert timing._call_problem(Call(1.0, 5.0, activities=0, lost=1), timer, 3) is None  # type: ignore[arg-type]
    got = timing._call_problem(Call(1.0, 5.0, activities=0), timer, 3)  # type: ignore[arg-type]
    assert got == "run 3: its call launched no GPU work (a result kept from an earlier call?)"


PROBE = """
import sys, warnings
warnings.simplefilter("ignore")  # CUDA is not available: CPU events only
import torch
from torch.autograd.profiler import record_function
from nsight_agent.engine.harness import runtime
from nsight_agent.engine.harness.gpu_activity import CALL_PREFIX
with runtime.kineto_profiler() as prof:
    with record_function(CALL_PREFIX + "0"):
        torch.ones(4).add_(1)
names = [e.name() for e in prof.kineto_results.events()]
print(any(n.startswith(CALL_PREFIX) for n in names), "torch._dynamo" in sys.modules)
import torch.profiler
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
    pass
print("torch._dynamo" in sys.modules)
"""


def test_the_kineto_profiler_records_calls_without_importing_dynamo() -> None:
    # torch.profiler.profile's start imports torch._dynamo (hasattr(torch, "_inductor")): 5.8 s
    # of a pre-flight on the H200. Ours records the same call range and imports none of it;
    # the last line shows torch.profiler's class still does, in the same fresh interpreter.
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
        env=process.child_env(), check=True,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith(("True", "False"))]
    assert lines == ["True False", "True"], done.stdout + done.stderr
