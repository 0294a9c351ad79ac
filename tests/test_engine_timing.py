"""The timing path on CPU tensors (perf_counter): interleaving, statistics, the processed
frame's columns read by views/compare.py unchanged, and variants that game the measurement
(memoised, stale, rewritten buffers) called incorrect, never faster."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
import torch

from nsight_agent.engine.harness import runtime
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.engine.store.runs import OutputCheck
from nsight_agent.engine.worker import timing, timing_result
from nsight_agent.service.summaries import compare_summary

FAST = timing.TimingOptions(min_runs=6, max_runs=12, max_seconds=5.0)
PROCESSED = [
    "Annotation", "Metric", "AvgValue", "StdDev", "MinValue", "MaxValue", "NumRuns", "Kernel",
    "GPU", "Host", "ComputeClock", "MemoryClock", "Unit", "CI95_Lower", "CI95_Upper",
    "RelativeStdDevPct", "StableMeasurement", "Normalized", "Geomean",
]  # fmt: skip


def setup(n: int, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, device=device), torch.randn(n, device=device)


def add_a(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.add(x, y)


def add_b(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def memoising() -> Any:
    cache: dict[tuple[int, ...], torch.Tensor] = {}

    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if tuple(x.shape) not in cache:  # memoised by shape, as the softmax seen on the H200
            cache[tuple(x.shape)] = torch.add(x, y)
        return cache[tuple(x.shape)]

    return add


def stale() -> Any:
    last: list[torch.Tensor] = []

    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        last.append(torch.add(x, y))
        return last.pop(0) if len(last) > 1 else last[0]  # the previous call's result

    return add


def rewrites_buffer() -> Any:
    buffer: list[torch.Tensor] = []

    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if not buffer:
            buffer.append(torch.empty_like(x))
        return torch.add(x, y, out=buffer[0])  # every call hands back the same buffer

    return add


def run(variants: dict[str, Any], configs: list[dict[str, Any]]) -> timing.TimingResult:
    return timing.time_variants(setup, variants, configs, baseline="A", options=FAST)


def test_variants_are_interleaved_and_the_order_reverses_every_run() -> None:
    result = run({"A": add_a, "B": add_b}, [{"n": 4096}])
    assert result.method == "perf_counter"
    runs = sorted({r for _, r, _ in result.order})
    assert len(runs) >= max(FAST.min_runs, 4)
    for r in runs:
        called = [v for _, run_, v in result.order if run_ == r]
        assert called == runtime.run_order(["A", "B"], r)
    # two variants: A B, B A, B A, A B: each first in half the runs
    firsts = [runtime.run_order(["A", "B"], r)[0] for r in range(4)]
    assert firsts == ["A", "B", "B", "A"]
    print("order:", result.order[:6])


def test_every_variant_takes_the_first_and_last_place_and_pairs_reverse() -> None:
    """Five variants, ten runs: the middle ones reach the first and last places too (the
    baseline held the first place in every other run before, the middle ones never), and each
    odd run is the even run before it reversed."""
    names = ["ref", "a", "b", "c", "d"]
    orders = [runtime.run_order(names, r) for r in range(10)]
    assert all(sorted(o) == sorted(names) for o in orders)
    assert {o[0] for o in orders} == set(names)
    assert {o[-1] for o in orders} == set(names)
    assert all(orders[r + 1] == orders[r][::-1] for r in range(0, 10, 2))
    assert runtime.run_order([], 3) == []


def test_rows_have_the_processed_columns_and_sane_statistics() -> None:
    result = run({"A": add_a, "B": add_b}, [{"n": 1024}, {"n": 65536}])
    frame = result.frame()
    assert set(PROCESSED) <= set(frame.columns)
    assert list(frame["Annotation"]) == ["A", "B", "A", "B"]
    assert list(frame["n"]) == [1024, 1024, 65536, 65536]
    assert set(frame["Metric"]) == {timing.METRIC}
    assert set(frame["Method"]) == {"perf_counter"}
    assert frame["OutputOK"].all()
    for row in frame.to_dict("records"):
        assert row["MinValue"] <= row["MedianValue"] <= row["MaxValue"]
        assert row["CI95_Lower"] <= row["AvgValue"] <= row["CI95_Upper"]
        assert row["MedianCI95_Lower"] <= row["MedianValue"] <= row["MedianCI95_Upper"]
        assert FAST.min_runs <= row["NumRuns"] <= FAST.max_runs
        assert row["Unit"] == "ns" and row["WarmupRuns"] >= FAST.warmup_min
    print(frame[["Annotation", "n", "AvgValue", "MedianValue", "NumRuns", "RelativeStdDevPct"]])


@pytest.mark.parametrize(
    ("make", "why"),
    [(memoising, "differ"), (stale, "differ"), (rewrites_buffer, "changed after it was returned")],
    ids=["memoised", "stale", "rewritten-buffer"],
)
def test_a_gaming_variant_is_incorrect(make: Any, why: str) -> None:
    result = run({"A": add_a, "B": add_b, "cheat": make()}, [{"n": 4096}])
    verdicts = {c["variant"]: c for c in result.checks}
    assert verdicts["A"]["ok"] and verdicts["B"]["ok"]
    assert not verdicts["cheat"]["ok"]
    assert why in verdicts["cheat"]["message"]
    frame = result.frame()
    assert not frame.loc[frame["Annotation"] == "cheat", "OutputOK"].item()
    print("cheat:", verdicts["cheat"]["message"][:160])


def test_compare_view_reads_timing_rows_unchanged(tmp_path: Path) -> None:
    result = run({"A": add_a, "cheat": memoising()}, [{"n": 4096}, {"n": 8192}])
    fake = SimpleNamespace(
        run_id="t1",
        run_dir=tmp_path,
        request=SimpleNamespace(
            baseline="A",
            runs=5,
            clock_control="none",
            min_effect_pct=3.0,
            expanded_configs=lambda: [{"n": 4096}, {"n": 8192}],
            time_basis=None,
            correctness="default",
            basis=lambda: "gpu",
        ),
        processed=result.frame(),
        raw=pd.DataFrame(),
        checks=[OutputCheck(**c) for c in result.checks],
        kernels={},
        warnings=[],
        artifacts={},
        seconds=0.0,
        facts=RunFacts(),
        dropped={},
        suspects=[],
        preflight=None,
    )
    summary = compare_summary(fake, baseline="A")
    assert summary.metric == timing.METRIC
    assert summary.overall["cheat"].verdict == "incorrect"
    assert all(c.variants["cheat"].speedup is None for c in summary.configs)


def test_a_deterministic_sample_set_gives_exact_statistics() -> None:
    stats = timing_result.summarize([10.0, 10.0, 10.0, 10.0, 10.0, 10.0], 1.5)
    assert stats["MedianValue"] == 10.0 and stats["StdDev"] == 0.0
    assert stats["StableMeasurement"] is True
    lo, hi = timing_result.median_ci(list(range(1, 101)))
    assert lo < 50.5 < hi and hi - lo < 25
    assert timing_result.summarize([1.0, 2.0, 30.0], 1.5)["StableMeasurement"] is False


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="baseline"):
        timing.time_variants(setup, {"A": add_a}, [{"n": 4}], baseline="Z")
    with pytest.raises(ValueError, match="at least one"):
        timing.time_variants(setup, {}, [{"n": 4}])


def test_short_cuda_event_rows_carry_a_warning_and_long_or_cpu_rows_do_not() -> None:
    from nsight_agent.engine.collection.check import short_kernel_warning

    frame = pd.DataFrame({"MedianValue": [4_170.0, 31_090.0, 124_630.0]})
    (warning,) = short_kernel_warning(frame, "cuda_events")
    assert warning.startswith("2 row(s) under 50 us (shortest 4.2 us)")
    assert "method='ncu'" in warning
    assert short_kernel_warning(frame.iloc[2:], "cuda_events") == []
    assert short_kernel_warning(frame, "perf_counter") == []  # CPU timing: no such claim
    # CUPTI records read shorter than ncu's duration (bench/fast_loop.py's agreement phase).
    (cupti,) = short_kernel_warning(frame, "cupti")
    assert cupti.startswith("2 row(s) under 100 us (shortest 4.2 us)")
    assert "shorter than ncu's kernel duration" in cupti
    assert short_kernel_warning(frame.iloc[2:], "cupti") == []


def test_outputs_of_earlier_runs_are_let_go_during_the_loop() -> None:
    """Each run's outputs go once they are checked: only run 0's (kept for the re-check) and
    the previous run's (the storage watch) stay. Held for every run, KernelBench's 6 GiB
    level-1 activations ran the H200 out of memory."""
    import weakref

    made: list[weakref.ref[torch.Tensor]] = []
    alive_at_call: list[int] = []

    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        alive_at_call.append(sum(r() is not None for r in made))
        out = torch.add(x, y)
        made.append(weakref.ref(out))
        return out

    options = timing.TimingOptions(min_runs=16, max_runs=16, max_seconds=30.0)
    result = timing.time_variants(setup, {"A": add}, [{"n": 64}], baseline="A", options=options)
    assert result.rows[0]["NumRuns"] == 16
    assert len(alive_at_call) > 16
    # run 0's output, its copy's source, and the previous run's: a bound that does not grow
    assert max(alive_at_call) <= 3, alive_at_call
