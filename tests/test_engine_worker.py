"""The warm worker with real subprocesses on the CPU: start, reuse, a job that raises, crash
and replace (os._exit, a segfault), timeout kill (children found by their environment
marker), a poisoned CUDA context, dying with the parent, the pre-flight and the timing path
run in the worker. Times are printed, never asserted."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nsight_agent.engine import children, pipeline
from nsight_agent.engine.harness import render
from nsight_agent.engine.worker import shipping, timing
from nsight_agent.engine.worker.pool import (
    CallJob,
    JobError,
    TimeJob,
    Worker,
    WorkerCrashed,
    WorkerPool,
    WorkerTimeout,
    normalize_device,
    warm_preflight,
)
from nsight_agent.request import ProfileRequest, Variant

SETUP = "import torch\n\ndef setup(n, device):\n    return (torch.ones(n, device=device),)\n\n"


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    with WorkerPool() as p:
        yield p


@pytest.fixture
def worker(pool: WorkerPool) -> Worker:
    return pool.get("cpu")


def pid_and(x: int) -> tuple[int, int]:
    return os.getpid(), x * 2


def raises() -> None:
    raise ValueError("the job's own error")


def exits() -> None:
    os._exit(7)


def segfaults() -> None:
    ctypes.string_at(0)


def reads_stdin() -> str:
    return sys.stdin.read()


def changes_torch() -> None:
    import torch

    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.softmax = lambda x, dim: x  # replaced for the process
    torch.Tensor.add = lambda self, other: self  # hides the inherited method
    torch.backends.cuda.enable_flash_sdp(False)


def sets_environment() -> None:
    os.environ["NSIGHT_AGENT_TEST_LEAK"] = "1"
    os.environ["HOME"] = "/nowhere"


def environment_now() -> tuple[str | None, str | None]:
    return os.environ.get("NSIGHT_AGENT_TEST_LEAK"), os.environ.get("HOME")


def changes_the_interpreter() -> None:
    """What a source can change of its interpreter, each a way to fail or skew later jobs."""
    import decimal
    import gc
    import io
    import resource
    import signal
    import sys
    import warnings

    warnings.simplefilter("error")  # every later warning an exception
    sys.setrecursionlimit(120)
    decimal.getcontext().prec = 5
    os.umask(0o777)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.setitimer(signal.ITIMER_REAL, 3600.0)  # SIGALRM would end a later job
    sys.stdout = io.StringIO()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(32, soft), hard))
    gc.disable()
    sys.settrace(lambda *args: None)


def interpreter_now() -> tuple[object, ...]:
    import decimal
    import gc
    import resource
    import signal
    import sys
    import warnings

    with warnings.catch_warnings(record=True) as said:
        warnings.warn("a warning is said, not raised", stacklevel=1)
    mask = os.umask(0o022)
    os.umask(mask)
    return (
        len(said),
        sys.getrecursionlimit(),
        decimal.getcontext().prec,
        mask,
        signal.getsignal(signal.SIGTERM) is signal.SIG_IGN,
        signal.getitimer(signal.ITIMER_REAL)[0] > 0,
        type(sys.stdout).__name__,
        resource.getrlimit(resource.RLIMIT_NOFILE),
        gc.isenabled(),
        sys.gettrace() is None,
    )


def leaves_a_thread() -> None:
    import threading

    threading.Thread(target=spins, daemon=True, name="user-spinner").start()


def spins_briefly() -> None:
    import threading

    done = threading.Thread(target=time.sleep, args=(0.01,))
    done.start()
    done.join()
    threading.Thread(target=time.sleep, args=(0.01,), daemon=True).start()  # library code


def spins() -> None:
    while True:
        time.sleep(0.01)


def makes_a_side_stream_current() -> None:
    import torch

    torch.cuda.set_stream(torch.cuda.Stream())


def stream_now() -> tuple[int, int]:
    import torch

    return torch.cuda.current_device(), torch.cuda.current_stream().cuda_stream


def torch_now() -> tuple[str, int, bool, bool, bool, bool]:
    import torch

    dtype, threads = str(torch.get_default_dtype()), torch.get_num_threads()
    x = torch.tensor([0.0, 0.0])
    works = torch.softmax(x, dim=0).tolist() == [0.5, 0.5] and x.add(1).tolist() == [1.0, 1.0]
    tf32, flash = torch.backends.cuda.matmul.allow_tf32, torch.backends.cuda.flash_sdp_enabled()
    return dtype, threads, torch.is_grad_enabled(), tf32, works, flash


def cuda_error() -> None:
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def hangs_with_a_child(pid_file: str) -> None:
    child = subprocess.Popen(["sleep", "120"], start_new_session=True)  # escapes the group
    Path(pid_file).write_text(str(child.pid))
    time.sleep(120)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


def test_device_names() -> None:
    assert [normalize_device(d) for d in ("cpu", "cuda", 1, "cuda:3")] == [
        "cpu",
        "cuda:0",
        "cuda:1",
        "cuda:3",
    ]
    with pytest.raises(ValueError):
        normalize_device("tpu")


def test_started_on_first_use_then_reused(pool: WorkerPool) -> None:
    start = time.monotonic()
    first = pool.run("cpu", _call(pid_and, 21), timeout=120)
    cold = time.monotonic() - start
    start = time.monotonic()
    second = pool.get("cpu").call(pid_and, 1, timeout=30)
    warm = time.monotonic() - start
    assert first[1] == 42 and second[1] == 2
    assert first[0] == second[0] == pool.get("cpu").pid
    assert pool.get("cpu") is pool.get("cpu")
    print(
        f"first job (start + job) {cold:.2f} s, reused {warm * 1000:.1f} ms; {pool.get('cpu').info}"
    )


def _call(fn: Callable[..., object], *args: object) -> CallJob:
    return CallJob(shipping.ship(fn, args=args))


def test_a_job_that_raises_keeps_the_worker(worker: Worker) -> None:
    before = worker.call(pid_and, 1, timeout=60)[0]
    with pytest.raises(JobError, match="the job's own error") as info:
        worker.call(raises, timeout=30)
    assert info.value.error_type == "ValueError" and not info.value.poisoned
    assert "raises" in info.value.remote_traceback
    assert worker.call(pid_and, 1, timeout=30)[0] == before


@pytest.mark.parametrize(("job", "code"), [(exits, 7), (segfaults, -signal.SIGSEGV)])
def test_a_crash_is_replaced(worker: Worker, job: object, code: int) -> None:
    before = worker.call(pid_and, 1, timeout=60)[0]
    with pytest.raises(WorkerCrashed) as info:
        worker.call(job, timeout=30)
    assert info.value.returncode == code
    assert not alive(before)
    after = worker.call(pid_and, 1, timeout=120)[0]
    assert after != before


def test_a_job_past_its_timeout_is_killed_with_its_children(worker: Worker, tmp_path: Path) -> None:
    before = worker.call(pid_and, 1, timeout=60)[0]
    marker = worker.marker
    assert children.marked_processes(marker, exact=True)  # the worker carries its marker
    pid_file = tmp_path / "child.pid"
    start = time.monotonic()
    with pytest.raises(WorkerTimeout):  # time enough to start the grandchild when busy
        worker.call(hangs_with_a_child, str(pid_file), timeout=5)
    print(f"timed out and killed in {time.monotonic() - start:.2f} s")
    grandchild = int(pid_file.read_text())
    assert not alive(before) and not alive(grandchild)
    assert children.marked_processes(marker, exact=True) == {}
    assert worker.call(pid_and, 1, timeout=120)[0] != before


def test_a_cuda_error_poisons_the_worker_which_is_replaced(worker: Worker) -> None:
    before = worker.call(pid_and, 1, timeout=60)[0]
    with pytest.raises(JobError) as info:
        worker.call(cuda_error, timeout=30)
    assert info.value.poisoned
    assert worker.call(pid_and, 1, timeout=120)[0] != before


def test_workers_die_with_their_parent(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import os, sys, time
        from nsight_agent.engine.worker.pool import WorkerPool
        pool = WorkerPool()
        w = pool.get("cpu")
        w.start()
        print(w.pid, flush=True)
        time.sleep(120)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert alive(child)
    parent.kill()  # SIGKILL: no atexit, no cleanup in the parent
    parent.wait()
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child)


def test_close_ends_every_worker() -> None:
    pool = WorkerPool()
    pid = pool.get("cpu").call(pid_and, 1, timeout=120)[0]
    pool.close()
    assert not alive(pid)


# --- the pre-flight and the timing path in the worker ----------------------------------------


def run_dir_for(req: ProfileRequest, root: Path, name: str) -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    render.write_run_files(req, run_dir, root / ".cuda-cache")
    return run_dir


def variant(entry: str) -> Variant:
    return Variant.model_validate({"name": entry, "entry": entry})


def request(source: str, **kwargs: object) -> ProfileRequest:
    fields: dict[str, object] = {"source": source, "language": "torch", "configs": {"n": [1000]}}
    fields.update(runs=2, warmup=1, **kwargs)
    return ProfileRequest.model_validate(fields)


def test_warm_preflight_matches_the_cold_one(pool: WorkerPool, tmp_path: Path) -> None:
    source = SETUP + "def run(x):\n    return x * 2\n\ndef wrong(x):\n    return x * 3\n"
    variants = [variant("run"), variant("wrong")]
    req = request(source, variants=variants, baseline="run")
    pool.get("cpu").start()
    start = time.monotonic()
    warm = warm_preflight(pool, run_dir_for(req, tmp_path, "warm"), req, "cpu")
    took = time.monotonic() - start
    cold = pipeline.preflight(req, runs_root=tmp_path / "cold", device="cpu")
    assert (warm.ok, warm.stage) == (cold.ok, cold.stage) == (False, "check")
    assert [(c.variant, c.ok) for c in warm.checks] == [(c.variant, c.ok) for c in cold.checks]
    print(f"warm pre-flight {took:.3f} s, cold {cold.seconds:.3f} s")


@pytest.mark.parametrize(
    ("source", "stage", "line"),
    [
        (SETUP + "def run(x)\n    return x\n", "import", 6),
        (SETUP + "def run(x):\n    return x.view(3, -1)\n", "entry", 7),
    ],
    ids=["syntax", "runtime"],
)
def test_a_broken_source_is_rejected_quickly_on_a_warm_worker(
    pool: WorkerPool, tmp_path: Path, source: str, stage: str, line: int
) -> None:
    req = request(source)
    pool.get("cpu").start()
    start = time.monotonic()
    result = warm_preflight(pool, run_dir_for(req, tmp_path, "run"), req, "cpu")
    took = time.monotonic() - start
    assert not result.ok and (result.stage, result.line) == (stage, line)
    print(f"broken source ({stage}) rejected on a warm worker in {took * 1000:.0f} ms")


def test_a_job_that_reads_stdin_reads_nothing_and_takes_no_job(worker: Worker) -> None:
    """The jobs arrive on the worker's stdin: user code reading it gets an empty one at once
    (as in a fresh process), and the same worker serves the next job."""
    pid = worker.call(pid_and, 1, timeout=60)[0]
    assert worker.call(reads_stdin, timeout=60) == ""
    assert worker.call(pid_and, 2, timeout=60) == (pid, 4)


def test_job_state_a_job_changed_are_put_back_before_the_next(worker: Worker) -> None:
    """A source that sets torch's process-wide settings or replaces its functions (at import,
    or in a call) changes its own job only: the next job on the same worker sees them as a
    fresh process would."""
    before = worker.call(torch_now, timeout=60)
    assert (
        before[0] == "torch.float32"
        and before[2] is True
        and before[4] is True
        and before[5] is True
    ), before
    pid = worker.call(pid_and, 1, timeout=60)[0]
    worker.call(changes_torch, timeout=60)
    assert worker.call(torch_now, timeout=60) == before
    assert worker.call(pid_and, 1, timeout=60)[0] == pid  # the same process, not a new one


@pytest.mark.gpu
def test_a_side_stream_a_job_made_current_is_not_the_next_jobs() -> None:
    """Else every later job on that worker would launch on the side stream, which the
    timer's events on the default stream do not wait for."""
    with WorkerPool() as cuda_pool:
        worker = cuda_pool.get("cuda")
        before = worker.call(stream_now, timeout=120)
        worker.call(makes_a_side_stream_current, timeout=120)
        assert worker.call(stream_now, timeout=120) == before


