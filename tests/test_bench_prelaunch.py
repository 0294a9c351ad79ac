"""bench/prelaunch.py's reading of where a diagnosis's seconds go: each run its answer names,
with the stage seconds of that run's status record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.prelaunch import Server, stamps_since, target_stamps
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


def test_a_process_started_as_a_target_under_the_stamping_environment_stamps_its_steps(
    tmp_path: Path,
) -> None:
    """The prelaunch server's environment puts the probe's sitecustomize first on a target's
    path: a process started as a target stamps its steps in the file (here only its exit),
    any other process started with it stamps nothing."""
    env, stamped = target_stamps()
    stamped.write_text("")
    since = time.time()
    as_target = [sys.executable, "-c", "pass", "nsight_agent.engine.worker.target"]
    for argv in (as_target, [sys.executable, "-c", "pass"]):
        subprocess.run(argv, env={**os.environ, **env}, check=True, cwd=tmp_path)
    events = stamps_since(stamped, since)
    assert [(e["who"], e["what"]) for e in events] == [("target", "last atexit")], events
    assert 0.0 <= events[0]["t"] < 60.0


def test_the_stamps_are_read_in_order_in_seconds_after_the_call(tmp_path: Path) -> None:
    stamped = tmp_path / "events.jsonl"
    lines = [{"t": 102.5, "who": "target", "what": "CUDA up"}, {"t": 100.25, "what": "hand"}]
    stamped.write_text("".join(json.dumps(line) + "\n" for line in lines) + "\n")
    assert [(e["what"], e["t"]) for e in stamps_since(stamped, 100.0)] == [
        ("hand", 0.25),
        ("CUDA up", 2.5),
    ]
    assert stamps_since(tmp_path / "absent.jsonl", 100.0) == []


def test_the_first_call_probe_spans_two_steps_from_their_first_stamps() -> None:
    from bench.probes.first_call import _span

    events = [
        {"t": 0.45, "what": "first CUDA call"},
        {"t": 1.0, "what": "first CUDA call"},  # torch's lazy init asked again: not the span
        {"t": 1.3, "what": "markers: BEGIN launching"},
        {"t": 3.7, "what": "markers: call starts"},
    ]
    assert _span(events, "markers: BEGIN launching", "markers: call starts") == 2.4
    assert _span(events, "first CUDA call", "markers: call starts") == 3.25
    assert _span(events, "harness start", "markers: call starts") is None
