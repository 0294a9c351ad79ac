"""summarize: compact answers from real reports (the committed H200 fixtures), no GPU needed.

Also holds `sweep_run`: the recorded H200 engine sweep written as a finished pipeline run
(read back by `pipeline.load_run`), which the server tests reuse."""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path
from typing import Any

import ncu_report
import pandas as pd
import pytest

from nsight_agent import aggregation, analyze, extraction, pipeline, summarize
from nsight_agent.errors import ExtractionError, InvalidRequestError
from nsight_agent.pipeline import OutputCheck, RunResult
from nsight_agent.requests import ProfileRequest

FIXTURES = Path(__file__).parent / "fixtures"
SWEEP = FIXTURES / "engine" / "sweep"
H200_REPORT = FIXTURES / "h200_bf16_matmul_sections.ncu-rep"
TIME = "gpu__time_duration.sum"


def sweep_variants() -> tuple[str, str]:
    """(candidate, baseline): the sweep's two annotations, in recorded order."""
    names = [str(a) for a in dict.fromkeys(sweep_frames([TIME])[1]["Annotation"])]
    return names[0], names[1]


def sweep_frames(
    metrics: list[str], variants: list[str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Raw and processed frames of the recorded H200 sweep (3 sizes x 3 runs, 2 variants)."""
    configs = [(4096,), (65536,), (1048576,)]
    calls = analyze.read_manifest(SWEEP / "manifest.json")
    records = extraction.read_actions(SWEEP / "report.ncu-rep", metrics)
    grouped = extraction.group_kernels(records, calls, None, lambda a, b: a + b)
    if variants is not None:
        grouped = {k: v for k, v in grouped.items() if k in variants}
    raw = extraction.raw_frame(grouped, metrics, configs, ["n"])
    return raw, aggregation.aggregate(raw, ["n"])


def sweep_run(
    root: Path,
    *,
    variants: list[str] | None = None,
    metrics: list[str] | None = None,
    checks: list[OutputCheck] | None = None,
    run_id: str = "20261129-sweep",
) -> RunResult:
    """The recorded sweep as a finished pipeline run under ``root`` (``load_run`` reads it)."""
    metrics = metrics or [TIME]
    raw, processed = sweep_frames(metrics, variants)
    names = list(dict.fromkeys(processed["Annotation"]))
    run_dir = root / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(SWEEP / "report.ncu-rep", run_dir / "report.ncu-rep")
    shutil.copy(SWEEP / "manifest.json", run_dir / "manifest.json")
    request = ProfileRequest(
        source="def setup(n, device):\n    return ()\n",
        variants=[{"name": n, "entry": "run"} for n in names] if len(names) > 1 else [],
        entry=names[0] if len(names) == 1 else "run",
        configs={"n": [4096, 65536, 1048576]},
        metrics=metrics,
        runs=3,
    )
    (run_dir / "request.json").write_text(request.model_dump_json())
    kernels = {
        str(a): sorted({str(k) for k in processed.loc[processed["Annotation"] == a, "Kernel"]})
        for a in names
    }
    run = RunResult(
        run_id=run_id,
        run_dir=run_dir,
        request=request,
        processed=processed,
        raw=raw,
        checks=checks or [],
        kernels=kernels,
        warnings=[],
        artifacts={},
        seconds=9.1,
    )
    pipeline.save_result(run)
    return pipeline.load_run(run_id, runs_root=root)


# ---------------------------------------------------------------------------------------------
# summarize_report on the committed H200 report, checked against ncu_report read directly


def _by_hand(path: Path) -> Any:
    report = ncu_report.load_report(str(path))
    return report.range_by_idx(0).action_by_idx(0)


def test_summarize_report_values_match_ncu_report() -> None:
    action = _by_hand(H200_REPORT)
    s = summarize.summarize_report(H200_REPORT)
    assert s.kernels_total == 1 and s.gpu == "NVIDIA H200"
    a = s.actions[0]
    assert a.kernel == action.name()
    assert a.nvtx == {"nsight_agent": ["mm"]}
    assert a.duration_ns == pytest.approx(action["gpu__time_duration.sum"].value(), rel=1e-3)
    sm = action["sm__throughput.avg.pct_of_peak_sustained_elapsed"].value()
    mem = action["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"].value()
    assert a.sol_compute_pct == pytest.approx(sm, rel=1e-3)
    assert a.sol_memory_pct == pytest.approx(mem, rel=1e-3)
    assert a.metrics is not None
    grid = a.metrics["launch__grid_size"]
    assert grid.value == pytest.approx(action["launch__grid_size"].value())
    assert a.metrics_in_report == len(action.metric_names())
    # SOL: compute 75% > memory 59%, one of them above 60%: compute-bound by the stated rule.
    assert a.roofline is not None and a.roofline.bound == "compute-bound"
    peak = action["dram__bytes.sum.peak_sustained"].value()
    clock = action["dram__cycles_elapsed.avg.per_second"].value()
    assert a.roofline.peak_dram_bytes_per_s == pytest.approx(peak * clock, rel=1e-3)
    # ncu's own findings, largest estimated speedup first.
    rules = action.rule_results_as_dicts()
    gains = [r["speedup_estimation"]["speedup"] for r in rules if r.get("speedup_estimation")]
    assert a.findings is not None and a.findings[0].speedup_pct == pytest.approx(
        max(gains), rel=1e-2
    )
    assert a.findings_total == len([r for r in rules if r.get("rule_message")])


def test_summarize_report_other_domains_and_paging() -> None:
    s = summarize.summarize_report(SWEEP / "report.ncu-rep", limit=4, findings=0)
    report = ncu_report.load_report(str(SWEEP / "report.ncu-rep"))
    total = sum(report.range_by_idx(r).num_actions() for r in range(report.num_ranges()))
    assert s.kernels_total == total and len(s.actions) == 4
    assert s.page.truncated is not None and "offset=4" in s.page.truncated
    assert s.actions[0].nvtx is not None and "nsight_agent.call" in s.actions[0].nvtx
    assert s.actions[0].findings is None
    last = summarize.summarize_report(SWEEP / "report.ncu-rep", offset=total - 1, limit=4)
    assert [a.index for a in last.actions] == [total - 1]


def test_summarize_report_missing_file() -> None:
    with pytest.raises(ExtractionError, match="No report"):
        summarize.summarize_report(FIXTURES / "missing.ncu-rep")


def test_render_report_is_short_text() -> None:
    text = summarize.render_report(summarize.summarize_report(H200_REPORT))
    assert "nvjet" in text and "compute-bound" in text and len(text) < 1000


# ---------------------------------------------------------------------------------------------
# Runs: profile and compare views


def test_profile_summary_of_three_configs_is_compact(tmp_path: Path) -> None:
    cand, _ = sweep_variants()
    run = sweep_run(tmp_path, variants=[cand])
    s = summarize.profile_summary(run)
    assert [r.config for r in s.results] == [{"n": 4096}, {"n": 65536}, {"n": 1048576}]
    first = run.processed.iloc[0]
    st = s.results[0].stats[TIME]
    assert st.avg == pytest.approx(first["AvgValue"], rel=1e-3)
    assert st.n == 3 and st.stable is bool(first["StableMeasurement"])
    kernels = sorted(set(run.processed["Kernel"]))
    assert s.units == {TIME: "ns"} and s.kernels == {cand: kernels}
    assert s.warnings and any("unstable" in w for w in s.warnings)
    assert any("Clocks not locked" in w for w in s.warnings)
    size = summarize.json_size(s)
    assert size <= 1536, f"3 configs x 1 metric took {size} bytes"


def test_profile_summary_pages_and_filters(tmp_path: Path) -> None:
    run = sweep_run(tmp_path, metrics=[TIME, "dram__bytes.sum"])
    s = summarize.profile_summary(run, metrics=["dram__bytes.sum"], limit=2)
    assert len(s.results) == 2 and s.page.total == 6
    assert s.page.truncated is not None and "get_run(" in s.page.truncated
    assert set(s.results[0].stats) == {"dram__bytes.sum"}
    assert s.results[0].variant == sweep_variants()[0]
    with pytest.raises(InvalidRequestError, match="not in run"):
        summarize.profile_summary(run, metrics=["sm__cycles_elapsed.avg"])


def test_compare_verdicts_follow_the_stated_rule(tmp_path: Path) -> None:
    run = sweep_run(tmp_path)
    cand, base = sweep_variants()
    s = summarize.compare_summary(run, baseline=base)
    assert s.baseline == base and "confidence intervals" in s.rule
    frame = run.processed.set_index(["Annotation", "n"])
    for c in s.configs:
        n = c.config["n"]
        t, b = frame.loc[(cand, n)], frame.loc[(base, n)]
        v = c.variants[cand]
        assert v.speedup == pytest.approx(b["AvgValue"] / t["AvgValue"], rel=1e-3)
        if t["CI95_Upper"] < b["CI95_Lower"]:
            assert v.verdict == "faster"
        elif t["CI95_Lower"] > b["CI95_Upper"]:
            assert v.verdict == "slower"
        else:
            assert v.verdict == "within_noise"
        assert c.variants[base].verdict == "baseline"
    overall = s.overall[cand]
    speedups = [c.variants[cand].speedup or 0 for c in s.configs]
    assert overall.geomean_speedup == pytest.approx(statistics.geometric_mean(speedups), rel=1e-3)
    assert summarize.json_size(s) < 2048


def test_incorrect_variant_is_never_faster(tmp_path: Path) -> None:
    cand, base = sweep_variants()
    bad = OutputCheck(
        variant=cand,
        config_index=2,
        config={"n": 1048576},
        ok=False,
        max_abs_err=0.5,
        message="mismatch",
    )
    run = sweep_run(tmp_path, checks=[bad])
    s = summarize.compare_summary(run, baseline=base)
    v = s.configs[2].variants[cand]
    assert v.verdict == "incorrect" and v.check is not None and "max_abs_err=0.5" in v.check
    assert s.overall[cand].verdict == "incorrect"
    assert v.speedup is None and s.overall[cand].geomean_speedup is None  # no speedup claimed
    assert s.configs[0].variants[cand].verdict != "incorrect"


def test_rows_page_and_roofline_of_a_run(tmp_path: Path) -> None:
    run = sweep_run(tmp_path)
    rows = summarize.rows_page(run, "raw", offset=0, limit=5)
    assert rows.columns[:3] == ["Annotation", "Value", "Metric"] and len(rows.rows) == 5
    assert rows.page.total == len(run.raw) and rows.page.truncated
    rf = summarize.roofline_summary(run.artifacts["report"], run=run, limit=100)
    assert rf.run_id == run.run_id
    tied = [k for k in rf.kernels if k.config is not None]
    assert tied and {k.variant for k in tied} == set(sweep_variants())
    assert {k.config_index for k in tied} == {0, 1, 2}


def test_sig_and_page_helpers() -> None:
    assert summarize.sig(123456.789) == 123500.0
    assert summarize.sig(float("nan")) is None and summarize.sig("x") is None
    assert summarize.page(3, 0, 10, "f({offset})").truncated is None
    with pytest.raises(InvalidRequestError):
        summarize.page(3, -1, 10, "f({offset})")
