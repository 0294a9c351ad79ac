"""One profiler per GPU: another process's ncu run is waited for, not collided with; a
profiler outside our lock is named as such, retried, and never blamed on the user's code.

Without the lock (H200, `pytest -m gpu -n 4`): two ncu on one GPU, and the second run
fails as "the harness died without an error report: a crash in native code, a signal, or
os._exit() in your source?" while ncu's log says the driver's profiling resource was busy."""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nsight_agent.engine import pipeline
from nsight_agent.engine.collection import gpu_lock, ncu, ncu_args, ncu_log
from nsight_agent.engine.collection.collect import profiled
from nsight_agent.engine.store.records import RunFiles
from nsight_agent.errors import (
    KernelProfileFailedError,
    ProfiledProcessError,
    ProfilerBusyError,
    RunCancelledError,
)
from tests.test_engine_ncu import PROFILE_FAILED_LOG
from tests.test_engine_pipeline import SETUP, request

# ncu 2025.3.1's log of the second of two sessions on one GPU (H200, run 20261202-064930).
BUSY_LOG = """\
==WARNING== Note: Running with unmodified GPU clocks. If not controlled otherwise, profiling results may be inconsistent.
==PROF== Connected to process 6242 (/usr/bin/python3.12)
==ERROR== An error was reported by the driver:
==ERROR== Profiling failed because a driver resource was unavailable. Ensure that no other tool (like DCGM) is concurrently collecting profiling data. See https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#faq for more details.
==ERROR== Failed to profile "fused_kernel" in process 6242
==PROF== Trying to shutdown target application
==ERROR== The application returned an error code (9).
"""


@pytest.fixture
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "locks"
    monkeypatch.setenv(gpu_lock.LOCK_DIR_ENV, str(folder))
    return folder


def _wait_until(predicate: Callable[[], object], what: str, limit: float = 60.0) -> None:
    """Wait on state (the limit only ends a broken test)."""
    end = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < end, f"never: {what}"
        time.sleep(0.02)


