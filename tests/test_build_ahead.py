"""Builds ahead of the GPU queue, with stand-in build children (no compiler): what is planned,
that jobs build at once within one bound and hold no GPU slot while they build, that the
harness reads a build made ahead (built, or the candidate's compiler errors as its error
row), and that a cancel kills the build. Every wait is on an event or a file, never a time."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nsight_agent.engine import pipeline
from nsight_agent.engine.executors import local as ex
from nsight_agent.engine.executors.build_ahead import Bound, BuildsAhead
from nsight_agent.engine.harness import ahead_record, build_plan, cuda_build, ext_builds
from nsight_agent.engine.pipeline import Job, Progress
from nsight_agent.engine.store.runs import PreflightResult
from nsight_agent.errors import RunCancelledError
from nsight_agent.judge.builds import build_note
from nsight_agent.request import ProfileRequest

PLAIN = """
import torch


def setup(n, device="cpu"):
    return torch.ones(n, device=device)


def run(x):
    return x * 2
"""

# Says it builds an extension (the text the planner looks for) without calling a compiler:
# the stand-in child "builds" it by writing a library file and the marker into its folder.
BUILDS = PLAIN + "\n# from torch.utils.cpp_extension import load_inline  (tag {tag})\n"

# The stand-in build child: says it started (with its pid and its own child's), waits for its
# go file, then leaves what its result file asks for (a built library, or compiler errors).
FAKE_CHILD = r"""
import json, os, subprocess, sys, time
from pathlib import Path
gate, task_file, result_file = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
task = json.loads(task_file.read_text())
name = Path(task["folder"]).name  # one per source: ext-<its hash>
sleeper = subprocess.Popen(["sleep", "600"])
(gate / f"started-{name}").write_text(json.dumps([os.getpid(), sleeper.pid]))
while not (gate / f"go-{name}").exists():
    time.sleep(0.02)
sleeper.kill()
wanted = gate / f"result-{name}.json"
result = json.loads(wanted.read_text()) if wanted.exists() else {"ok": True, "seconds": 7.5}
if result.get("ok"):
    folder = Path(task["folder"])
    (folder / "fake_ext").mkdir(parents=True, exist_ok=True)
    (folder / "fake_ext" / "fake_ext.so").write_text("")
    (folder / "built.json").write_text("{}")
    result["compiled"] = ["fake_ext/fake_ext.so"]
Path(result_file).write_text(json.dumps(result))
"""


class Gate:
    """The stand-in children's folder: who started, and letting each one finish."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.script = folder / "fake_child.py"
        self.script.write_text(FAKE_CHILD)

    def command(self, task: Path, result: Path) -> list[str]:
        return [sys.executable, str(self.script), str(self.folder), str(task), str(result)]

    def started(self) -> set[str]:
        return {p.name.removeprefix("started-") for p in self.folder.glob("started-*")}

    def pids(self, name: str) -> list[int]:
        return list(json.loads((self.folder / f"started-{name}").read_text()))

    def go(self, name: str, result: dict[str, Any] | None = None) -> None:
        if result is not None:
            (self.folder / f"result-{name}.json").write_text(json.dumps(result))
        (self.folder / f"go-{name}").write_text("")


def ext(root: Path, source: str) -> str:
    """The name of ``source``'s build folder under the runs root ``root``."""
    return ext_builds.folder_for(root / pipeline.CUDA_CACHE, source).name


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def request(*sources: str) -> ProfileRequest:
    """A baseline of PLAIN and one variant (module ``variant_<i>``) per source."""
    variants = [{"name": "base", "entry": "run"}]
    variants += [
        {"name": f"v{i}", "entry": "run", "source": s} for i, s in enumerate(sources, start=1)
    ]
    return ProfileRequest.model_validate(
        {"source": PLAIN, "language": "torch", "variants": variants, "configs": [{"n": 4}]}
    )


