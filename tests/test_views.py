"""views: compact answers from real reports (the committed H200 fixtures), no GPU needed."""

from __future__ import annotations

import statistics
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ncu_report
import pytest

from nsight_agent import numbers
from nsight_agent.engine.pipeline import OutputCheck
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.errors import ExtractionError, InvalidRequestError
from nsight_agent.judge import run_warnings
from nsight_agent.service import summaries
from nsight_agent.views import common, rows, text

FIXTURES = Path(__file__).parent / "fixtures"
SWEEP = FIXTURES / "engine" / "sweep"
H200_REPORT = FIXTURES / "h200_bf16_matmul_sections.ncu-rep"
TIME = "gpu__time_duration.sum"


# ---------------------------------------------------------------------------------------------
# summarize_report on the committed H200 report, checked against ncu_report read directly


def _by_hand(path: Path) -> Any:
    report = ncu_report.load_report(str(path))
    return report.range_by_idx(0).action_by_idx(0)


def test_summarize_report_values_match_ncu_report() -> None:
    action = _by_hand(H200_REPORT)
    s = summaries.report_summary(H200_REPORT)
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
    assert a.metrics["grid"] == pytest.approx(action["launch__grid_size"].value())
    assert a.metrics_in_report == len(action.metric_names())
    # SOL: compute 75% > memory 59%, 17 points apart, one above 60%: compute-bound.
    assert a.roofline is not None and a.roofline.bound == "compute-bound"
    peak = action["dram__bytes.sum.peak_sustained"].value()
    clock = action["dram__cycles_elapsed.avg.per_second"].value()
    per_s = action["dram__bytes.sum.per_second"].value()
    assert a.roofline.dram_pct_of_peak == pytest.approx(100 * per_s / (peak * clock), rel=1e-3)
    # ncu's own findings, largest estimated speedup first.
    rules = action.rule_results_as_dicts()
    gains = [r["speedup_estimation"]["speedup"] for r in rules if r.get("speedup_estimation")]
    assert a.findings is not None and a.findings[0].speedup_pct == pytest.approx(
        max(gains), rel=1e-2
    )
    assert a.findings_total == len([r for r in rules if r.get("rule_message")])


def test_summarize_report_by_time_with_one_line_for_the_rest() -> None:
    s = summaries.report_summary(SWEEP / "report.ncu-rep", limit=4, findings=0, one_line=5)
    rep = ncu_report.load_report(str(SWEEP / "report.ncu-rep"))
    actions = [
        rep.range_by_idx(0).action_by_idx(i) for i in range(rep.range_by_idx(0).num_actions())
    ]
    total = len(actions)
    assert rep.num_ranges() == 1 and s.kernels_total == total and len(s.actions) == 4
    times = [a["gpu__time_duration.sum"].value() for a in actions]
    longest = sorted(range(total), key=lambda i: (-times[i], i))
    assert [a.index for a in s.actions] == longest[:4]  # longest first, in full
    assert s.others is not None and [o.index for o in s.others] == longest[4:9]
    share = 100 * times[longest[4]] / sum(times)
    assert s.others[0].share_pct == pytest.approx(share, rel=1e-2)
    assert s.page.truncated is not None and "offset=4" in s.page.truncated
    assert s.actions[0].nvtx is not None and "nsight_agent.call" in s.actions[0].nvtx
    assert s.actions[0].findings is None
    last = summaries.report_summary(SWEEP / "report.ncu-rep", offset=total - 1, limit=4)
    assert [a.index for a in last.actions] == [longest[-1]]


def test_summarize_report_missing_file() -> None:
    with pytest.raises(ExtractionError, match="No report"):
        summaries.report_summary(FIXTURES / "missing.ncu-rep")


def test_render_report_is_short_text() -> None:
    out = text.render_report(summaries.report_summary(H200_REPORT))
    assert "nvjet" in out and "compute-bound" in out and len(out) < 1000


# ---------------------------------------------------------------------------------------------
# Runs: profile and compare views