@pytest.fixture
def other_holder(tmp_path: Path, locks: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """Another process holding GPU "k"'s lock until ``release`` exists."""
    release = tmp_path / "release"
    code = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from nsight_agent.engine.collection import gpu_lock
        with gpu_lock.held(["k"], tag="run-A.ncu", timeout=5):
            while not Path({str(release)!r}).exists():
                time.sleep(0.01)
        """
    )
    env = {**os.environ, gpu_lock.LOCK_DIR_ENV: str(locks)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        _wait_until(
            lambda: (h := gpu_lock.holder("k")) is not None and h.pid == proc.pid,
            "the other process holds the lock",
        )
        yield proc, release
    finally:
        proc.kill()
        proc.wait()


# --- ncu's words -------------------------------------------------------------------------


def test_a_busy_profiler_is_named_not_blamed_on_the_program(tmp_path: Path) -> None:
    files = RunFiles.in_folder(tmp_path)
    files.ncu_log.write_text(BUSY_LOG)
    files.program_output.write_text("")
    run = ncu_log.NcuRun([], 9, files, 1)
    with pytest.raises(ProfilerBusyError) as err:
        ncu_log.check(run)
    assert not isinstance(err.value, ProfiledProcessError)
    assert "another profiling session held the GPU's performance counters" in err.value.message
    assert "driver resource was unavailable" in err.value.message
    assert "Nothing in your program failed" in err.value.hint
    assert "dcgmi profile --pause" in err.value.hint


# --- which GPUs a child may profile ------------------------------------------------------


@pytest.mark.parametrize(
    ("visible", "uuids", "keys"),
    [
        ("", ["GPU-a"], []),  # the child sees no GPU
        ("-1", ["GPU-a"], []),
        ("cpu", ["GPU-a"], []),
        ("0", [], []),  # no driver answers: no GPU, no lock
        (None, ["GPU-b", "GPU-a"], ["GPU-a", "GPU-b"]),  # unpinned: every GPU it could use
        ("1", ["GPU-a", "GPU-b"], ["GPU-b"]),
        ("1,0", ["GPU-a", "GPU-b"], ["GPU-a", "GPU-b"]),
        ("GPU-x", ["GPU-a"], ["GPU-x"]),  # a UUID names itself
        ("3", ["GPU-a"], [gpu_lock.MACHINE_KEY]),  # an index NVML does not know
        ("0", None, [gpu_lock.MACHINE_KEY]),  # NVML missing: one lock for the machine
    ],
)
def test_gpu_keys(
    monkeypatch: pytest.MonkeyPatch,
    visible: str | None,
    uuids: list[str] | None,
    keys: list[str],
) -> None:
    monkeypatch.setattr(gpu_lock, "_nvml_uuids", lambda: uuids)
    assert gpu_lock.gpu_keys(visible) == keys


def test_this_machine_without_a_gpu_takes_no_lock() -> None:
    """CI's case: NVML is installed (a dependency) and no driver answers, so the fake-ncu
    tests of parallel workers never queue behind each other."""
    uuids = gpu_lock._nvml_uuids()
    if uuids:
        pytest.skip("this machine has a GPU")
    assert uuids == []
    assert gpu_lock.gpu_keys(None) == gpu_lock.gpu_keys("0") == []


# --- the lock between real processes -----------------------------------------------------


def test_a_second_process_waits_its_turn_then_profiles(
    other_holder: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, release = other_holder
    said: list[str] = []
    got: list[float] = []
    holders: list[gpu_lock.Holder | None] = []

    def second() -> None:
        with gpu_lock.held(["k"], tag="run-B.ncu", timeout=60, on_wait=said.append) as waited:
            got.append(waited)
            holders.append(gpu_lock.holder("k"))

    thread = threading.Thread(target=second)
    thread.start()
    _wait_until(lambda: said, "the second run says it waits")
    assert not got, "the second run profiled while the other held the GPU"
    assert said == [f"waiting for GPU k's profiler, held by pid {proc.pid} (run-A.ncu, for 0 s)"]
    release.touch()
    thread.join(60)
    assert got and got[0] > 0
    assert holders[0] is not None and (holders[0].pid, holders[0].tag) == (os.getpid(), "run-B.ncu")
    assert gpu_lock.holder("k") is None  # released, the holder's lines cleared


def test_a_cancel_ends_the_wait_and_leaves_the_holder_alone(
    other_holder: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, _ = other_holder

    def cancelled() -> None:
        raise RunCancelledError("cancelled by the client")

    with (
        pytest.raises(RunCancelledError),
        gpu_lock.held(["k"], tag="B", timeout=60, poll=cancelled),
    ):
        pass
    held_by = gpu_lock.holder("k")
    assert held_by is not None and held_by.pid == proc.pid


def test_a_wait_past_the_limit_names_the_holder(
    other_holder: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, _ = other_holder
    with pytest.raises(ProfilerBusyError) as err, gpu_lock.held(["k"], tag="B", timeout=0.2):
        pass
    assert f"held by pid {proc.pid} (run-A.ncu" in err.value.message
    assert "nothing was profiled" in err.value.message
    assert "longer timeout_s" in err.value.hint


def test_a_killed_holder_leaves_no_stale_lock(
    other_holder: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, _ = other_holder
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with gpu_lock.held(["k"], tag="B", timeout=5) as waited:
        assert gpu_lock.holder("k") is not None
    assert waited < 5


# --- ncu.profile_cold: the lock around the run, and a retry for profilers outside it -----------


def _fake_ncu(tmp_path: Path, busy_times: int, log: str = BUSY_LOG) -> Path:
    """An ncu that writes ``log`` (the busy driver) and ends the program with exit code 9
    ``busy_times`` times, then writes a report."""
    count = tmp_path / "ncu-calls"
    busy = tmp_path / "busy.log"
    busy.write_text(log)
    script = tmp_path / "ncu"
    script.write_text(
        "#!/bin/sh\n"
        "while [ $# -gt 0 ]; do\n"
        '  case "$1" in --export) base="$2"; shift 2;; --log-file) log="$2"; shift 2;;'
        " *) shift;; esac\n"
        "done\n"
        f"echo x >> {count}\n"
        f'if [ "$(wc -l < {count})" -le {busy_times} ]; then cp {busy} "$log"; exit 9; fi\n'
        'echo "==PROF== Disconnected" > "$log"\n'
        'echo report > "$base.ncu-rep"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch, locks: Path) -> None:
    monkeypatch.setattr(ncu, "BUSY_PAUSES_S", (0.0, 0.0))
    monkeypatch.setattr(gpu_lock, "gpu_keys", lambda visible: ["k"])


def _collect(tmp_path: Path, forget: Callable[[], None] | None = None) -> ncu_log.NcuRun:
    inv = ncu.Invocation(ncu_args.NcuOptions(), RunFiles.in_folder(tmp_path), timeout=30)
    return ncu.profile_cold(["true"], inv, forget=forget)


def test_a_profiler_outside_the_lock_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quick_retries: None
) -> None:
    monkeypatch.setenv("NCU", str(_fake_ncu(tmp_path, busy_times=1)))
    # What the killed first attempt's program left must not be read as the second's.
    (tmp_path / "error.json").write_text("{}")
    forgotten: list[int] = []
    done = _collect(tmp_path, forget=lambda: forgotten.append(1))
    assert done.attempts == 2 and done.files.report.exists()
    assert forgotten == [1] and not (tmp_path / "error.json").exists()
    said = profiled.waits(done)
    assert said == "; profiled on attempt 2 (another profiler held the counters)"


def test_a_profiler_that_stays_busy_ends_the_run_with_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quick_retries: None
) -> None:
    monkeypatch.setenv("NCU", str(_fake_ncu(tmp_path, busy_times=99)))
    with pytest.raises(ProfilerBusyError) as err:
        _collect(tmp_path)
    assert "Tried 3 times" in err.value.message
    assert len((tmp_path / "ncu-calls").read_text().splitlines()) == 3


def test_collect_waits_for_another_process_s_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    quick_retries: None,
    other_holder: tuple[subprocess.Popen[bytes], Path],
) -> None:
    _, release = other_holder
    caplog.set_level(logging.INFO, logger=ncu.__name__)
    monkeypatch.setenv("NCU", str(_fake_ncu(tmp_path, busy_times=0)))
    calls = tmp_path / "ncu-calls"
    result: list[ncu_log.NcuRun] = []
    thread = threading.Thread(target=lambda: result.append(_collect(tmp_path)))
    thread.start()
    _wait_until(
        lambda: any("waiting for GPU k's profiler" in r.message for r in caplog.records),
        "the run says it waits for the GPU",
    )
    assert not calls.exists(), "ncu started while another process held the GPU"
    release.touch()
    thread.join(60)
    assert result and result[0].waited_s > 0 and calls.exists()


def test_a_run_that_met_a_busy_profiler_is_recorded_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quick_retries: None
) -> None:
    """End to end (pre-flight on the CPU, then the fake ncu): the run's record says another
    profiler held the counters, never that the harness died in the user's code."""
    monkeypatch.setenv("NCU", str(_fake_ncu(tmp_path, busy_times=99)))
    runs = tmp_path / "runs"
    with pytest.raises(ProfilerBusyError):
        pipeline.profile(request(SETUP + "def run(x):\n    return x * 2\n"), runs_root=runs)
    (run_dir,) = [d for d in runs.iterdir() if (d / "status.json").is_file()]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "failed"
    assert "another profiling session" in status["message"]
    assert "harness died" not in status["message"] and "your source" not in status["message"]


def test_a_kernel_ncu_failed_on_is_recorded_as_ncu_s_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quick_retries: None
) -> None:
    """End to end: ncu failed on a kernel and ended the harness (exit code 9, no output, its
    calls short). Seen twice on the H200 in one GPU suite; the answer said "the harness died
    without an error report ... in your source?". Now it is ncu's failure, with its lines."""
    monkeypatch.setenv("NCU", str(_fake_ncu(tmp_path, busy_times=99, log=PROFILE_FAILED_LOG)))
    runs = tmp_path / "runs"
    with pytest.raises(KernelProfileFailedError) as err:
        pipeline.profile(request(SETUP + "def run(x):\n    return x * 2\n"), runs_root=runs)
    assert "Unknown Error on device 0." in err.value.message
    assert "in your source" not in str(err.value)
    assert len((tmp_path / "ncu-calls").read_text().splitlines()) == 1  # not retried