class Recorder:
    """A stand-in job function: the jobs that ran, in order."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def __call__(self, job: Job, cancel: threading.Event | None, say: Progress | None) -> str:
        self.ran.append(job.name)
        return job.name


def executor(gate: Gate, slots: int, rec: Recorder | None = None) -> ex.LocalExecutor:
    builds = BuildsAhead(command=gate.command, bound=Bound(slots), headers=False)
    return ex.LocalExecutor(["cpu"], job_function=rec, builds=builds, targets=0)


def test_the_plan_is_the_sources_that_build_and_are_not_built(tmp_path: Path) -> None:
    a, b = BUILDS.format(tag=1), BUILDS.format(tag=2)
    found = build_plan.plan(request(a, b, a, PLAIN), tmp_path)
    # variant 3 has variant 1's text: one folder, built once; PLAIN builds nothing
    assert [(t.kind, t.module) for t in found.tasks] == [("ext", "variant_1"), ("ext", "variant_2")]
    built = ext_builds.folder_for(tmp_path, b)
    built.mkdir(parents=True)
    (built / ext_builds.MARKER).write_text("{}")
    assert [t.module for t in build_plan.plan(request(a, b), tmp_path).tasks] == ["variant_1"]
    # the cuda language: a literal CUDA_SOURCE is built ahead, a computed one in the harness
    literal = 'CUDA_SOURCE = "__global__ void k() {}"\nCUDA_FUNCTIONS = ["k"]\n' + PLAIN
    cuda = ProfileRequest.model_validate(
        {"source": literal, "language": "cuda", "configs": [{"n": 4}]}
    )
    (task,) = build_plan.plan(cuda, tmp_path).tasks
    assert (task.kind, task.source, task.functions) == ("cuda", "__global__ void k() {}", ["k"])
    key = cuda_build.source_key(task.source, ["k"], cuda_build.CUDA_FLAGS)
    assert task.folder == str(tmp_path / key)
    computed = literal.replace('"__global__ void k() {}"', '"__global__ " + "void k() {}"')
    cuda = ProfileRequest.model_validate(
        {"source": computed, "language": "cuda", "configs": [{"n": 4}]}
    )
    assert build_plan.plan(cuda, tmp_path).tasks == []


def test_jobs_and_candidates_build_at_once_within_the_bound(tmp_path: Path) -> None:
    gate, rec = Gate(tmp_path / "gate"), Recorder()
    root = tmp_path / "runs"
    one, two, three = (BUILDS.format(tag=t) for t in (1, 2, 3))
    with executor(gate, slots=2, rec=rec) as pool:
        # one call with two candidates, and another call with one
        first = pool.submit(Job(request(one, two), root, name="a"))
        until(lambda: gate.started() == {ext(root, one), ext(root, two)}, "both building")
        second = pool.submit(Job(request(three), root, name="b"))
        info = pool.pool_info()["building"]
        assert info == {"jobs": 2, "running": 2, "slots": 2}, info
        assert ext(root, three) not in gate.started()  # the bound holds the third back
        gate.go(ext(root, one))
        until(lambda: ext(root, three) in gate.started(), "the third build took the freed slot")
        gate.go(ext(root, two))
        assert first.result(60) == "a"
        gate.go(ext(root, three))
        assert second.result(60) == "b"
    assert rec.ran == ["a", "b"]


def test_a_job_that_builds_holds_no_gpu_slot(tmp_path: Path) -> None:
    gate, rec = Gate(tmp_path / "gate"), Recorder()
    root = tmp_path / "runs"
    built, slow = BUILDS.format(tag="built"), BUILDS.format(tag=1)
    folder = ext_builds.folder_for(root / pipeline.CUDA_CACHE, built)
    folder.mkdir(parents=True)
    (folder / ext_builds.MARKER).write_text("{}")  # in the cache: it queues at once
    said: list[str] = []
    with executor(gate, slots=4, rec=rec) as pool:
        building = pool.submit(
            Job(request(slow), root, name="building"), on_progress=lambda d, t, m: said.append(m)
        )
        until(lambda: gate.started() == {ext(root, slow)}, "the build started")
        ready = pool.submit(Job(request(built), root, name="ready"))
        assert ready.result(60) == "ready"  # ran on the only slot while the other built
        assert not building.done() and pool.pool_info()["building"]["jobs"] == 1
        gate.go(ext(root, slow))
        assert building.result(60) == "building"
    assert rec.ran == ["ready", "building"]
    assert said[0] == "building 1 source(s) before queueing for a GPU"


def test_cancelling_a_job_while_it_builds_kills_the_build(tmp_path: Path) -> None:
    gate, rec = Gate(tmp_path / "gate"), Recorder()
    root, source = tmp_path / "runs", BUILDS.format(tag=1)
    with executor(gate, slots=2, rec=rec) as pool:
        handle = pool.submit(Job(request(source), root, name="c"))
        until(lambda: gate.started() == {ext(root, source)}, "the build started")
        pids = gate.pids(ext(root, source))  # the child and the process it started
        handle.cancel()
        with pytest.raises(RunCancelledError, match="while its sources were built"):
            handle.result(60)
        until(lambda: not any(alive(p) for p in pids), "the build's processes ended")
        assert pool.pool_info()["building"] == {"jobs": 0, "running": 0, "slots": 2}
    assert rec.ran == []


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie is dead, waiting for its reaper


def test_the_harness_reads_what_was_built_ahead(tmp_path: Path) -> None:
    """Real pre-flights (a cold child on the CPU) after stand-in builds: a candidate built
    ahead is found built and said so with its build's seconds; one whose build failed is its
    own error row with the compiler's lines, not compiled again; the baseline runs."""
    gate, root = Gate(tmp_path / "gate"), tmp_path / "runs"
    good, bad = BUILDS.format(tag="good"), BUILDS.format(tag="bad")
    errors = "main.cpp:3:5: error: expected ';' before '}' token"
    with executor(gate, slots=2) as pool:  # the real job function: run_job
        handle = pool.submit(Job(request(good, bad), root, mode="preflight"))
        until(lambda: gate.started() == {ext(root, good), ext(root, bad)}, "both building")
        gate.go(ext(root, good))
        gate.go(ext(root, bad), {"ok": False, "error": errors})
        pre = handle.result(300)
    assert isinstance(pre, PreflightResult)
    assert pre.dropped["v2"].verdict == "error", pre.dropped
    assert f"the torch extension did not compile: {errors}" in pre.dropped["v2"].message
    assert [c.variant for c in pre.checks if c.ok] == ["base", "v1"], pre.checks
    (built,) = pre.builds
    assert (built["module"], built["ahead"], built["cache_hit"]) == ("variant_1", True, False)
    assert built["seconds"] == 7.5 and built["compiled"] == ["fake_ext/fake_ext.so"]
    note = build_note(pre, request(good, bad), 3.0)
    assert note == (
        "compile: built ahead, before this call queued for a GPU and holding none (not in its "
        "3.0 s): 'v1': compiled in 7.5 s, 2 builds at once"
    )
    # the job has ended: its records go (as it is handed back), so a later call reads
    # "built before"
    folders = [ext_builds.folder_for(root / pipeline.CUDA_CACHE, s) for s in (good, bad)]
    until(lambda: all(ahead_record.read(f) is None for f in folders), "the records removed")