def test_profile_summary_of_three_configs_is_compact(sweep: Any, tmp_path: Path) -> None:
    cand, _ = sweep.variants()
    run = sweep.run(tmp_path, variants=[cand])
    s = summaries.profile_summary(run)
    assert [r.config for r in s.results] == [{"n": 4096}, {"n": 65536}, {"n": 1048576}]
    first = run.processed.iloc[0]
    st = s.results[0].stats[TIME]
    assert st.avg == pytest.approx(first["AvgValue"], rel=1e-3)
    assert st.n == 3 and st.stable is bool(first["StableMeasurement"])
    kernels = sorted(set(run.processed["Kernel"]))
    assert s.units == {TIME: "ns"} and s.kernels == {cand: kernels}
    assert s.warnings and any("unstable" in w for w in s.warnings)
    assert any("Clocks not locked" in w for w in s.warnings)
    size = common.json_size(s)
    assert size <= 1536, f"3 configs x 1 metric took {size} bytes"
    # The text keeps the spread and the output check apart ("UNSTABLE ok" read as one word).
    lines = text.render_profile(s).splitlines()[1:4]
    for r, line in zip(s.results, lines, strict=True):
        assert line.endswith("%, unstable)" if not r.stats[TIME].stable else "%)"), line
    assert "UNSTABLE" not in text.render_profile(s)
    judged = s.model_copy(
        update={"results": [r.model_copy(update={"correct": True}) for r in s.results]}
    )
    assert text.render_profile(judged).splitlines()[1].endswith("; output ok")


def test_profile_summary_pages_and_filters(sweep: Any, tmp_path: Path) -> None:
    run = sweep.run(tmp_path, metrics=[TIME, "dram__bytes.sum"])
    s = summaries.profile_summary(run, metrics=["dram__bytes.sum"], limit=2)
    assert len(s.results) == 2 and s.page.total == 6
    assert s.page.truncated is not None and "get_run(" in s.page.truncated
    assert set(s.results[0].stats) == {"dram__bytes.sum"}
    assert s.results[0].variant == sweep.variants()[0]
    with pytest.raises(InvalidRequestError, match="not in run"):
        summaries.profile_summary(run, metrics=["sm__cycles_elapsed.avg"])


def test_compare_verdicts_follow_the_stated_rule(sweep: Any, tmp_path: Path) -> None:
    run = sweep.run(tmp_path)
    cand, base = sweep.variants()
    s = summaries.compare_summary(run, baseline=base)
    assert s.baseline == base and "95% CIs" in s.rule
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
    # each cell's median and 20th/80th percentiles (about 42 B a cell) beside its mean
    assert common.json_size(s) < 2200


def test_incorrect_variant_is_never_faster(sweep: Any, tmp_path: Path) -> None:
    cand, base = sweep.variants()
    bad = OutputCheck(
        variant=cand,
        config_index=2,
        config={"n": 1048576},
        ok=False,
        max_abs_err=0.5,
        message="mismatch",
    )
    run = sweep.run(tmp_path, checks=[bad])
    s = summaries.compare_summary(run, baseline=base)
    v = s.configs[2].variants[cand]
    assert v.verdict == "incorrect" and v.check is not None and "max_abs_err=0.5" in v.check
    assert s.overall[cand].verdict == "incorrect"
    assert v.speedup is None and s.overall[cand].geomean_speedup is None  # no speedup claimed
    assert s.configs[0].variants[cand].verdict != "incorrect"


def test_rows_page_and_roofline_of_a_run(sweep: Any, tmp_path: Path) -> None:
    run = sweep.run(tmp_path)
    raw = rows.rows_page(run, "raw", offset=0, limit=5)
    assert raw.columns[:3] == ["Annotation", "Value", "Metric"] and len(raw.rows) == 5
    assert raw.page.total == len(run.raw) and raw.page.truncated
    rf = summaries.roofline_summary(run.artifacts["report"], run=run, limit=100)
    assert rf.run_id == run.run_id
    tied = [k for k in rf.kernels if k.config is not None]
    assert tied and {k.variant for k in tied} == set(sweep.variants())
    assert {k.config_index for k in tied} == {0, 1, 2}


def test_sig_and_page_helpers() -> None:
    assert numbers.sig(123456.789) == 123500.0
    assert numbers.sig(float("nan")) is None and numbers.sig("x") is None
    assert common.page(3, 0, 10, "f({offset})").truncated is None
    with pytest.raises(InvalidRequestError):
        common.page(3, -1, 10, "f({offset})")


