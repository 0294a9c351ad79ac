"""A server warms its first target and worker at start on a machine that can profile, and
answers once they are up (within NSIGHT_AGENT_WARM_WAIT_S), so its first profile is served as
its later ones are; elsewhere it starts nothing and answers at once."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server import MCPServer

from nsight_agent.engine import process
from nsight_agent.engine.collection import ncu
from nsight_agent.engine.executors import build_ahead
from nsight_agent.engine.executors.base import Executor
from nsight_agent.engine.executors.local import LocalExecutor
from nsight_agent.engine.worker import first_ncu
from nsight_agent.errors import InvalidRequestError, NcuNotFoundError
from nsight_agent.server.app import build_server
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


class _Slow(_Recording):
    """An executor whose warm-up ends only when the test releases it."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def warm_up(self) -> None:
        self.release.wait(60)
        self.warmed.set()


def _serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wait: str, executor: _Slow
) -> MCPServer[Any]:
    monkeypatch.setenv(sessions.WARM_WAIT_ENV, wait)
    monkeypatch.setattr(sessions.pinning, "has_gpu", lambda: True)
    monkeypatch.setattr(sessions.ncu, "find_ncu", lambda: "/usr/bin/ncu")
    monkeypatch.setattr(sessions, "open_session", lambda *a: _session(tmp_path, executor))
    return build_server(tmp_path / "runs")


@pytest.mark.anyio
async def test_a_server_answers_once_its_warm_up_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client's initialize waits for the warm-up (the first profile then finds a worker
    and a pre-launched target ready), released here from a thread after a moment."""
    executor = _Slow()
    server = _serving(tmp_path, monkeypatch, "30", executor)
    threading.Timer(0.5, executor.release.set).start()
    async with Client(server) as client:
        assert executor.warmed.is_set()
        assert (await client.list_tools()).tools


@pytest.mark.anyio
@pytest.mark.parametrize("wait", ["0", "0.5"])
async def test_a_server_told_not_to_wait_or_out_of_time_answers_before_its_warm_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wait: str
) -> None:
    """0: it answers at once and warms in the background; a warm-up past the wait does not
    hold the server beyond it."""
    executor = _Slow()
    server = _serving(tmp_path, monkeypatch, wait, executor)
    async with Client(server) as client:
        warmed_at_start = executor.warmed.is_set()
        executor.release.set()  # the server's end waits for a warm-up still starting
        assert not warmed_at_start
        assert (await client.list_tools()).tools


@pytest.mark.parametrize(
    ("value", "seconds"), [("", 25.0), ("0", 0.0), (" 12.5 ", 12.5), ("-1", None), ("soon", None)]
)
def test_the_warm_wait_setting(value: str, seconds: float | None) -> None:
    if seconds is not None:
        assert sessions.warm_wait_s(value) == seconds
        return
    with pytest.raises(InvalidRequestError) as err:
        sessions.warm_wait_s(value)
    assert sessions.WARM_WAIT_ENV in err.value.message and "=0" in err.value.hint


def test_targets_turned_off_are_settled_not_still_warming(tmp_path: Path) -> None:
    """A slot told to keep no targets (or without ncu) serves its profiles cold and says why:
    the warm wait counts it as done, and the session names why in its start-up line."""
    with LocalExecutor(["cpu"], targets=0) as executor:
        executor.start_targets()
        assert executor.wait_warm(5.0)
        assert _session(tmp_path, executor).slots_said() == "slot cpu: off: NSIGHT_AGENT_TARGETS=0"


@pytest.mark.anyio
async def test_the_warm_up_line_names_each_slots_targets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    executor = _Slow()
    executor.release.set()
    monkeypatch.setattr(
        executor,
        "pool_info",
        lambda: {"slots": [{"device": "0", "targets": "1 ready", "first_ncu": FIRST}]},
    )
    server = _serving(tmp_path, monkeypatch, "30", executor)
    with caplog.at_level("INFO", logger="nsight_agent"):
        async with Client(server) as client:
            assert (await client.list_tools()).tools
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("warm-up:")]
    assert len(said) == 1 and said[0].endswith("s (slot 0: 1 ready, first ncu run 1.9 s)"), said


FIRST = {"seconds": 1.94, "ok": True, "why": ""}


def _fake_ncu(tmp_path: Path, body: str) -> Path:
    ncu = tmp_path / "ncu"
    ncu.write_text(f"#!/bin/sh\n{body}\n")
    ncu.chmod(0o755)
    return ncu


def test_the_first_ncu_run_profiles_one_kernel_program_for_the_time_metric(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warm-up's ncu run: the time metric, every process, our interpreter on the
    one-kernel program, on the slot's GPU."""
    seen = tmp_path / "seen"
    monkeypatch.setenv("NCU", str(_fake_ncu(tmp_path, f'echo "$@" > {seen}; env >> {seen}')))
    done = first_ncu.pay("1")
    assert done.ok and done.said().startswith("first ncu run "), done
    argv, *env = seen.read_text().splitlines()
    assert argv.startswith("--metrics gpu__time_duration.sum --target-processes all ")
    assert f"{sys.executable} -c " in argv and "cuda_early.bring_up('warmup')" in argv
    assert "CUDA_VISIBLE_DEVICES=1" in env


def test_a_first_ncu_run_that_fails_says_why_and_raises_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NCU", str(_fake_ncu(tmp_path, "echo '==ERROR== no GPU' >&2; exit 1")))
    done = first_ncu.pay("0")
    assert not done.ok and done.said().endswith(": exit 1: ==ERROR== no GPU"), done
    monkeypatch.setattr(first_ncu.ncu, "find_ncu", _no_ncu)
    assert "was not found" in first_ncu.pay("0").why


def _no_ncu() -> str:
    raise NcuNotFoundError("ncu was not found", "install it")


def test_the_warm_up_runs_ncu_once_per_gpu_slot_and_shows_it_in_the_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    paid: list[str] = []

    def pay(slot: str) -> first_ncu.FirstRun:
        paid.append(slot)
        return first_ncu.FirstRun(**FIRST)

    monkeypatch.setattr(first_ncu, "pay", pay)
    monkeypatch.setenv(build_ahead.ENABLE_ENV, "0")  # no torch headers precompiled here
    with LocalExecutor(["0", "1"], targets=0) as executor:
        executor.warm_up()
        rows = executor.pool_info()["slots"]
    assert sorted(paid) == ["0", "1"]
    assert [r["first_ncu"] for r in rows] == [FIRST, FIRST]
    with LocalExecutor(["cpu"], targets=0) as executor:  # nothing of the kind without a GPU
        executor.warm_up()
        assert "first_ncu" not in executor.pool_info()["slots"][0]
    assert sorted(paid) == ["0", "1"]


@pytest.mark.gpu
def test_on_a_gpu_the_first_ncu_run_profiles_its_empty_kernel() -> None:
    """The one-kernel program runs under the real ncu: the driver compiles and launches the
    empty kernel, and ncu profiles it (its name in ncu's output)."""
    argv = first_ncu.argv(ncu.find_ncu())
    done = process.run_capture(argv, timeout=first_ncu.TIMEOUT_S, env=process.child_env())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "nsight_agent_warmup" in done.stdout, done.stdout[-2000:]
    assert first_ncu.pay("0").ok
