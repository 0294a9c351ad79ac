"""ncu command lines, ncu failure diagnosis, the timeout kill and the child runner: no GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nsight_agent.catalog import metrics as catalog
from nsight_agent.engine import process
from nsight_agent.engine.collection import ncu, ncu_args, ncu_log
from nsight_agent.engine.collection.collect import profiled
from nsight_agent.engine.store.records import RunFiles
from nsight_agent.engine.worker import shipping
from nsight_agent.errors import (
    CollectionTimeoutError,
    CounterPermissionError,
    InvalidRequestError,
    NcuError,
    NcuNotFoundError,
    NoKernelsProfiledError,
    ProfiledProcessError,
    UnknownMetricError,
)
from tests.test_engine_shipping import run_payload

REPORT = Path("/runs/r/report")
LOG = Path("/runs/r/ncu.log")
TARGET = ["python3", "-m", "nsight_agent.engine.worker.entry", "spec.pkl"]
PREFIX = ["/usr/bin/ncu", "--force-overwrite", "--export", str(REPORT), "--log-file", str(LOG),
          "--print-summary", "none", "--target-processes", "all",
          "--nvtx", "--nvtx-include", "nsight_agent.scope@measure"]  # fmt: skip


def argv(**options: object) -> list[str]:
    return ncu_args.build_argv("/usr/bin/ncu", ncu_args.NcuOptions(**options), REPORT, LOG, TARGET)  # type: ignore[arg-type]


def test_default_argv() -> None:
    assert argv() == [
        *PREFIX,
        "--replay-mode", "kernel", "--cache-control", "all", "--clock-control", "none",
        "--metrics", "gpu__time_duration.sum", *TARGET,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"replay_mode": "range"}, ["--replay-mode", "range"]),
        ({"cache_control": "none"}, ["--cache-control", "none"]),
        ({"clock_control": "base"}, ["--clock-control", "base"]),
        ({"metrics": ["a.sum", "b.avg"]}, ["--metrics", "a.sum,b.avg"]),
        (
            {"sections": ["SpeedOfLight", "Occupancy"]},
            ["--section", "SpeedOfLight", "--section", "Occupancy"],
        ),
        (
            {"sections": ["SourceCounters"]},
            ["--section", "SourceCounters", "--import-source", "yes"],
        ),
    ],
)
def test_each_option_becomes_its_flag(options: dict[str, object], expected: list[str]) -> None:
    full = argv(**options)
    start = next(i for i in range(len(full)) if full[i : i + len(expected)] == expected)
    assert full[start : start + len(expected)] == expected
    assert full[-len(TARGET) :] == TARGET


def test_source_text_is_imported_only_with_source_counters() -> None:
    assert "--import-source" not in argv(sections=["SpeedOfLight"])


def test_no_nvtx_filter_when_asked() -> None:
    full = argv(nvtx_include=())
    assert "--nvtx" not in full and "--nvtx-include" not in full


@pytest.mark.parametrize(
    "options",
    [
        {"replay_mode": "application"},
        {"cache_control": "some"},
        {"clock_control": "boost"},
        {"metrics": []},
        {"metrics": ["--set full"]},
        {"metrics": ["a.sum,b.sum"]},
    ],
)
def test_bad_options_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(InvalidRequestError):
        ncu_args.NcuOptions(**options)  # type: ignore[arg-type]


def test_ncu_not_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("NCU", str(tmp_path / "missing-ncu"))
    monkeypatch.setattr(ncu, "Path", lambda p: tmp_path / "none")
    with pytest.raises(NcuNotFoundError, match="not found") as err:
        ncu.find_ncu()
    assert "NCU=" in str(err.value)


def test_ncu_found_through_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("NCU", str(fake))
    assert ncu.find_ncu() == str(fake)


def make_run(
    tmp_path: Path, log: str, rc: int = 0, report: bool = True, output: str = ""
) -> ncu_log.NcuRun:
    files = RunFiles.in_folder(tmp_path)
    files.ncu_log.write_text(log)
    files.program_output.write_text(output)
    if report:
        files.report.write_bytes(b"x")
    return ncu_log.NcuRun([], rc, files, 1.0)


# ncu 2025.3.1's own lines, as seen on the H200, or its documented ones.
PERM = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0."
NO_KERNELS = "==PROF== Disconnected from process 484\n==WARNING== No kernels were profiled.\n"
CRASH = "==ERROR== The application returned an error code (1).\n"


def test_permission_error(tmp_path: Path) -> None:
    with pytest.raises(CounterPermissionError, match="ERR_NVGPUCTRPERM") as err:
        ncu_log.check(make_run(tmp_path, PERM, rc=1, report=False))
    assert "NVreg_RestrictProfilingToAdminUsers=0" in str(err.value)


def test_no_kernels(tmp_path: Path) -> None:
    with pytest.raises(NoKernelsProfiledError, match="annotate"):
        ncu_log.check(make_run(tmp_path, NO_KERNELS, report=False))


def test_crash_carries_program_traceback(tmp_path: Path) -> None:
    run = make_run(tmp_path, CRASH, rc=1, output="line 1\nValueError: boom\n")
    with pytest.raises(ProfiledProcessError, match="ValueError: boom") as err:
        ncu_log.check(run)
    assert err.value.returncode == 1
    with pytest.raises(ProfiledProcessError, match="custom traceback"):
        ncu_log.check(run, program_error="Traceback...\ncustom traceback")


# ncu's lines when it fails on a kernel and shuts the program down (exit code 9); the same
# sequence as in a public report on an H100 (intel/llvm#17007), the kernel's name ours.
PROFILE_FAILED_LOG = (
    "==ERROR== Failed to prepare kernel for profiling\n"
    "==ERROR== Unknown Error on device 0.\n"
    '==ERROR== Failed to profile "add_kernel" in process 4242\n'
    "==PROF== Trying to shutdown target application\n"
    "==ERROR== The application returned an error code (9).\n"
)


def test_a_kernel_ncu_failed_on_is_ncu_s_error_not_the_program_s(tmp_path: Path) -> None:
    """On the H200 a harness ended with exit code 9 and printed nothing, and the answer said
    "the harness died without an error report ... in your source?". When ncu says it failed
    to profile a kernel and the program recorded no error, the error is ncu's, with its lines."""
    with pytest.raises(NcuError) as err:
        ncu_log.check(make_run(tmp_path, PROFILE_FAILED_LOG, rc=9, output=""))
    assert not isinstance(err.value, ProfiledProcessError)
    text = str(err.value)
    assert text.startswith('ncu could not profile "add_kernel" and ended the program (exit code 9)')
    assert "Unknown Error on device 0." in text and "returned an error code" not in text
    assert "reported no error" in err.value.hint
    # the program's own error report still wins: a kernel that faulted is the source's
    with pytest.raises(ProfiledProcessError, match="illegal memory access"):
        ncu_log.check(
            make_run(tmp_path, PROFILE_FAILED_LOG, rc=9),
            program_error="RuntimeError: CUDA error: an illegal memory access was encountered",
        )