def test_a_record_whose_owner_ended_is_ignored_and_removed(tmp_path: Path) -> None:
    ahead_record.write(tmp_path, {"ok": False, "error": "x"})
    assert ahead_record.failure(ahead_record.read(tmp_path)) == "x"  # ours: live
    data = json.loads((tmp_path / ahead_record.RECORD).read_text())
    data["owner"] = [data["owner"][0], -1]  # the pid reused by another process
    (tmp_path / ahead_record.RECORD).write_text(json.dumps(data))
    assert ahead_record.read(tmp_path) is None
    assert not (tmp_path / ahead_record.RECORD).exists()


def test_the_cuda_source_that_failed_ahead_raises_its_errors_without_compiling(
    tmp_path: Path,
) -> None:
    source, functions = "__global__ void k() { oops }", ["k"]
    folder = tmp_path / cuda_build.source_key(source, functions, cuda_build.CUDA_FLAGS)
    ahead_record.write(folder, {"ok": False, "error": "line 1: error: oops", "line": 1})
    with pytest.raises(cuda_build.CompileError) as err:
        cuda_build.build(source, functions, tmp_path)
    assert (err.value.message, err.value.line) == ("line 1: error: oops", 1)
    assert not any(folder.glob("*.cu")) and not (folder / "build.ninja").exists()


def test_the_note_says_builds_ahead_apart_from_the_call() -> None:
    req = request(BUILDS.format(tag=1), BUILDS.format(tag=2))
    builds = [
        {"module": "variant_1", "seconds": 54.2, "cache_hit": False, "ahead": True},
        {"module": "variant_2", "seconds": 20.0, "cache_hit": False},
    ]
    pre = PreflightResult(ok=True, device="cuda", seconds=30.0, builds=builds)
    stages = {"pre-flight": 30.0, "ncu": 12.0}
    assert build_note(pre, req, 45.0, stages) == (
        "compile: 20.0 s of this call's 45.0 s, before measuring and outside every measured "
        "time ('v2': compiled in 20.0 s); built ahead, before this call queued for a GPU and "
        "holding none (not in its 45.0 s): 'v1': compiled in 54.2 s; the rest: pre-flight "
        "10.0 s beside the compile, ncu 12.0 s"
    )
    builds[1].update(ahead=True, parallel=3, waited=4.0)
    pre = PreflightResult(ok=True, device="cuda", seconds=30.0, builds=builds)
    assert build_note(pre, req, 45.0, stages) == (
        "compile: built ahead, before this call queued for a GPU and holding none (not in its "
        "45.0 s): 'v1': compiled in 54.2 s; 'v2': compiled in 20.0 s, 3 builds at once, after "
        "4.0 s waiting for a build slot; the rest: pre-flight 30.0 s, ncu 12.0 s"
    )