def test_a_mean_pulled_by_slow_samples_is_said_for_its_variant(sweep: Any, tmp_path: Path) -> None:
    """The verdicts read the mean: where a few slow calls pull it far above the median (one
    4 ms call among 16 us ones on a busy CPU read an identical variant x2.2), the answer says so."""
    run = sweep.run(tmp_path)
    assert not run_warnings.pulled_by_outliers(run.processed)  # a GPU run's means are typical
    frame = run.processed.copy()
    first = frame.index[frame["Annotation"] == frame["Annotation"].iloc[0]][0]
    frame.loc[first, "AvgValue"] = 2.2 * frame.loc[first, "MedianValue"]
    said = run_warnings.pulled_by_outliers(frame)
    name = frame.loc[first, "Annotation"]
    assert len(said) == 1 and said[0].startswith(f"variant {name!r}: its mean is 2.2x its median")
    assert said[0] in run_warnings.run_warnings(run, frame)


def test_a_wrong_variant_is_one_warning_not_one_per_config(sweep: Any, tmp_path: Path) -> None:
    run = sweep.run(tmp_path)
    run.warnings = [
        f"variant 'bad' is WRONG for config #{i} {{'n': {n}}}: out differs; no speedup is claimed"
        for i, n in enumerate((4096, 65536, 1048576))
    ] + ["something else"]
    out = run_warnings.run_warnings(run, run.processed)
    wrong = [w for w in out if "WRONG" in w]
    assert wrong == [
        "variant 'bad' is WRONG at config #0, #1, #2 (the configs' check text says how); "
        "no speedup is claimed for it"
    ]
    assert "something else" in out


# ---------------------------------------------------------------------------------------------
# What the report views say: whole words, missing figures named, install commands, clocks


def test_notes_are_never_cut_mid_word() -> None:
    """A long note ends at a sentence or word, never "... Collect the SpeedO"."""
    rf = summaries.report_summary(H200_REPORT).actions[0].roofline
    assert rf is not None and rf.notes
    assert rf.notes[0].endswith("SpeedOfLight_HierarchicalTensorRooflineChart section.")
    long = "A first sentence that is long enough to end near the cut. " + "word " * 60
    assert common.clip(long, 70) == "A first sentence that is long enough to end near the cut. ..."
    assert common.clip("Short one. " + "word " * 60, 70).startswith("Short one. word word")
    words = common.clip("alpha " * 40, 50)
    assert words.endswith("...") and all(w == "alpha" for w in words[:-3].split())


def test_figures_the_report_lacks_are_left_out_with_the_reason() -> None:
    """The bf16 matmul's report holds no tensor op counters: its roofline line says the
    FLOP/s and the share of the roofline are not in it and what to collect, never "0 FLOP/s,
    -% of roofline"."""
    s = summaries.report_summary(H200_REPORT)
    rf = s.actions[0].roofline
    assert rf is not None
    assert rf.achieved_flop_per_s is None and rf.pct_of_roofline is None
    assert rf.arithmetic_intensity is None
    line = text.roofline_line(rf)
    assert line.startswith("compute-bound: DRAM 256 GB/s (5.33% of peak)")
    assert "; FLOP/s and % of roofline not in the report (collect " in line
    shown = text.render_report(s)
    assert "0 FLOP/s" not in shown and "-% of roofline" not in shown


def test_a_kernel_with_counted_flop_keeps_them() -> None:
    s = summaries.report_summary(FIXTURES / "planted" / "control_fma_cuda.ncu-rep")
    rf = s.actions[0].roofline
    assert rf is not None and rf.achieved_flop_per_s and rf.achieved_flop_per_s > 0
    assert "FLOP/s" in text.roofline_line(rf).split("(")[0]


def test_diagnosis_text_names_each_causes_skill() -> None:
    from nsight_agent.service.diagnose import diagnose_file

    d = diagnose_file(FIXTURES / "planted" / "uncoalesced_triton.ncu-rep")
    cause = d.kernels[0].diagnosis.causes[0]
    assert (
        f"skill: {cause.skill} (get_skill({cause.skill!r}) explains it)" in text.render_diagnosis(d)
    )