def test_a_program_that_died_carries_ncu_s_other_lines(tmp_path: Path) -> None:
    log = "==WARNING== something\n==ERROR== Profiling was interrupted\n" + CRASH
    with pytest.raises(ProfiledProcessError) as err:
        ncu_log.check(make_run(tmp_path, log, rc=1, output=""))
    assert err.value.stderr_tail == "ncu said: Profiling was interrupted"
    with pytest.raises(ProfiledProcessError) as plain:  # ncu's exit line alone adds nothing
        ncu_log.check(make_run(tmp_path, CRASH, rc=1, output="ValueError: boom\n"))
    assert "ncu said" not in plain.value.stderr_tail


def test_unknown_metric_in_ncu_log(tmp_path: Path) -> None:
    log = "==ERROR== Failed to find metric gpu__time_durationX.sum\n"
    with pytest.raises(UnknownMetricError) as err:
        ncu_log.check(make_run(tmp_path, log, rc=1, report=False), suggest=catalog.suggestions)
    assert err.value.metric == "gpu__time_durationX.sum"
    assert "gpu__time_duration.sum" in err.value.suggestions


def test_unknown_metric_without_a_rollup_is_named_not_its_regex(tmp_path: Path) -> None:
    # ncu 2025.3.1 on the H200 (nsight-python's test_parameter_metrics[invalid_single]):
    # a name without a suffix is looked up as a regex, and the error quotes the regex.
    log = (
        "==ERROR== Failed to find metric regex:^invalid_value\\.(sum|min|max|avg|pct|ratio|"
        "max_rate)$\n"
    )
    with pytest.raises(UnknownMetricError) as err:
        ncu_log.check(make_run(tmp_path, log, rc=1, report=False), suggest=catalog.suggestions)
    assert err.value.metric == "invalid_value"
    assert str(err.value).startswith("Failed to find metric regex:^invalid_value")


