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