def test_device_text_says_what_to_install_and_draws_the_pool() -> None:
    """A missing torch comes with the command that installs it, and the pool is drawn, not
    printed as a Python dict."""
    from nsight_agent.engine import device
    from nsight_agent.views import device as device_views

    info = device.DeviceInfo(
        host="h",
        python="3.11",
        gpus=[],
        counters=device.CounterAccess(permitted="unknown", how="no GPU"),
        packages={"torch": "not installed", "triton": "3.9.0"},
        unknown=[],
        can_profile=False,
        pool={
            "executor": "local",
            "slots": [{"device": "cuda:0", "state": "busy", "job": "profile", "jobs_done": 2}],
            "gpus": 1,
            "running": 1,
            "queued": 0,
        },
    )
    shown = device_views.render_device(info)
    assert "install torch (runs every kernel, in every language): pip install torch" in shown
    assert "install ncu: install Nsight Compute" in shown and "triton:" not in shown
    assert "pool (local): gpus 1, running 1, queued 0" in shown
    assert "  slot 0: device cuda:0, state busy, job profile, jobs done 2" in shown
    assert "{" not in shown


def _cpu_timing_run(n: int) -> Any:
    import pandas as pd

    from nsight_agent.request import ProfileRequest

    frame = pd.DataFrame(
        [
            {
                "Annotation": "run", "Metric": TIME, "n": 1000, "AvgValue": 4e4, "StdDev": 1e3,
                "MinValue": 3.9e4, "MaxValue": 4.2e4, "NumRuns": n, "RelativeStdDevPct": 1.0,
                "StableMeasurement": True, "Unit": "ns", "Method": "perf_counter",
            }
        ]
    )  # fmt: skip
    request = ProfileRequest(source="x = 1\n", configs=[{"n": 1000}], language="torch", runs=5)

    return SimpleNamespace(
        run_id="r",
        run_dir=Path("."),
        request=request,
        processed=frame,
        raw=frame,
        checks=[],
        kernels={"run": []},
        warnings=[
            "the L2 cache was not flushed between runs",
            "measured by perf_counter (no ncu, no counters)",
        ],
        artifacts={},
        seconds=1.0,
        facts=RunFacts(method="perf_counter"),
        dropped={},
        suspects=[],
        preflight=None,
    )


def test_a_cpu_timing_is_labelled_honestly() -> None:
    """A CPU timing says it was measured by perf_counter, carries no L2 warning (none applies
    on a CPU), and says why it holds more samples than runs."""
    s = summaries.profile_summary(_cpu_timing_run(39))
    warnings = s.warnings or []
    assert warnings[0].startswith("measured by perf_counter on the CPU")
    assert not any("L2 cache was not flushed" in w for w in warnings)
    assert not any("Clocks not locked" in w for w in warnings)
    why = next(w for w in warnings if w.startswith("n is 39 timed runs, not runs=5"))
    assert "at least 5" in why and "95% CI" in why
    assert not any(
        w.startswith("n is") for w in summaries.profile_summary(_cpu_timing_run(5)).warnings or []
    )
    shown = text.render_table(s, {TIME: "CPU time (perf_counter)"})
    assert "CPU time (perf_counter)" in shown and TIME not in shown.splitlines()[1]


def test_the_timing_rule_quoted_is_the_engines() -> None:
    from nsight_agent.engine.worker.timing import TimingOptions

    opts = TimingOptions()
    assert (opts.max_runs, opts.max_seconds, opts.ci_target_pct) == (
        run_warnings.TIMING_MAX_RUNS,
        run_warnings.TIMING_MAX_SECONDS,
        run_warnings.TIMING_CI_TARGET_PCT,
    )


def test_ncus_rules_not_taken_as_causes_are_shown_not_hidden() -> None:
    """atomic_triton: ncu's Tail Effect (25 %) is not one of its causes; the text says so
    rather than dropping it (the JSON always carried it in ``unmapped``)."""
    from rich.console import Console

    from nsight_agent.cli import tables
    from nsight_agent.service.diagnose import diagnose_file

    d = diagnose_file(FIXTURES / "planted" / "atomic_triton.ncu-rep")
    unmapped = d.kernels[0].diagnosis.unmapped
    assert unmapped == ["LaunchConfiguration: Tail Effect (25%)"]
    assert f"ncu also flagged: {unmapped[0]}" in text.render_diagnosis(d)
    console = Console(width=200, record=True)
    console.print(tables.diagnosis(d))
    assert f"ncu also flagged: {unmapped[0]}" in console.export_text()