def test_other_ncu_error_is_reported_with_its_text(tmp_path: Path) -> None:
    log = "==ERROR== Invalid configuration for nvtx-include : nsight_agent@*/\n"
    with pytest.raises(NcuError, match="Invalid configuration for nvtx-include"):
        ncu_log.check(make_run(tmp_path, log, rc=1, report=False), suggest=catalog.suggestions)


def test_success_without_report_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(NcuError, match="no report"):
        ncu_log.check(make_run(tmp_path, "==PROF== Report: x\n", report=False))
    ncu_log.check(make_run(tmp_path, "==PROF== Report: x\n", report=True))


def test_a_timeout_says_how_many_kernels_ncu_had_profiled(tmp_path: Path) -> None:
    """A stand-in ncu writes an H200 run's own log lines (18 kernels, 1 pass each) as it goes,
    then hangs: the limit's error counts them, and so does the estimate beside it."""
    files = RunFiles.in_folder(tmp_path)
    recorded = Path(__file__).parent / "fixtures" / "engine" / "sweep" / "ncu.log"
    script = (
        "import sys, time; log = open(sys.argv[1], 'w'); "
        "log.write(open(sys.argv[2]).read()); log.flush(); time.sleep(60)"
    )
    with pytest.raises(CollectionTimeoutError) as info:
        ncu.run(
            [sys.executable, "-c", script, str(files.ncu_log), str(recorded)],
            files=files,
            timeout=4,
            poll_interval=0.1,
        )
    err = info.value
    assert err.profiled == 18 and err.limit_s == 4, err
    assert "after ncu had profiled 18 kernel(s) (1 replay pass each at most)" in err.message
    # The pre-flight counted 127 kernels a call in one variant (a second one was dropped):
    # 10 runs are 1270 kernels, at 18 in 4 s about 282 s, said rounded up to 300.
    told = profiled.with_estimate(err, {("ref", 0): 127, ("gone", 0): 5}, 10, ["gone"])
    assert "launch 1270 kernels in all" in told.message and "about 300 s" in told.message
    assert told.hint.startswith("Raise timeout_s to about 300,") and str(told).endswith(
        str(files.program_output) + "."
    )
    # Nothing to estimate: no count from the pre-flight (no GPU), or nothing left to profile.
    fresh = ncu_log.timeout_error(4, files)
    assert profiled.with_estimate(fresh, None, 10, []).message == fresh.message
    assert profiled.with_estimate(fresh, {("ref", 0): 1}, 10, []).message == fresh.message
    files.ncu_log.unlink()
    assert ncu_log.timeout_error(4, files).profiled is None  # no log: nothing claimed


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    script = f"import subprocess,time; p=subprocess.Popen(['sleep','60']); open({str(pid_file)!r},'w').write(str(p.pid)); time.sleep(60)"
    # The limit leaves the child time to start its grandchild and write its pid on a busy
    # machine (2 s did not always).
    with pytest.raises(CollectionTimeoutError, match="8 s limit"):
        ncu.run(
            [sys.executable, "-c", script],
            files=RunFiles.in_folder(tmp_path),
            timeout=8,
            poll_interval=0.1,
        )
    grandchild = int(pid_file.read_text())
    for _ in range(50):  # the kill reaches the grandchild too (it shares the group)
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("grandchild process survived the timeout")


