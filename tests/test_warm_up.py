"""A server warms its first target and worker at start on a machine that can profile, so its
first profile is served as its later ones are; elsewhere it starts nothing."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from nsight_agent.engine.executors.base import Executor
from nsight_agent.engine.executors.local import LocalExecutor
from nsight_agent.errors import NcuNotFoundError
from nsight_agent.service import session as sessions
from nsight_agent.service.measure import WorkerPool


class _Recording(Executor):
    name = "recording"

    def __init__(self) -> None:
        self.warmed = threading.Event()

    def submit(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("nothing is submitted at start")

    def pool_info(self) -> dict[str, Any]:
        return {}

    def warm_up(self) -> None:
        self.warmed.set()


def _session(tmp_path: Path, executor: Executor) -> sessions.Session:
    return sessions.Session(runs_root=tmp_path, executor=executor, workers=WorkerPool())


def test_no_gpu_no_warm_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions.pinning, "has_gpu", lambda: False)
    executor = _Recording()
    session = _session(tmp_path, executor)
    assert session.warm_up() is None
    session.close()
    assert not executor.warmed.is_set()


def test_no_ncu_no_warm_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> str:
        raise NcuNotFoundError("ncu was not found", "install it")

    monkeypatch.setattr(sessions.pinning, "has_gpu", lambda: True)
    monkeypatch.setattr(sessions.ncu, "find_ncu", missing)
    executor = _Recording()
    session = _session(tmp_path, executor)
    assert session.warm_up() is None
    assert not executor.warmed.is_set()


def test_gpu_and_ncu_warm_the_executor_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sessions.pinning, "has_gpu", lambda: True)
    monkeypatch.setattr(sessions.ncu, "find_ncu", lambda: "/usr/bin/ncu")
    executor = _Recording()
    session = _session(tmp_path, executor)
    thread = session.warm_up()
    assert thread is not None
    session.close(thread)
    assert not thread.is_alive()
    assert executor.warmed.is_set()


class _Workers:
    """Stands in for the warm workers: which device each start was asked for."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def get(self, device: str) -> Any:
        started = self.started

        class _Worker:
            def start(self) -> None:
                started.append(device)

        return _Worker()


def test_local_executor_starts_a_worker_per_gpu_slot_only() -> None:
    workers = _Workers()
    executor = LocalExecutor(
        ["GPU-a", "GPU-b", "cpu"],
        job_function=lambda *a, **k: None,
        workers=workers,  # type: ignore[arg-type]
    )
    try:
        executor.warm_up()
    finally:
        executor.close()
    assert workers.started == ["cuda:0", "cuda:1"]
