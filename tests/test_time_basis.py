"""Per-call time beside GPU time, and KernelBench's numbers, on the CPU: the harness's clock
and KernelBench's trial loop, the rows a run keeps of both times, the verdict on either basis
with its basis named, the disagreement note (a synthetic run whose kernel sum and per-call
time point opposite ways), KernelBench's fields and trial counts. The front ends are
tests/test_time_basis_frontends.py, the GPU side tests/test_time_basis_gpu.py.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from nsight_agent.engine.collection import call_rows
from nsight_agent.engine.harness import call_time, render
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.engine.store.runs import OutputCheck, PreflightResult
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.errors import InvalidRequestError
from nsight_agent.request import TIME_METRIC, ProfileRequest
from nsight_agent.service import summaries
from nsight_agent.time_basis import CALL_METRIC, KERNELBENCH_METRIC
from nsight_agent.views.text import render_compare
from tests.test_kernelbench import preflight_checks, wrong_after

FIXTURES = Path(__file__).parent / "fixtures" / "kernelbench"
PROBLEM = (FIXTURES / "problem_linear_relu.py").read_text()
HONEST = (FIXTURES / "new_honest.py").read_text()
US = 1e3


@pytest.fixture(scope="module")
def cpu_pool() -> Iterator[WorkerPool]:
    with WorkerPool() as pool:
        yield pool


# --- the harness's clocks ---------------------------------------------------------------------


def test_kernelbench_s_loop_warms_up_then_discards_its_first_trial() -> None:
    """3 untimed calls, the allocator released, then trials + 1 timed, the first dropped."""
    said: list[str] = []
    ticks = itertools.count(1)

    def timed() -> float:
        said.append("timed")
        return float(next(ticks))

    times = call_time.kernelbench_trials(
        lambda: said.append("warm"), timed, 4, release=lambda: said.append("release")
    )
    assert said == ["warm"] * 3 + ["release"] + ["timed"] * 5
    assert times == [2.0, 3.0, 4.0, 5.0]


def test_on_the_cpu_a_call_s_time_is_its_wall_time() -> None:
    clock = call_time.CallClock("cpu", flush_l2=True)
    out, ns = clock.per_call(lambda x: x * 2, (21,))
    assert out == 42 and ns > 0


# --- what the harness is asked to time --------------------------------------------------------


def spec(**fields: Any) -> Any:
    request = ProfileRequest(source="x = 1\n", configs=[{}], **fields)
    return render.spec_for(request, Path("/nonexistent"))[0]


def test_the_pre_flight_times_calls_wherever_a_call_s_time_is_judged() -> None:
    assert spec(runs=5)["call_runs"] == render.MIN_CALL_RUNS
    assert spec(runs=40)["call_runs"] == 40
    assert spec(sections=["SpeedOfLight"])["call_runs"] == 0
    assert spec(metrics=["dram__bytes.sum"])["call_runs"] == 0
    assert spec(cache_control="none")["flush_l2"] is False


def test_kernelbench_s_trial_counts_reach_the_harness_only_under_its_rule() -> None:
    plain = spec(num_correct_trials=5)
    assert plain["trials"] == 0 and plain["perf_trials"] == 0
    kb = spec(correctness="kernelbench", num_correct_trials=2, num_perf_trials=7)
    assert kb["trials"] == 2 and kb["perf_trials"] == 7
    default = spec(correctness="kernelbench")
    assert default["trials"] == 5 and default["perf_trials"] == 100
    counters = spec(correctness="kernelbench", sections=["SpeedOfLight"])  # times no call
    assert counters["trials"] == 5 and counters["perf_trials"] == 0


# --- the rows of both times -----------------------------------------------------------------


def request(**extra: Any) -> ProfileRequest:
    variants = [{"name": "ref", "entry": "run"}, {"name": "fused", "entry": "run"}]
    return ProfileRequest(source="x = 1\n", variants=variants, configs={"n": [1, 2]}, **extra)


def time_row(name: str, n: int, mean_us: float, ok: bool = True) -> dict[str, Any]:
    return {
        "Annotation": name,
        "Metric": TIME_METRIC,
        "n": n,
        "AvgValue": mean_us * US,
        "CI95_Lower": (mean_us - 0.1) * US,
        "CI95_Upper": (mean_us + 0.1) * US,
        "RelativeStdDevPct": 0.5,
        "StableMeasurement": True,
        "GPU": "A GPU",
        "Unit": "nsecond",
        "OutputOK": ok,
    }


def test_the_pre_flight_s_samples_become_rows_of_their_own_metrics() -> None:
    manifest = [
        {"config": 0, "ns": {"ref": [20e3, 21e3, 19e3], "fused": [13e3, 13e3, 13e3]}},
        {"config": 1, "ns": {"ref": [22e3], "fused": ["broken", -1]}},
        {"config": "x", "ns": {"ref": [1.0]}},
    ]
    samples = call_rows.samples_of(manifest)
    assert samples == {"ref": {0: [20e3, 21e3, 19e3], 1: [22e3]}, "fused": {0: [13e3] * 3}}
    times = pd.DataFrame([time_row("ref", 1, 9.0), time_row("fused", 1, 12.0, ok=False)])
    pre = PreflightResult(ok=True, device="cuda", seconds=0.0, call_ns=samples)
    pre.kernelbench_ns = {"ref": {0: [30e3, 32e3]}}
    out = call_rows.with_call_rows(times, request(), pre, None)
    calls = out[out["Metric"] == CALL_METRIC].set_index(["Annotation", "n"])
    assert calls.loc[("ref", 1), "AvgValue"] == 20e3 and calls.loc[("ref", 1), "NumRuns"] == 3
    assert calls.loc[("ref", 2), "NumRuns"] == 1 and calls.loc[("ref", 1), "GPU"] == "A GPU"
    assert bool(calls.loc[("fused", 1), "OutputOK"]) is False
    (kb,) = out[out["Metric"] == KERNELBENCH_METRIC].to_dict("records")
    assert kb["Annotation"] == "ref" and kb["AvgValue"] == 31e3 and kb["Unit"] == "ns"


def test_on_the_cpu_the_timing_loop_s_wall_times_are_the_per_call_rows() -> None:
    times = pd.DataFrame([time_row("ref", 1, 9.0)])
    out = call_rows.with_call_rows(times, request(), None, "perf_counter")
    assert list(out["Metric"]) == [TIME_METRIC, CALL_METRIC]
    assert out["AvgValue"].nunique() == 1


# --- the verdict on either basis ------------------------------------------------------------


def call_row(name: str, n: int, mean_us: float) -> dict[str, Any]:
    row = time_row(name, n, mean_us)
    return {**row, "Metric": CALL_METRIC, "Unit": "ns"}


def synthetic_run(rows: list[dict[str, Any]], **extra: Any) -> Any:
    """The issue's level-2 shape: 'ref' launches 4 short kernels a call, 'fused' one longer;
    per call, 'ref' pays for its launches. Recorded as an ncu run (no timing method)."""
    checks = [
        OutputCheck(variant=v, config_index=i, config={"n": i + 1}, ok=True)
        for v in ("ref", "fused")
        for i in (0, 1)
    ]
    counts = {"ref": {0: 4, 1: 4}, "fused": {0: 1, 1: 1}}
    return SimpleNamespace(
        run_id="r1",
        run_dir=Path("/nonexistent"),
        request=request(baseline="ref", **extra),
        processed=pd.DataFrame(rows),
        raw=pd.DataFrame(),
        checks=checks,
        kernels={},
        warnings=[],
        artifacts={},
        seconds=1.0,
        facts=RunFacts(),
        dropped={},
        suspects=[],
        preflight=PreflightResult(ok=True, device="cuda", seconds=0.0, kernel_counts=counts),
    )


OPPOSITE = [
    time_row("ref", 1, 9.14),
    time_row("fused", 1, 11.9),
    time_row("ref", 2, 9.14),
    time_row("fused", 2, 11.9),
    call_row("ref", 1, 30.0),
    call_row("fused", 1, 14.0),
    call_row("ref", 2, 30.0),
    call_row("fused", 2, 14.0),
]


def test_where_kernel_time_and_per_call_time_point_opposite_ways_the_answer_says_why() -> None:
    s = summaries.compare_summary(synthetic_run(OPPOSITE))
    assert s.time_basis == "gpu" and s.metric == TIME_METRIC
    assert s.basis is not None and "ncu" in s.basis
    assert s.overall["fused"].verdict == "slower"
    assert s.other_basis is not None and s.other_basis.time_basis == "call"
    assert s.other_basis.overall["fused"].verdict == "faster"
    assert s.configs[0].variants["fused"].other_time == 14.0 * US
    (note,) = s.disagreements or []
    assert note.startswith("fused: GPU time and per-call time disagree at 2 of 2 configs")
    assert "ref launches 4 kernel(s), fused 1" in note
    assert "70% of ref's call (host gaps) and 15% of fused's call" in note
    assert "lose less time between them" in note
    text = render_compare(s)
    assert "time basis: gpu" in text and "on call time: fused" in text and "disagree: " in text


def test_the_call_basis_judges_per_call_time_and_names_it() -> None:
    s = summaries.compare_summary(synthetic_run(OPPOSITE), time_basis="call")
    assert s.time_basis == "call" and s.metric == CALL_METRIC
    assert s.basis is not None and "CUDA events" in s.basis
    assert s.overall["fused"].verdict == "faster"
    assert s.other_basis is not None and s.other_basis.overall["fused"].verdict == "slower"
    asked = summaries.compare_summary(synthetic_run(OPPOSITE, time_basis="call"))
    assert asked.time_basis == "call"


def test_bases_that_agree_say_nothing_more() -> None:
    same = [
        *OPPOSITE[:4],
        *(
            call_row(n, k, 14.0 if n == "ref" else 30.0)
            for n, k in (("ref", 1), ("fused", 1), ("ref", 2), ("fused", 2))
        ),
    ]
    s = summaries.compare_summary(synthetic_run(same))
    assert s.overall["fused"].verdict == s.other_basis.overall["fused"].verdict == "slower"
    assert s.disagreements is None


def test_a_run_without_per_call_times_is_judged_on_gpu_time_and_says_so() -> None:
    gpu_only = synthetic_run(OPPOSITE[:4], correctness="kernelbench")  # defaults to "call"
    s = summaries.compare_summary(gpu_only)
    assert s.time_basis == "gpu" and s.other_basis is None
    assert any("holds no per-call times" in w for w in s.warnings or [])
    with pytest.raises(InvalidRequestError, match="no per-call times") as err:
        summaries.compare_summary(gpu_only, time_basis="call")
    assert "time_basis='gpu'" in (err.value.hint or "")


def test_a_call_whose_work_escapes_the_caller_s_stream_is_suspect_on_per_call_time() -> None:
    """KernelBench's non-default-stream kernel: its matmul runs on a stream the call never
    joins, so the events on the caller's stream (ours and KernelBench's) close long before
    it ends. Its GPU time holds the work; its per-call time cannot be trusted."""
    rows = [time_row("ref", n, 2600.0) for n in (1, 2)]
    rows += [time_row("fused", n, 2600.0) for n in (1, 2)]
    rows += [call_row("ref", n, 2650.0) for n in (1, 2)]
    rows += [call_row("fused", n, 12.0) for n in (1, 2)]
    rows += [kb_row("ref", n, 2660.0) for n in (1, 2)] + [kb_row("fused", n, 11.0) for n in (1, 2)]
    for basis in ("gpu", "call"):
        run = synthetic_run(rows, correctness="kernelbench", time_basis=basis)
        s = summaries.compare_summary(run)
        verdicts = {s.time_basis: s.overall["fused"].verdict}
        assert s.other_basis is not None
        verdicts[s.other_basis.time_basis] = s.other_basis.overall["fused"].verdict
        assert verdicts == {"gpu": "within_noise", "call": "suspect"}
        report = s.kernelbench
        assert report is not None
        (fused,) = report.results
        assert not fused.correctness and fused.runtime == -1.0 and fused.speedup is None
        assert fused.reason is not None and "never joins" in fused.reason


# --- KernelBench's numbers --------------------------------------------------------------------


def kb_row(name: str, n: int, mean_us: float) -> dict[str, Any]:
    return {**call_row(name, n, mean_us), "Metric": KERNELBENCH_METRIC}


def test_kernelbench_s_fields_follow_its_own_timing_and_name_our_basis() -> None:
    rows = [*OPPOSITE, kb_row("ref", 1, 40.0), kb_row("fused", 1, 20.0)]
    rows += [kb_row("ref", 2, 40.0), kb_row("fused", 2, 20.0)]
    run = synthetic_run(rows, correctness="kernelbench", num_perf_trials=7)
    s = summaries.compare_summary(run)
    assert s.time_basis == "call"  # KernelBench's rule: its judge times the call
    report = s.kernelbench
    assert report is not None
    (fused,) = report.results
    assert (fused.runtime, fused.ref_runtime, fused.speedup) == (0.02, 0.04, 2.0)
    assert fused.verdict == "faster" and report.verdict_basis == "call"
    assert report.num_perf_trials == 7 and report.num_correct_trials == 5
    assert report.timing is not None and "7 trials (the first of 8 discarded)" in report.timing
    assert "KernelBench: fused: compiled=True" in render_compare(s)


def test_without_kernelbench_s_trials_its_fields_read_our_times_and_say_which() -> None:
    run = synthetic_run(OPPOSITE, correctness="kernelbench")
    report = summaries.compare_summary(run).kernelbench
    assert report is not None and report.num_perf_trials is None
    (fused,) = report.results
    assert (fused.runtime, fused.ref_runtime) == (0.014, 0.03)
    assert report.timing is not None and report.timing.startswith("no KernelBench trials")
    assert summaries.compare_summary(synthetic_run(OPPOSITE)).kernelbench is None


def test_kernelbench_s_correctness_trials_are_as_many_as_asked(tmp_path: Path) -> None:
    """Right for its first 3 calls: the check call and 2 trials pass, the 3rd trial fails;
    asked for 2 trials, the candidate is caught by the first measured run instead."""
    rule = {"correctness": "kernelbench"}
    (five,) = preflight_checks(tmp_path / "five", wrong_after(3, **rule))
    assert five["message"].startswith("KernelBench trial 2 (seed ")
    (two,) = preflight_checks(tmp_path / "two", wrong_after(3, num_correct_trials=2, **rule))
    assert two["message"].startswith("run 0, on new inputs")
