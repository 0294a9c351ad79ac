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


def test_the_tables_by_name_side_is_compared_with_the_same_kernels_profile() -> None:
    from bench.prelaunch import headline, summary

    times = {"floor": [6.0], "prelaunched": [3.0], "triton": [3.0], "diagnose": [9.0]}
    out = {"times": {**times, "diagnose_names": [6.6]}, "paths": {"burst": []}}
    said = summary(out)
    assert said["diagnose_over_same_kernel"] == 3.0
    assert said["diagnose_names_over_same_kernel"] == 2.2
    assert (
        summary({"times": times, "paths": {"burst": []}})["diagnose_names_over_same_kernel"] is None
    )
    assert (
        headline({"kernels": [{"diagnosis": {"headline": "memory-bound: x"}}]}) == "memory-bound: x"
    )
    assert headline({}) is None