def test_the_environment_a_job_changed_is_put_back(worker: Worker) -> None:
    before = worker.call(environment_now, timeout=60)
    worker.call(sets_environment, timeout=60)
    assert worker.call(environment_now, timeout=60) == before


def test_the_interpreter_state_a_job_changed_is_put_back(worker: Worker) -> None:
    """warnings filters, recursion limit, decimal context, umask, signal handlers, a running
    interval timer, the standard streams and resource limits: the next job on the same worker
    sees them as a fresh process would."""
    before = worker.call(interpreter_now, timeout=60)
    assert before[0] == 1 and before[2] == 28 and before[4:6] == (False, False), before
    pid = worker.call(pid_and, 1, timeout=60)[0]
    worker.call(changes_the_interpreter, timeout=60)
    assert worker.call(interpreter_now, timeout=60) == before
    assert worker.call(pid_and, 1, timeout=60)[0] == pid


def pins_itself_to_one_cpu() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def test_a_job_that_pins_its_cpus_retires_its_worker(pool: WorkerPool) -> None:
    """torch's thread pool keeps the affinity it started with: the next job runs in a fresh
    worker on every CPU, not pinned to the one the job chose."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: pinning to it changes nothing")
    worker = pool.get("cpu")
    pid = worker.call(pid_and, 1, timeout=60)[0]
    worker.call(pins_itself_to_one_cpu, timeout=60)
    assert pool.get("cpu").call(pid_and, 1, timeout=120)[0] != pid


def test_a_setting_that_cannot_be_put_back_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """Such a job retires its worker (``retire``), as one that leaves a thread running does."""
    from nsight_agent.engine.worker import job_state

    value = {"now": 1}

    def put(_: object) -> None:
        raise PermissionError("a hard limit was lowered")

    fake = ("fake limit", lambda: value["now"], put)
    monkeypatch.setattr(job_state, "PROCESS_SETTINGS", [*job_state.PROCESS_SETTINGS, fake])
    with job_state.kept() as outliving:
        value["now"] = 2
    assert outliving == ["fake limit not put back (PermissionError: a hard limit was lowered)"]
    with job_state.kept() as outliving:
        pass
    assert outliving == []


def leaves_a_process() -> None:
    subprocess.Popen(["sleep", "300"])  # a child of the worker, its marker inherited


def runs_a_process_to_its_end() -> None:
    subprocess.run(["true"], check=True)


def starts_a_compile_pool() -> None:
    """A process named as torch.compile's compile workers are, which later jobs reuse."""
    import sys

    pool = "/site-packages/torch/_inductor/compile_worker/__main__.py"
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", pool])


