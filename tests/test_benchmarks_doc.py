"""docs/BENCHMARKS.md is generated from bench/results: the committed file is what the script
builds, every figure cites a results file that exists, and each suite's tables read a run
that was cut short or skipped without failing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import benchmarks_doc, results, section_costs, suites
from bench.__main__ import main

ROOT = Path(__file__).resolve().parent.parent
ENV = {
    "date": "2026-01-02 03:04 UTC",
    "commit": "abcdef1",
    "gpu": "NVIDIA H100 80GB HBM3",
    "driver": "580.1",
    "ncu": "Version 2025.3.1.0 (build 1)",
    "python": "3.12.3",
    "torch": "2.11.0",
}


def test_the_committed_doc_is_what_the_results_build() -> None:
    built = benchmarks_doc.build(results.RESULTS)
    assert benchmarks_doc.DOC.read_text() == built, "stale: run `python -m bench docs`"


def test_the_check_option_says_when_the_doc_is_stale(tmp_path: Path) -> None:
    doc = tmp_path / "BENCHMARKS.md"
    assert main(["docs", "--out", str(doc), "--check"]) == 1
    assert main(["docs", "--out", str(doc)]) == 0
    assert main(["docs", "--out", str(doc), "--check"]) == 0


def test_every_figure_cites_a_results_file_that_exists() -> None:
    text = benchmarks_doc.DOC.read_text()
    sections = text.split("\n## ")[1:]
    assert sections
    for section in sections:
        cited = re.findall(r"\(\.\./(bench/results/[^)]+\.json)\)", section)
        assert len(cited) == 1, section.splitlines()[0]
        assert (ROOT / cited[0]).is_file()
        assert cited[0].split("/")[2] == section.splitlines()[0]  # its own suite's folder


def test_the_newest_file_of_a_suite_is_the_one_read(tmp_path: Path) -> None:
    older = {**ENV, "date": "2025-12-31 00:00 UTC"}
    results.write("examples", {"examples": [], "passed": 0}, tmp_path, env=older)
    newer = results.write("examples", {"examples": [], "passed": 0}, tmp_path, env=ENV)
    text = benchmarks_doc.build(tmp_path)
    assert f"bench/results/examples/{newer.name}" in text
    assert "2025-12-31" not in text
    assert "No results yet: `gpu-tests`, `gpu-faults`, `conformance`, `mcp-session`" in text
    assert "NVIDIA H100 80GB HBM3, driver 580.1, ncu 2025.3.1.0; commit `abcdef1`" in text


CUT = {"run": {"rc": 124, "seconds": 300.0, "limit_s": 300, "tail": ""}, "results": None}
# Suites of one bench script: a run cut before it wrote its figures says so.
ONE_SCRIPT = (
    "adversarial",
    "effect-size",
    "baseline-drift",
    "gate-under-load",
    "perf",
    "prelaunch",
    "section-costs",
    "ray",
)


@pytest.mark.parametrize("suite", list(suites.SUITES))
@pytest.mark.parametrize(
    "payload", [{"skipped": "no checkout"}, CUT, {}], ids=["skipped", "cut", "empty"]
)
def test_each_suite_reads_a_run_cut_short_or_skipped(
    tmp_path: Path, suite: str, payload: dict
) -> None:  # type: ignore[type-arg]
    path = results.write(suite, dict(payload), tmp_path, env=ENV)
    text = benchmarks_doc.section(suite, path)
    assert text.startswith(f"## {suite}") and path.name in text
    if payload is CUT and suite in ONE_SCRIPT:
        assert "cut at its limit after 300.0 s (limit 300 s); it wrote no figures" in text


def test_section_costs_render_as_the_bench_derives_them(tmp_path: Path) -> None:
    rows = [
        {
            "label": "floor",
            "sections": [],
            "calls": 1,
            "wall_s": 6.0,
            "ncu_s": 5.0,
            "ncu_kernels": 1,
            "ncu_passes": 1,
        },
        {
            "label": "one_pass",
            "sections": ["A"],
            "calls": 1,
            "wall_s": 9.0,
            "ncu_s": 8.0,
            "ncu_kernels": 1,
            "ncu_passes": 30,
        },
        {
            "label": "one_pass",
            "sections": ["A"],
            "calls": 5,
            "wall_s": 14.0,
            "ncu_s": 13.0,
            "ncu_kernels": 5,
            "ncu_passes": 150,
        },
    ]
    found = {"entry": "run_sfu", "rows": rows, "derived": section_costs.derived(rows)}
    path = results.write(
        "section-costs", {"run": {"rc": 0, "seconds": 40.0}, "results": found}, tmp_path, env=ENV
    )
    text = benchmarks_doc.section("section-costs", path)
    assert "| one_pass | 5 | 14 | 13 | 150 |" in text
    assert f"A replay pass of one kernel: {round(5.0 / 120, 4)} s." in text


def test_the_recorded_sweep_is_a_results_file_with_the_environment_it_recorded() -> None:
    path = results.newest("kernelbench-sweep")
    assert path is not None
    data = json.loads(path.read_text())
    env, meta = data["environment"], data["meta"]
    assert (env["date"], env["commit"], env["ncu"]) == (meta["date"], meta["commit"], meta["ncu"])
    assert f"{env['gpu']}, {env['driver']}" == meta["gpu"]
    assert path.name == results.file_name(env)


def test_the_peer_columns_line_names_what_is_missing_added_and_reordered() -> None:
    from bench.doc_tables_measures import columns_line

    peer = ["Annotation", "AvgValue", "Geomean"]
    assert columns_line([*peer, "MedianValue"], peer) == (
        "nsight-python 0.9.6's DataFrame columns: 3 of 3 in ours, in its order; "
        "ours adds MedianValue."
    )
    said = columns_line(["AvgValue", "Annotation"], peer)
    assert "2 of 3" in said and "in another order" in said and "missing: Geomean" in said
    assert columns_line([], peer) == "DataFrame columns: not recorded."


def test_the_prelaunch_table_shows_the_first_servers_connect_where_it_was_timed() -> None:
    """A server waits for its warm-up before it answers: the connect that waited stands
    beside its first call, and within it the warm-up's own ncu run (older results, which did
    not time them, show no such rows)."""
    from bench import doc_tables_measures

    path = results.newest("prelaunch")
    assert path is not None
    data = json.loads(path.read_text())
    row = "that server's connect: process start to initialize answered"
    data["results"]["first_call"].pop("connect_s", None)
    assert row not in "\n".join(doc_tables_measures.prelaunch(data))
    data["results"]["first_call"]["connect_s"] = 5.4
    text = "\n".join(doc_tables_measures.prelaunch(data))
    assert f"| {row} | 5.4 s | - |  |" in text
    assert text.index(row) < text.index("a server's first profile_kernel")
    paid = "within that connect, the warm-up's ncu run of one empty kernel"
    first = data["results"]["first_call"]
    first.pop("warm_up_first_ncu", None)
    assert paid not in "\n".join(doc_tables_measures.prelaunch(data))
    first["warm_up_first_ncu"] = {"seconds": 3.25, "ok": True, "why": ""}
    text = "\n".join(doc_tables_measures.prelaunch(data))
    assert f"| {paid} | 3.25 s | - |  |" in text
    assert text.index(row) < text.index(paid) < text.index("a server's first profile_kernel")
    first["warm_up_first_ncu"] = {"seconds": 0.4, "ok": False, "why": "exit 1: no GPU"}
    assert f"| {paid} | 0.4 s | - | failed: exit 1: no GPU |" in "\n".join(
        doc_tables_measures.prelaunch(data)
    )
    thrown = "within that connect, the warm-up's throwaway profile"
    first.pop("warm_up_first_profile", None)
    assert thrown not in "\n".join(doc_tables_measures.prelaunch(data))
    first["warm_up_first_profile"] = {"seconds": 3.1, "ok": True, "why": "", "path": "pre-launched"}
    text = "\n".join(doc_tables_measures.prelaunch(data))
    assert f"| {thrown} | 3.1 s | - | pre-launched |" in text
    assert text.index(paid) < text.index(thrown) < text.index("a server's first profile_kernel")


def test_the_prelaunch_section_splits_a_prelaunched_profile_where_the_probe_ran() -> None:
    from bench import doc_tables_measures

    path = results.newest("prelaunch")
    assert path is not None
    data = json.loads(path.read_text())
    data.pop("attach_time", None)
    assert "Step `attach_time`" not in "\n".join(doc_tables_measures.prelaunch(data))
    medians = {"wall": 2.7, "CUDA up to the harness's end": 1.535}
    data["attach_time"] = {
        "run": {"rc": 0, "seconds": 50.0, "limit_s": 120},
        "results": {"medians_s": medians},
    }
    text = "\n".join(doc_tables_measures.prelaunch(data))
    assert "Step `attach_time`: exit 0 in 50.0 s (limit 120 s)." in text
    assert "| CUDA up to the harness's end | 1.53 s |" in text


def test_the_prelaunch_section_sets_the_first_calls_stages_beside_the_later_ones() -> None:
    """Where the first profile's run was split by stage, each stage stands beside the median
    of the later pre-launched runs' same stage; older results show no such table."""
    from bench import doc_tables_measures

    path = results.newest("prelaunch")
    assert path is not None
    data = json.loads(path.read_text())
    found = data["results"]
    found["first_call"].pop("stages", None)
    head = "| stage of the run | the first profile_kernel |"
    assert head not in "\n".join(doc_tables_measures.prelaunch(data))
    found["first_call"]["stages"] = {"run": {"pre-flight": 2.5, "ncu": 3.25}}
    found["prelaunched_stages"] = [
        {"run": {"pre-flight": 0.1, "ncu": 2.0}},
        {"run": {"pre-flight": 0.3, "ncu": 2.5}},
    ]
    text = "\n".join(doc_tables_measures.prelaunch(data))
    assert head in text
    assert "| pre-flight | 2.5 s | 0.2 s |" in text
    assert "| ncu | 3.25 s | 2.25 s |" in text


def test_the_prelaunch_section_sets_the_first_calls_target_steps_beside_a_later_ones() -> None:
    """Each of the target's steps, when it first began after the call, in the first profile
    and in a later one; no table where either was not stamped."""
    from bench import doc_tables_measures

    path = results.newest("prelaunch")
    assert path is not None
    data = json.loads(path.read_text())
    found = data["results"]
    head = "| the target's step, from the call | the first profile_kernel | a later one |"
    found["first_call"].pop("target_events", None)
    found["later_target_events"] = [{"t": 0.3, "who": "target", "what": "harness start"}]
    assert head not in "\n".join(doc_tables_measures.prelaunch(data))
    found["first_call"]["target_events"] = [
        {"t": 0.5, "who": "target", "what": "harness start"},
        {"t": 1.25, "who": "target", "what": "first CUDA call"},
        {"t": 3.5, "who": "target", "what": "first CUDA call"},  # a later thread's: not shown
    ]
    text = "\n".join(doc_tables_measures.prelaunch(data))
    assert head in text
    assert "| harness start | 0.5 s | 0.3 s |" in text
    assert "| first CUDA call | 1.25 s | - |" in text and "| first CUDA call | 3.5" not in text
