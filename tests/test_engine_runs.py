"""The run store: collision-free ids, status records, sources stored once, failed runs read
back, storage errors with hints, only run folders listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsight_agent.engine.store import run_status, runs
from nsight_agent.errors import (
    CollectionTimeoutError,
    InvalidRequestError,
    RunIdCollisionError,
    RunsRootNotAFolderError,
)
from nsight_agent.request import ProfileRequest
from nsight_agent.service import runs as run_store

SOURCE = "def setup(n, device):\n    return ()\n\ndef run():\n    return None\n"


def request(**kwargs: object) -> ProfileRequest:
    return ProfileRequest.model_validate({"source": SOURCE, "configs": {"n": [1]}, **kwargs})


def test_ids_are_unique_and_a_collision_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = {runs.new_run_dir(tmp_path)[0] for _ in range(50)}
    assert len(ids) == 50
    taken = sorted(ids)[0]
    fresh = iter([taken, taken, "20990101-000000-000000000000"])
    monkeypatch.setattr(runs, "new_run_id", lambda: next(fresh))
    assert runs.new_run_dir(tmp_path)[0] == "20990101-000000-000000000000"
    monkeypatch.setattr(runs, "new_run_id", lambda: taken)
    with pytest.raises(RunIdCollisionError, match="No free run id"):
        runs.new_run_dir(tmp_path)


def test_runs_root_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(RunsRootNotAFolderError, match="is a file"):
        runs.new_run_dir(tmp_path / "f" / "runs")


def test_status_goes_from_running_to_timed_out_and_the_error_names_the_run(
    tmp_path: Path,
) -> None:
    run_id, run_dir = runs.new_run_dir(tmp_path)
    assert run_status.read_status(run_dir)["status"] == "running"  # type: ignore[index]
    with (
        pytest.raises(CollectionTimeoutError) as info,
        run_status.run_record(run_dir, run_id) as record,
    ):
        runs.write_request(run_dir, request())
        (run_dir / "user_source.py").write_text(SOURCE)
        record.stage("pre-flight")
        raise CollectionTimeoutError("ran past 10 s", "raise it")
    assert f"(run {run_id})" in str(info.value) and info.value.run_id == run_id  # type: ignore[attr-defined]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "timed_out" and status["stage"] == "pre-flight"
    failed = runs.load_run(run_id, tmp_path)
    assert failed.status == "timed_out" and failed.processed.empty
    assert "ran past 10 s" in failed.warnings[0] and "status" in failed.artifacts
    assert failed.request.source == SOURCE


def test_sources_are_stored_once(tmp_path: Path) -> None:
    big = SOURCE + "#" * 100_000
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    runs.write_request(run_dir, request(source=big, variants=[{"name": "a"}, {"name": "b"}]))
    (run_dir / "user_source.py").write_text(big)
    assert (run_dir / "request.json").stat().st_size < 5000
    assert runs.read_request(run_dir).source == big


@pytest.mark.parametrize("bad", ["../x", "/etc", ".cuda-cache", "", "a/b", "x" * 200, "a b"])
def test_malformed_run_ids(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InvalidRequestError, match="malformed run id"):
        runs.load_run(bad, tmp_path)


def test_only_run_folders_are_listed(tmp_path: Path) -> None:
    run_id, _ = runs.new_run_dir(tmp_path)
    (tmp_path / ".cuda-cache").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "file.txt").write_text("x")
    listed = run_store.list_runs(tmp_path)
    assert listed["runs"] == [run_id] and listed["status"] == {run_id: "running"}


def test_the_runs_folder_follows_the_cache_convention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nsight_agent.engine.store.runs import default_runs_root

    monkeypatch.delenv("NSIGHT_AGENT_RUNS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_runs_root() == tmp_path / "xdg" / "nsight-agent" / "runs"
    monkeypatch.setenv("NSIGHT_AGENT_RUNS", str(tmp_path / "mine"))
    assert default_runs_root() == tmp_path / "mine"


def test_the_status_says_how_long_each_stage_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a slow run's time went (KernelBench's level-1 problems took 16-36 s each on the
    H200 and nothing said where): wall seconds per stage, also for a stage entered twice."""
    clock = iter([0.0, 0.5, 2.5, 10.0, 10.25, 11.0])
    monkeypatch.setattr(run_status.time, "monotonic", lambda: next(clock))
    record = run_status.RunRecord(tmp_path, "r1")  # 0.0
    record.stage("pre-flight")  # 0.5
    record.stage("timing")  # 2.5
    record.stage("pre-flight")  # 10.0
    record.stage("check")  # 10.25
    record.passed()  # 11.0
    status = run_status.read_status(tmp_path)
    assert status is not None and status["status"] == "passed"
    assert status["stage_seconds"] == {
        "created": 0.5,
        "pre-flight": 2.25,
        "timing": 7.5,
        "check": 0.75,
    }