def test_a_job_that_leaves_a_process_running_retires_its_worker(pool: WorkerPool) -> None:
    """The process ends with the worker; the next job is not timed beside it. A library's
    pool (torch.compile's compile workers) stays for the jobs after."""
    worker = pool.get("cpu")
    pid = worker.call(pid_and, 1, timeout=60)[0]
    worker.call(runs_a_process_to_its_end, timeout=60)  # ended with its job: kept
    assert worker.call(pid_and, 1, timeout=60)[0] == pid
    worker.call(starts_a_compile_pool, timeout=60)
    assert worker.call(pid_and, 1, timeout=60)[0] == pid
    worker.call(leaves_a_process, timeout=60)
    assert pool.get("cpu").call(pid_and, 1, timeout=120)[0] != pid


def test_a_job_that_leaves_a_thread_running_retires_its_worker(pool: WorkerPool) -> None:
    """Its answer stands; the next job runs in a fresh worker, not beside that thread."""
    worker = pool.get("cpu")
    pid = worker.call(pid_and, 1, timeout=60)[0]
    worker.call(spins_briefly, timeout=60)  # a thread of its own that ended: kept
    assert worker.call(pid_and, 1, timeout=60)[0] == pid
    assert worker.call(leaves_a_thread, timeout=60) is None
    assert pool.get("cpu").call(pid_and, 1, timeout=120)[0] != pid


