"""Retention of the run store: the newest runs stay, within a count and a size."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nsight_agent.engine.store import retention


def make_run(root: Path, name: str, age: int, size: int, status: str = "passed") -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "request.json").write_text("{}")
    (run / "status.json").write_text(json.dumps({"status": status}))
    (run / "report.ncu-rep").write_bytes(b"x" * size)
    os.utime(run, (10_000 - age, 10_000 - age))
    return run


def test_keeps_the_newest_by_count_and_size(tmp_path: Path) -> None:
    for i in range(5):
        make_run(tmp_path, f"r{i}", age=i, size=1000)
    (tmp_path / ".cuda-cache").mkdir()
    (tmp_path / "not-a-run").mkdir()
    assert [d.name for d in retention.run_folders(tmp_path)] == ["r0", "r1", "r2", "r3", "r4"]
    out = retention.prune(tmp_path, keep=3, max_gb=1.0)
    assert sorted(out.removed) == ["r3", "r4"] and out.kept == 3 and out.freed_bytes > 2000
    out = retention.prune(tmp_path, keep=10, max_gb=2500 / 1e9)  # room for two runs
    assert out.removed == ["r2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".cuda-cache", "not-a-run", "r0", "r1"]


def test_a_running_run_is_never_removed(tmp_path: Path) -> None:
    make_run(tmp_path, "new", age=0, size=10)
    make_run(tmp_path, "busy", age=5, size=10, status="running")
    assert retention.prune(tmp_path, keep=1, max_gb=1.0).removed == []


def test_policy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NSIGHT_AGENT_KEEP_RUNS", "7")
    monkeypatch.setenv("NSIGHT_AGENT_KEEP_GB", "0.5")
    assert retention.policy() == (7, 0.5)
    monkeypatch.setenv("NSIGHT_AGENT_KEEP_RUNS", "many")
    assert retention.policy() == (retention.DEFAULT_KEEP, retention.DEFAULT_MAX_GB)
