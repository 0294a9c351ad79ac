"""Ray errors that name their cause, fast: a cluster that refuses the
token names Ray's InvalidAuthToken and where this server's token comes from; an address that
accepts connections but answers no Ray GCS is one bounded attempt, whose error every call
that waited for it gets at once (not about 20 s a call, one call after another).
``pytest -m ray`` runs these with the other Ray tests; without Ray they skip.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nsight_agent.engine.executors.ray import cluster as ray_cluster

ROOT = Path(__file__).resolve().parents[1]
WRONG = "wrong-token-0123456789abcdefghijklmnop"

# Connects a RayExecutor to argv[1] and prints what it raised, and after how long.
CONNECT = """
import json, sys, time
from nsight_agent.engine.executors.ray.executor import RayExecutor
start = time.monotonic()
try:
    RayExecutor(sys.argv[1]).connect()
    out = {"error": None}
except Exception as err:
    out = {"error": type(err).__name__, "text": str(err)}
out["seconds"] = time.monotonic() - start
print("RESULT " + json.dumps(out), flush=True)
"""


# --- where the token comes from (no Ray needed) ----------------------------------------------


def test_the_token_source_follows_rays_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    default = tmp_path / ".ray" / "auth_token"
    assert ray_cluster.token_source() == (
        f"the file {default} (the default: neither RAY_AUTH_TOKEN nor RAY_AUTH_TOKEN_PATH is "
        "set), which does not exist"
    )
    token_file = tmp_path / "token"
    token_file.write_text("x")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token_file))
    assert ray_cluster.token_source() == f"the file {token_file} (RAY_AUTH_TOKEN_PATH)"
    monkeypatch.setenv("RAY_AUTH_TOKEN", "secret-never-shown")
    assert ray_cluster.token_source() == "the RAY_AUTH_TOKEN environment variable"


# --- the host pool's state under concurrent readers (no Ray needed) ---------------------------


class SlowReady:
    """A stand-in for Ray in ``HostPool``: one host, whose ``ready`` answer reaches the
    thread named "stale" only when ``gate`` is set (a slow ray.get on a busy machine)."""

    def __init__(self) -> None:
        self.gate, self.entered = threading.Event(), threading.Event()

    def wait(
        self, refs: list[Any], num_returns: int, timeout: float
    ) -> tuple[list[Any], list[Any]]:
        return list(refs), []

    def get(self, ref: Any, timeout: float | None = None) -> Any:
        if threading.current_thread().name == "stale":
            self.entered.set()
            assert self.gate.wait(30)
        return {"node": "n", "gpu": "0", "pid": 1}

    def nodes(self) -> list[dict[str, Any]]:
        resources = {"GPU": 1.0, ray_cluster.RESOURCE: 1.0}
        return [{"Alive": True, "NodeID": "n", "Resources": resources}]

    def kill(self, actor: Any, no_restart: bool = True) -> None:
        pass


class FakeActor:
    class describe:
        @staticmethod
        def remote() -> object:
            return object()


def test_a_host_taken_by_a_job_stays_busy_whatever_a_late_reader_saw() -> None:
    """Two readers of a starting host: the late one must not turn it idle once a job took it
    (it did: the pool then said 0 jobs running while two ran, and could hand the busy GPU a
    second job)."""
    from nsight_agent.engine.executors.ray.hosts import HostPool

    fake = SlowReady()
    pool = HostPool(fake, FakeActor, ray_cluster.RESOURCE)
    pool.prestart()  # one host, starting
    stale = threading.Thread(target=pool.info, name="stale")  # reads it as starting, then waits
    stale.start()
    assert fake.entered.wait(30)
    host = pool.acquire(threading.Event(), 10)  # another thread sees it up; the job takes it
    assert host.state == "busy"
    fake.gate.set()  # the late reader's answer arrives
    stale.join(30)
    assert host.state == "busy" and pool.info()["running"] == 1
    pool.close()


# --- against Ray --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gcs_address() -> Iterator[str]:
    """A local Ray cluster (token authentication on, Ray's default for local clusters)."""
    ray = pytest.importorskip(
        "ray", reason='Ray is not installed (pip install ".[ray]" in a clone)'
    )
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        yield str(ray.get_runtime_context().gcs_address)
    finally:
        ray.shutdown()


def connect_in_a_process(address: str, **env: str) -> dict[str, Any]:
    return run_script(CONNECT, address, **env)


def run_script(script: str, address: str, **env: str) -> dict[str, Any]:
    """``script`` in a fresh Python (no Ray session of this process), its RESULT line."""
    environ = {**os.environ, **env}
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), environ.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", script, address],
        capture_output=True,
        text=True,
        env=environ,
        timeout=180,
        check=False,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, out.stdout + out.stderr
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