def test_os_exit_in_the_source_is_a_died_harness_and_the_worker_is_replaced(
    pool: WorkerPool, tmp_path: Path
) -> None:
    before = pool.get("cpu").call(pid_and, 1, timeout=120)[0]
    req = request("import os\nos._exit(3)\n" + SETUP + "def run(x):\n    return x\n")
    result = warm_preflight(pool, run_dir_for(req, tmp_path, "run"), req, "cpu")
    assert not result.ok and "died" in result.errors[0]
    assert pool.get("cpu").call(pid_and, 1, timeout=120)[0] != before


def test_a_source_that_changes_directory_still_leaves_its_files_in_its_run(
    pool: WorkerPool, tmp_path: Path
) -> None:
    """The harness writes its manifest where it started, not into the folder user code moved
    to (that run read as "wrote no manifest", its files left in another folder)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    moves = f"import os\nos.chdir({str(elsewhere)!r})\n"
    req = request(moves + SETUP + "def run(x):\n    return x\n")
    result = warm_preflight(pool, run_dir_for(req, tmp_path, "run"), req, "cpu")
    assert result.ok, result.errors
    assert sorted(p.name for p in elsewhere.iterdir()) == []


def test_time_job_on_a_rendered_run(pool: WorkerPool, tmp_path: Path) -> None:
    source = SETUP + "def run(x):\n    return x * 2\n\ndef other(x):\n    return x + x\n"
    variants = [variant("run"), variant("other")]
    req = request(source, variants=variants, baseline="run", configs={"n": [1000, 4000]})
    run_dir = run_dir_for(req, tmp_path, "run")
    options = timing.TimingOptions(min_runs=5, max_runs=10)
    start = time.monotonic()
    result = pool.run("cpu", TimeJob(str(run_dir), "cpu", options), timeout=120)
    took = time.monotonic() - start
    assert isinstance(result, timing.TimingResult)
    frame = result.frame()
    assert list(frame["Annotation"]) == ["run", "other", "run", "other"]
    assert frame["OutputOK"].all() and set(frame["Method"]) == {"perf_counter"}
    print(f"timing job of 2 variants x 2 configs on a warm worker: {took:.3f} s")
