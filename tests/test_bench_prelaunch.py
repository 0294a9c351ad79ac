"""bench/prelaunch.py's reading of where a diagnosis's seconds go: each run its answer names,
with the stage seconds of that run's status record."""

from __future__ import annotations

from pathlib import Path

from bench.prelaunch import Server
from nsight_agent.engine.store.run_status import write_status


def test_each_pass_of_an_answer_is_read_with_its_runs_stage_seconds(tmp_path: Path) -> None:
    (tmp_path / "20261204-1").mkdir()
    write_status(
        tmp_path / "20261204-1", "20261204-1", "passed", stage_seconds={"ncu": 3.2, "save": 0.01}
    )
    answer = {"passes": ["one pass (run 20261204-1): SpeedOfLight", "timing (run gone-2): one"]}
    assert Server(None, "warm", tmp_path).stages(answer) == {  # type: ignore[arg-type]
        "one pass": {"ncu": 3.2, "save": 0.01},
        "timing": None,  # a run the bench cannot read (not in this runs folder)
    }
    assert Server(None, "warm").stages(answer) == {}  # type: ignore[arg-type]


def test_each_by_name_side_is_compared_with_the_same_kernels_profile() -> None:
    from bench.prelaunch import headline, summary

    times = {"floor": [6.0], "prelaunched": [3.0], "triton": [3.0], "diagnose": [9.0]}
    out = {"times": {**times, "diagnose_tables": [6.6], "diagnose_counters": [5.1]}}
    said = summary({**out, "paths": {"burst": []}})
    assert said["diagnose_over_same_kernel"] == 3.0
    assert said["diagnose_tables_over_same_kernel"] == 2.2
    assert said["diagnose_counters_over_same_kernel"] == 1.7
    alone = summary({"times": times, "paths": {"burst": []}})
    assert alone["diagnose_tables_over_same_kernel"] is None
    assert alone["diagnose_counters_over_same_kernel"] is None
    assert (
        headline({"kernels": [{"diagnosis": {"headline": "memory-bound: x"}}]}) == "memory-bound: x"
    )
    assert headline({}) is None


def test_the_section_rows_ask_for_each_section_once_and_the_one_pass_as_it_is_sent() -> None:
    """Every row a profile_kernel ncu accepts: no section twice; the by-name rows are the one
    pass diagnose_kernel sends for that choice (service/diagnose.one_pass)."""
    from bench.prelaunch import section_sets
    from nsight_agent.service.diagnose import FIRST_PASS_METRICS, ONE_PASS_SECTIONS, one_pass

    rows = {label: (metrics, sections) for label, metrics, sections in section_sets()}
    assert all(len(set(s)) == len(s) and len(set(m)) == len(m) for m, s in rows.values())
    assert rows["all"][1] == ONE_PASS_SECTIONS
    without = [label for label in rows if label.startswith("without ")]
    assert len(without) == len(ONE_PASS_SECTIONS)
    for choice, label in (
        ("tables", "the one pass, the tables by name"),
        ("counters", "the one pass, every counter section by name"),
    ):
        sections, counters = one_pass(choice)  # type: ignore[arg-type]
        assert rows[label] == ([*FIRST_PASS_METRICS, *counters], sections)
    assert "MemoryWorkloadAnalysis_Tables" not in rows["all but the tables, time and DRAM"][1]
