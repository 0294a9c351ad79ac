"""Extraction + aggregation on reports recorded on the H200, checked against values read
straight from the report with ncu_report and aggregated by hand."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ncu_report
import pandas as pd
import pytest

from nsight_agent.annotation import WARMUP_KERNEL
from nsight_agent.api import analyze
from nsight_agent.engine.collection import aggregate as aggregation
from nsight_agent.engine.collection import derived, measure
from nsight_agent.engine.collection import extract as extraction
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.errors import (
    ExtractionError,
    KernelCountMismatchError,
    MultipleKernelsError,
    NoKernelsProfiledError,
    UnknownMetricError,
)

TIME = "gpu__time_duration.sum"
PROCESSED_COLUMNS = [
    "Annotation", "Metric", "n", "AvgValue", "StdDev", "MinValue", "MaxValue", "NumRuns",
    "Kernel", "GPU", "Host", "ComputeClock", "MemoryClock", "Unit", "CI95_Lower", "CI95_Upper",
    "RelativeStdDevPct", "StableMeasurement", "Normalized", "Geomean", "MedianValue", "P20Value",
    "P80Value",
]  # fmt: skip

# Readers of the engine fixtures recorded on the H200 by scripts/record_fixtures.py.
ENGINE = Path(__file__).parent / "fixtures" / "engine"


@dataclass
class Fixture:
    name: str
    report: Path
    manifest: Path
    configs: list[tuple[Any, ...]]
    runs: int
    metrics: list[str]
    replay_mode: str

    @property
    def calls(self) -> list[dict[str, Any]]:
        return list(json.loads(self.manifest.read_text())["calls"])


def fixture(name: str) -> Fixture:
    d = ENGINE / name
    meta = json.loads((d / "fixture.json").read_text())
    return Fixture(
        name=name,
        report=d / "report.ncu-rep",
        manifest=d / "manifest.json",
        configs=[c if isinstance(c, (list, tuple)) else (c,) for c in meta["configs"]],
        runs=int(meta.get("runs", 1)),
        metrics=list(meta.get("metrics", ["gpu__time_duration.sum"])),
        replay_mode=str(meta.get("replay_mode", "kernel")),
    )


def values_by_hand(fx: Fixture, metric: str) -> dict[tuple[str, int], list[list[float]]]:
    """(annotation, config index) -> per run, the metric of each kernel: read straight from
    ncu_report, independently of nsight_agent.engine.collection.extract."""
    config_of = {c["call"]: c["config"] for c in fx.calls}
    report = ncu_report.load_report(str(fx.report))
    per_call: dict[tuple[str, int], list[float]] = {}
    for r in range(report.num_ranges()):
        rng = report.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            state = action.nvtx_state()
            names = {}
            for d in state.domains():
                dom = state.domain_by_id(d)
                names[dom.name()] = list(dom.start_end_ranges())
            if not names.get("nsight_agent") or not names.get("nsight_agent.call"):
                continue
            ann = names["nsight_agent"][-1]
            call = int(names["nsight_agent.call"][0].split("=")[1])
            per_call.setdefault((ann, call), []).append(float(action[metric].value()))
    out: dict[tuple[str, int], list[list[float]]] = {}
    for (ann, call), vals in sorted(per_call.items(), key=lambda kv: kv[0][1]):
        out.setdefault((ann, config_of[call]), []).append(vals)
    return out


def mean_std(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else float("nan"))


def frames(name: str, **settings: object) -> tuple[pd.DataFrame, pd.DataFrame]:
    fx = fixture(name)
    s = analyze.KernelSettings(metrics=tuple(fx.metrics), runs=fx.runs, **settings)  # type: ignore[arg-type]
    artifacts = {"report": fx.report, "manifest": fx.manifest}
    results = analyze.results_from_report(artifacts, fx.configs, ["n"], s)
    return results.raw, results.to_dataframe()


def test_actions_carry_annotation_and_call() -> None:
    fx = fixture("sweep")
    records = extraction.read_actions(fx.report, fx.metrics)
    annotations = {a for c in fx.calls for a in c["annotations"]}
    assert len(records) == len(fx.configs) * fx.runs * len(annotations)
    assert {r.annotation for r in records} == annotations
    assert sorted({r.call for r in records}) == list(range(len(fx.configs) * fx.runs))
    assert all(r.gpu == "NVIDIA H200" for r in records)
    assert all(r.units[TIME] == "ns" and r.values[TIME] > 0 for r in records)


def test_sweep_aggregates_match_hand_computation() -> None:
    fx = fixture("sweep")
    raw, processed = frames("sweep")
    assert list(processed.columns) == PROCESSED_COLUMNS
    assert len(raw) == len(fx.configs) * fx.runs * 2 * len(fx.metrics)
    for metric in fx.metrics:
        by_hand = values_by_hand(fx, metric)
        for (annotation, config), runs in by_hand.items():
            values = [v for (v,) in runs]  # one kernel per run
            mean, std = mean_std(values)
            row = processed[
                (processed.Annotation == annotation)
                & (processed.Metric == metric)
                & (processed.n == fx.configs[config][0])
            ].iloc[0]
            assert row.NumRuns == fx.runs
            assert row.AvgValue == pytest.approx(mean)
            assert row.StdDev == pytest.approx(std)
            assert row.MinValue == min(values) and row.MaxValue == max(values)
            half = 1.96 * std / math.sqrt(fx.runs)
            assert row.CI95_Lower == pytest.approx(mean - half)
            assert row.CI95_Upper == pytest.approx(mean + half)
            rsd = 100 * std / mean if mean else math.nan
            if not math.isnan(rsd):
                assert row.RelativeStdDevPct == pytest.approx(rsd)
                assert bool(row.StableMeasurement) == (rsd < 2.0)


def test_geomean_is_over_configs_per_annotation_and_metric() -> None:
    fx = fixture("sweep")
    _, processed = frames("sweep")
    for (annotation, metric), group in processed.groupby(["Annotation", "Metric"]):
        expected = statistics.geometric_mean(group.AvgValue)
        assert group.Geomean.nunique() == 1
        assert group.Geomean.iloc[0] == pytest.approx(expected), (annotation, metric)
    assert len(processed) == 2 * len(fx.configs) * len(fx.metrics)


def test_normalize_against_divides_by_baseline_of_same_config() -> None:
    fx = fixture("sweep")
    _, plain = frames("sweep")
    baseline = plain.Annotation.iloc[-1]
    _, norm = frames("sweep", normalize_against=baseline)
    assert "NormalizationValue" in norm.columns
    assert set(norm.Normalized) == {baseline}
    for _, row in norm.iterrows():
        own = plain[
            (plain.Annotation == row.Annotation) & (plain.Metric == row.Metric) & (plain.n == row.n)
        ]
        base = plain[
            (plain.Annotation == baseline) & (plain.Metric == row.Metric) & (plain.n == row.n)
        ]
        assert row.AvgValue == pytest.approx(own.AvgValue.iloc[0] / base.AvgValue.iloc[0])
        assert row.NormalizationValue == pytest.approx(base.AvgValue.iloc[0])
    own_base = norm[norm.Annotation == baseline].AvgValue.tolist()
    assert own_base == pytest.approx([1.0] * len(own_base))
    assert len(fx.configs) > 1


def test_derived_metrics_scalar_tuple_and_dict() -> None:
    fx = fixture("sweep")

    def bandwidth(time_ns: float, nbytes: float, n: int) -> dict[str, object]:
        return {"GB/s": (nbytes / time_ns, "GB/s"), "bytes_per_elem": nbytes / n}

    def tflops(time_ns: float, nbytes: float, n: int) -> tuple[float, str]:
        return n / time_ns / 1e3, "TFLOP/s"

    with pytest.warns(UserWarning, match="bytes_per_elem"):
        raw, processed = frames("sweep", derive_metric=bandwidth)
    by_time = values_by_hand(fx, TIME)
    by_bytes = values_by_hand(fx, "dram__bytes.sum")
    for (annotation, config), runs in by_time.items():
        n = fx.configs[config][0]
        gbps = [b[0] / t[0] for t, b in zip(runs, by_bytes[(annotation, config)])]
        row = processed[
            (processed.Annotation == annotation) & (processed.Metric == "GB/s") & (processed.n == n)
        ].iloc[0]
        assert row.AvgValue == pytest.approx(statistics.fmean(gbps))
        assert row.Unit == "GB/s"
        per_elem = processed[
            (processed.Annotation == annotation)
            & (processed.Metric == "bytes_per_elem")
            & (processed.n == n)
        ].iloc[0]
        assert math.isnan(per_elem.Unit)
    # derived rows come after the measured ones, as in nsight-python
    assert list(raw.Metric.unique()) == [*fx.metrics, "GB/s", "bytes_per_elem"]

    _, processed = frames("sweep", derive_metric=tflops)
    assert "tflops" in set(processed.Metric)


def test_derive_metric_with_wrong_arity_is_rejected() -> None:
    with pytest.raises(TypeError, match="2 metric value"):
        derived.check_derive_signature(lambda t, n: t, 2, 1)


def test_several_kernels_need_combine_and_sum_when_given() -> None:
    fx = fixture("two_kernels")
    with pytest.raises(MultipleKernelsError, match="combine_kernel_metrics") as err:
        frames("two_kernels")
    assert "ignore_kernel_list" in str(err.value) and "replay_mode='range'" in str(err.value)
    _, processed = frames("two_kernels", combine_kernel_metrics=lambda a, b: a + b)
    for (annotation, config), runs in values_by_hand(fx, TIME).items():
        assert all(len(kernels) == 2 for kernels in runs)
        row = processed[
            (processed.Annotation == annotation) & (processed.n == fx.configs[config][0])
        ].iloc[0]
        assert row.AvgValue == pytest.approx(statistics.fmean(sum(k) for k in runs))
        assert " + " in row.Kernel


def test_the_childs_warm_up_kernel_is_in_the_report_but_in_no_row_or_view() -> None:
    """``warmed_up`` is ``two_kernels`` recorded (on an H100) with the child's warm-up kernel:
    ncu profiled it first, inside the scope range; it is no call's and nobody's kernel."""
    fx, before = fixture("warmed_up"), fixture("two_kernels")
    report = ncu_report.load_report(str(fx.report))
    names = [report.range_by_idx(0).action_by_idx(a).name() for a in range(9)]
    assert names[0] == WARMUP_KERNEL and WARMUP_KERNEL not in names[1:]
    assert [a.name() for a in extraction.iter_actions(report, markers=True)] == names[1:]
    records = extraction.read_actions(fx.report, [TIME])
    assert [r.kernel for r in records] == ["scale_kernel", "add_kernel"] * 4
    assert [r.call for r in records] == [0, 0, 1, 1, 2, 2, 3, 3]
    # The same rows as the report recorded before the warm-up existed (values: other GPU).
    got = frames("warmed_up", combine_kernel_metrics=lambda a, b: a + b)[1]
    old = frames("two_kernels", combine_kernel_metrics=lambda a, b: a + b)[1]
    key = ["Annotation", "n", "Kernel", "NumRuns"]
    assert got[key].to_dict("records") == old[key].to_dict("records")
    assert before.configs == fx.configs and (got.AvgValue > 0).all()


def test_ignore_kernel_list_drops_helper_kernels() -> None:
    fx = fixture("two_kernels")
    records = extraction.read_actions(fx.report, fx.metrics)
    first_kernel = records[0].kernel
    _, processed = frames("two_kernels", ignore_kernel_list=(first_kernel,))
    assert first_kernel not in set(processed.Kernel)
    assert (processed.NumRuns == fx.runs).all()
    everything = tuple({r.kernel for r in records})
    with pytest.raises(NoKernelsProfiledError, match="ignore_kernel_list"):
        frames("two_kernels", ignore_kernel_list=everything)


def test_kernel_count_that_changes_between_runs_is_an_error() -> None:
    with pytest.raises(KernelCountMismatchError, match="different number of kernels"):
        frames("varying", combine_kernel_metrics=lambda a, b: a + b)


def test_range_replay_gives_one_result_per_range() -> None:
    fx = fixture("range_replay")
    records = extraction.read_actions(fx.report, fx.metrics)
    assert len(records) == len(fx.configs) * fx.runs
    _, processed = frames("range_replay")
    assert (processed.NumRuns == fx.runs).all()
    assert len(processed) == len(fx.configs)


def test_kernel_launched_from_another_thread_is_captured() -> None:
    fx = fixture("threaded")
    records = extraction.read_actions(fx.report, fx.metrics)
    assert len(records) == fx.runs
    assert all(r.annotation == "from_thread" for r in records)


def test_failed_annotation_yields_nan_not_a_crash() -> None:
    fx = fixture("sometimes_fails")
    failed = {(c["config"], a) for c in fx.calls for a in c["failed"]}
    assert failed, "the fixture records failures"
    _, processed = frames("sometimes_fails")
    for config, annotation in failed:
        row = processed[
            (processed.Annotation == annotation) & (processed.n == fx.configs[config][0])
        ].iloc[0]
        assert math.isnan(row.AvgValue) and row.NumRuns == 0
    assert processed[processed.Annotation == "ok"].AvgValue.notna().all()


def test_metric_not_in_report_names_it() -> None:
    fx = fixture("sweep")
    with pytest.raises(UnknownMetricError, match=r"gpu__time_durationX\.sum"):
        extraction.read_actions(fx.report, ["gpu__time_durationX.sum"])


def test_csv_output_round_trips(tmp_path) -> None:  # type: ignore[no-untyped-def]
    fx = fixture("sweep")
    artifacts = {
        "report": fx.report,
        "manifest": fx.manifest,
        "raw_csv": tmp_path / "profiled_data-sweep-0.csv",
        "processed_csv": tmp_path / "processed_data-sweep-0.csv",
    }
    s = analyze.KernelSettings(metrics=tuple(fx.metrics), runs=fx.runs)
    results = analyze.results_from_report(artifacts, fx.configs, ["n"], s)
    raw = pd.read_csv(artifacts["raw_csv"])
    processed = pd.read_csv(artifacts["processed_csv"])
    assert list(raw.columns) == [*extraction.RAW_COLUMNS, "n"]
    assert list(processed.columns) == PROCESSED_COLUMNS
    assert processed.AvgValue.tolist() == pytest.approx(results.to_dataframe().AvgValue.tolist())
    assert len(raw) == len(results.raw_dataframe())


def test_aggregate_keeps_parameter_objects_as_given() -> None:
    """As nsight-python (its #63): hashable objects group as they are, unsortable ones included
    (by identity for plain objects, tensors); unhashable ones on their text; the output holds
    the objects given, not their repr."""
    a, b = object(), object()
    raw = pd.DataFrame(
        {
            "Annotation": ["a"] * 6, "Value": [1.0, 3.0, 2.0, 2.0, 4.0, 6.0], "Metric": ["m"] * 6,
            "Kernel": ["k"] * 6, "GPU": ["g"] * 6, "Host": ["h"] * 6, "ComputeClock": [1.0] * 6,
            "MemoryClock": [1.0] * 6, "Unit": ["ns"] * 6,
            "dtype": [a, b, None, None, a, b],
            "shape": [[1, 2], [1, 2], [3], [3], [1, 2], [1, 2]],
        }
    )  # fmt: skip
    out = aggregation.aggregate(raw, ["dtype", "shape"], normalize_against="a")
    assert out.dtype.iloc[0] is a and out.dtype.iloc[1] is b and pd.isna(out.dtype.iloc[2])
    assert out["shape"].tolist() == [[1, 2], [1, 2], [3]]
    assert out.NumRuns.tolist() == [2, 2, 2]
    assert list(out.columns[:4]) == ["Annotation", "Metric", "dtype", "shape"]
    assert not any(c.endswith("__key__") for c in out.columns)


def test_rows_of_a_real_report_from_two_gpus_or_clocks_are_refused() -> None:
    """The raw rows of a real sweep aggregate; the same rows with one run's GPU name or clock
    changed (as if that run had been measured elsewhere) are refused, not averaged in."""
    raw, processed = frames("sweep")
    again = aggregation.aggregate(raw, ["n"])
    assert again.AvgValue.tolist() == pytest.approx(processed.AvgValue.tolist())
    assert set(again.GPU) == {"NVIDIA H200"}
    one_run = raw.index[0]
    for column, value, what in [
        ("GPU", "NVIDIA H100 80GB HBM3", "different GPUs"),
        ("ComputeClock", float(raw.ComputeClock.iloc[0]) / 2, "different SM clocks"),
        ("MemoryClock", float(raw.MemoryClock.iloc[0]) / 2, "different memory clocks"),
    ]:
        changed = raw.copy()
        changed.loc[one_run, column] = value
        with pytest.raises(ExtractionError, match=what):
            aggregation.aggregate(changed, ["n"])


def test_a_run_keeps_what_its_ncu_run_cost_as_ncu_reported_it() -> None:
    """Every kernel's replay passes come from the report (``profiler__replayer_passes``): one
    pass each for the sweep's two metrics; 34 for the planted kernel's dozen sections."""
    fx = fixture("sweep")
    measured = measure.measure(
        fx.report, json.loads(fx.manifest.read_text()), fx.metrics, fx.configs, ["n"]
    )
    assert measured.ncu_cost(7.25) == RunFacts(ncu_s=7.25, ncu_kernels=18, ncu_passes=18.0)
    planted = Path(__file__).parent / "fixtures" / "planted" / "logistic_map_cuda.ncu-rep"
    (record,) = extraction.read_actions(planted, [TIME])
    assert record.passes == 34.0