# --- on a GPU: two processes profiling one GPU at once -------------------------------------

TWO_AT_ONCE = """
import sys
from pathlib import Path
from nsight_agent import demo
from nsight_agent.engine import pipeline
from nsight_agent.request import ProfileRequest
req = ProfileRequest(source=demo.EXAMPLE_SOURCE, configs={"n": [1 << k for k in range(12, 22)]}, runs=5)
result = pipeline.profile(req, runs_root=Path(sys.argv[1]))
print("COLLECTION", result.facts.collection)
"""


@pytest.mark.gpu
def test_two_processes_profiling_one_gpu_both_succeed(tmp_path: Path) -> None:
    """Without the lock the second ncu fails ("a driver resource was unavailable"). The test
    holds GPU 0's lock until both runs have passed their pre-flight, so both reach ncu while
    one holds it (state, not timing): both succeed, and the one that came second waits for
    the other's whole ncu run. The last to pass its pre-flight may find the test's lock
    already let go (its wait under the 0.5 s a run reports: seen on the H200), so "waited"
    is asked of one run, not both."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"}
    runs = [tmp_path / f"runs{i}" for i in range(2)]
    with gpu_lock.held(gpu_lock.gpu_keys("0"), tag="the test", timeout=60):
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", TWO_AT_ONCE, str(folder)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for folder in runs
        ]
        _wait_until(
            lambda: (
                all(list(f.glob("*/preflight-result.json")) for f in runs)
                or any(p.poll() is not None for p in procs)
            ),
            "both runs passed their pre-flight",
            limit=300,
        )
    outs = [p.communicate(timeout=400)[0] for p in procs]
    for proc, out in zip(procs, outs, strict=True):
        print(out[-1500:])  # shown by pytest -rA: each run's collection path and waits
        assert proc.returncode == 0, out[-3000:]
    assert any("waited" in out for out in outs), [out[-1500:] for out in outs]