def test_poll_exception_stops_the_run(tmp_path: Path) -> None:
    class Cancelled(Exception):
        pass

    def poll() -> None:
        raise Cancelled

    with pytest.raises(Cancelled):
        ncu.run(
            [sys.executable, "-c", "import time; time.sleep(30)"],
            files=RunFiles.in_folder(tmp_path), timeout=60, poll=poll, poll_interval=0.1,
        )  # fmt: skip


USER_SCRIPT = textwrap.dedent(
    """
    import nsight_agent

    @nsight_agent.analyze.kernel(configs=[1, 2], runs=2)
    def work(n, scale=3):
        with nsight_agent.annotate("first"):
            sum(range(n))
        with nsight_agent.annotate("second", ignore_failures=True):
            if n == 2:
                raise RuntimeError("fails for n=2")

    print("module body runs")
    work()  # an unguarded call: in the child it stops the import, nothing else runs
    raise SystemExit("never reached in the child")
    """
)


def run_child(tmp_path: Path, script: str, qualname: str) -> tuple[int, Path]:
    user = tmp_path / "user.py"
    user.write_text(script)
    # The by-name path (the fallback of engine.shipping): the script is imported from its file.
    target = shipping.ship_by_name("__main__", qualname, file=str(user), configs=[(1, 3), (2, 3)])
    rc, _, _ = run_payload(tmp_path, target, runs=2)  # the real child, as the shipping tests run it
    return rc, tmp_path


def test_child_runs_every_config_and_run_and_writes_the_manifest(tmp_path: Path) -> None:
    rc, d = run_child(tmp_path, USER_SCRIPT, "work")
    assert rc == 0, (d / "e.txt").read_text() if (d / "e.txt").exists() else ""
    manifest = json.loads((d / "m.json").read_text())
    calls = manifest["calls"]
    assert [(c["config"], c["run"]) for c in calls] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(c["annotations"] == ["first", "second"] for c in calls)
    assert [c["failed"] for c in calls] == [[], [], ["second"], ["second"]]
    assert (d / "p.txt").read_text().splitlines() == ["1/4", "2/4", "3/4", "4/4"]


def test_child_reports_the_users_exception(tmp_path: Path) -> None:
    script = "def boom(n, scale):\n    raise KeyError('no such input')\n"
    rc, d = run_child(tmp_path, script, "boom")
    assert rc == 3
    assert "KeyError: 'no such input'" in (d / "e.txt").read_text()


def test_child_explains_a_function_defined_after_the_unguarded_call(tmp_path: Path) -> None:
    script = USER_SCRIPT + "\ndef later(n, scale):\n    pass\n"
    rc, d = run_child(tmp_path, script, "later")
    assert rc == 3
    assert "if __name__" in (d / "e.txt").read_text()


def test_sigterm_to_the_parent_kills_the_profiled_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    parent = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from nsight_agent.engine.collection import ncu
        from nsight_agent.engine.store.records import RunFiles
        d = Path({str(tmp_path)!r})
        script = "import os,time; open({str(pid_file)!r},'w').write(str(os.getpid())); time.sleep(60)"
        ncu.run([sys.executable, "-c", script], files=RunFiles.in_folder(d), timeout=60,
                poll_interval=0.1)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], env=process.child_env())
    deadline = time.monotonic() + 60  # wait on the state: the profiled child has started
    while not (pid_file.exists() and pid_file.read_text()):
        assert time.monotonic() < deadline and proc.poll() is None, "the child never started"
        time.sleep(0.1)
    proc.terminate()
    proc.wait(timeout=30)
    child = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail("the profiled process survived SIGTERM to its parent")


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("2025.3.1.0", "no in-process attach"),  # the H200 here
        ("2026.1.9", "no in-process attach"),
        ("2026.2.1", "can attach in-process"),
        ("2027.1.0.0", "can attach in-process"),
        (None, None),
        ("not a version", None),
    ],
)
def test_the_ncu_version_says_whether_calls_can_stay_warm(
    version: str | None, expected: str | None
) -> None:
    from nsight_agent.engine.device import attach_note

    note = attach_note(version)
    assert (note is None) if expected is None else (note is not None and expected in note)