@pytest.mark.ray
def test_a_refused_token_names_invalid_auth_token_and_where_the_token_comes_from(
    gcs_address: str, tmp_path: Path
) -> None:
    by_env = connect_in_a_process(gcs_address, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=WRONG)
    print(f"a refused Ray token ({by_env['seconds']:.1f} s): {by_env['text']}")
    assert by_env["error"] == "RayTokenRefusedError", by_env
    assert "InvalidAuthToken" in by_env["text"], by_env
    assert "the RAY_AUTH_TOKEN environment variable" in by_env["text"], by_env
    assert WRONG not in by_env["text"]  # the token itself is never shown
    assert by_env["seconds"] < 15, by_env  # Ray's own init retried about 20 s, then "Failed"
    token_file = tmp_path / "token"
    token_file.write_text(WRONG)
    by_file = connect_in_a_process(
        gcs_address, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="", RAY_AUTH_TOKEN_PATH=str(token_file)
    )
    assert by_file["error"] == "RayTokenRefusedError", by_file
    assert f"the file {token_file} (RAY_AUTH_TOKEN_PATH)" in by_file["text"], by_file


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (not a Ray GCS)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


# Four calls connect at once to argv[1]; the attempts (GCS probes) are counted.
SHARED = """
import json, sys, threading, time
from nsight_agent.engine.executors.ray import executor as ray_executor
attempts, errors = [], []
real_probe = ray_executor.probe_gcs
def counted(*args):
    attempts.append(time.monotonic())
    real_probe(*args)
ray_executor.probe_gcs = counted
pool = ray_executor.RayExecutor(sys.argv[1], connect_timeout_s=3)
barrier = threading.Barrier(4)
def call():
    barrier.wait()
    try:
        pool.connect()
    except Exception as err:
        errors.append(f"{type(err).__name__}: {err}")
threads = [threading.Thread(target=call) for _ in range(4)]
start = time.monotonic()
for t in threads: t.start()
for t in threads: t.join()
out = {"errors": errors, "attempts": len(attempts), "seconds": time.monotonic() - start}
try:
    pool.connect()
except Exception as err:
    out["later"] = type(err).__name__
out["attempts_after"] = len(attempts)
print("RESULT " + json.dumps(out), flush=True)
"""


@pytest.mark.ray
def test_calls_waiting_on_one_connection_attempt_share_its_answer(silent_port: int) -> None:
    pytest.importorskip("ray", reason='Ray is not installed (pip install ".[ray]" in a clone)')
    out = run_script(SHARED, f"127.0.0.1:{silent_port}")
    errors = out["errors"]
    assert len(errors) == 4 and out["attempts"] == 1, out
    assert all(e.startswith("RayClusterUnreachableError") for e in errors), errors
    assert "no Ray GCS answered there within 3 s" in errors[0], errors
    assert out["seconds"] < 3 * 4, f"answered one attempt after another: {out}"
    assert out["later"] == "RayClusterUnreachableError" and out["attempts_after"] == 2, out


# --- the documented way to try the pool without GPUs ------------------------------------------


def documented_snippet() -> str:
    """The Python block of DISTRIBUTED.md's section on trying the pool on one machine without
    GPUs (the README points there)."""
    start = "## Trying it on one machine without GPUs"
    text = (ROOT / "docs" / "DISTRIBUTED.md").read_text()
    section = text[text.index(start) :]
    end = section.find("\n## ", len(start))
    section = section[: end if end >= 0 else None]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_documented_snippet_starts_a_pool_of_two_fake_gpus() -> None:
    assert "ray.init(num_gpus=2, resources={RESOURCE: 2}" in documented_snippet()


@pytest.mark.ray
def test_the_documented_snippet_runs_two_jobs_on_two_fake_gpus(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason='Ray is not installed (pip install ".[ray]" in a clone)')
    env = {**os.environ, "NSIGHT_AGENT_RUNS": str(tmp_path / "runs")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", documented_snippet()],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=1200,  # the snippet waits 600 s at most a job: a bound on a hang
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    # Each job on a GPU host of the pool (the first free one: both may land on one GPU).
    assert len(re.findall(r"^\S+:gpu[01] 2\S+$", out.stdout, re.M)) == 2, out.stdout
    # pandas prints a frame whose values span decades in scientific notation (1.73e+04)
    value = r"[\d.]+(?:e[+-]\d+)?"
    rows = re.findall(rf"^\d+\s+(run|added)\s+\d+\s+{value}\s+(True|False)$", out.stdout, re.M)
    assert len(rows) == 8 and all(ok == "True" for _, ok in rows), out.stdout
    assert len(list((tmp_path / "runs").glob("2*"))) == 2
