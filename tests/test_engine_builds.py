"""A candidate's own torch extension (``load_inline`` at import) is built once, in a folder of
its source's hash. Real C++-only builds on the CPU: the same code path as
a CUDA candidate's, minus nvcc.

The module's tests share one runs root, in order: the first call builds both candidates (one
``name=``, different code), the second compiles nothing, a cold process then finds stale torch
batons left in both folders and breaks them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from nsight_agent.engine import pipeline
from nsight_agent.engine.harness import ext_builds
from nsight_agent.engine.process import child_env
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.request import ProfileRequest
from nsight_agent.service.summaries import compare_summary

pytestmark = [
    pytest.mark.skipif(
        shutil.which("ninja") is None or shutil.which("c++") is None,
        reason="needs a C++ compiler and ninja to build a torch extension",
    ),
    # one test worker for the module: the stale-lock test reuses the first test's builds
    pytest.mark.xdist_group("engine_builds"),
]

# Both candidates call their extension "fast_matmul"; each is right only with its own library
# (3 / 1.5 == 2), so a shared or swapped build fails the output check.
CANDIDATE = """
import torch
from torch.utils.cpp_extension import load_inline

ext = load_inline(
    name="fast_matmul",
    cpp_sources=["int64_t tag() {{ return {tag}; }}"],
    functions=["tag"],
    extra_cflags=["-O0"],
)


def setup(n, device="cpu"):
    return torch.ones(n, device=device)


def run(x):
    return x * ext.tag() / {scale}
"""


def request() -> ProfileRequest:
    return ProfileRequest.model_validate(
        {
            "source": CANDIDATE.format(tag=2, scale=1),
            "language": "torch",
            "variants": [
                {"name": "mine", "entry": "run"},
                {"name": "theirs", "entry": "run", "source": CANDIDATE.format(tag=3, scale=1.5)},
            ],
            "configs": [{"n": 8}],
            "runs": 2,
            "warmup": 1,
            "timeout_s": 500,
        }
    )


def beside_mine(mine: str, name: str, source: str) -> ProfileRequest:
    """``request()`` with ``mine`` as the baseline's source and one candidate of its own."""
    return ProfileRequest.model_validate(
        {
            **request().model_dump(),
            "source": mine,
            "variants": [
                {"name": "mine", "entry": "run"},
                {"name": name, "entry": "run", "source": source},
            ],
        }
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def pool() -> Any:
    with WorkerPool() as p:
        yield p


def test_same_name_builds_apart_and_the_second_call_compiles_nothing(
    root: Path, pool: WorkerPool
) -> None:
    first = pipeline.time_request(request(), pool, runs_root=root)
    assert [c.ok for c in first.checks] == [True, True], first.checks
    assert first.preflight is not None
    builds = first.preflight.builds
    assert [b["module"] for b in builds] == ["user_source", "variant_1"]
    assert len({b["folder"] for b in builds}) == 2
    assert all(not b["cache_hit"] and len(b["compiled"]) == 1 for b in builds)
    # One name= in each source, one library name per source (the warm worker loads both).
    assert builds[0]["compiled"] != builds[1]["compiled"]
    assert all(b["compiled"][0].startswith("fast_matmul_") for b in builds)
    # Built side by side, one child process each, before the imports loaded them.
    assert [b.get("parallel") for b in builds] == [2, 2], builds

    second = pipeline.time_request(request(), pool, runs_root=root)  # same warm worker
    assert [c.ok for c in second.checks] == [True, True]
    assert second.preflight is not None
    assert [(b["cache_hit"], b["compiled"]) for b in second.preflight.builds] == [(True, [])] * 2
    assert [b["folder"] for b in second.preflight.builds] == [b["folder"] for b in builds]
    # The answer states the compile apart from the measuring.
    said = [w for w in compare_summary(first).warnings or [] if w.startswith("compile: ")]
    assert len(said) == 1 and "'mine': compiled in" in said[0] and "'theirs': compiled" in said[0]
    assert said[0].count("2 sources at once") == 2, said
    # and where the rest of the call went, from the run's own stage seconds
    assert "; the rest: pre-flight " in said[0] and " s beside the compile" in said[0], said
    assert ", timing " in said[0], said
    said = [w for w in compare_summary(second).warnings or [] if w.startswith("compile: ")]
    assert len(said) == 1 and said[0].count("built before, loaded in") == 2


def test_a_candidate_that_does_not_compile_is_its_own_row_beside_a_parallel_build(
    root: Path, pool: WorkerPool
) -> None:
    broken = CANDIDATE.format(tag="this is not C++", scale=1)
    req = beside_mine(CANDIDATE.format(tag=4, scale=2), "broken", broken)
    run = pipeline.time_request(req, pool, runs_root=root)
    assert run.dropped["broken"].verdict == "error", run.dropped
    message = run.dropped["broken"].message  # the compiler's lines, not ninja's commands
    assert "the torch extension did not compile: " in message, message
    assert "error" in message.split("did not compile: ", 1)[1].lower(), message
    assert [c.ok for c in run.checks if c.variant == "mine"] == [True]
    assert run.preflight is not None
    assert [(b["module"], b.get("parallel")) for b in run.preflight.builds] == [("user_source", 2)]


def test_a_stale_torch_lock_does_not_block_the_next_build(root: Path) -> None:
    # The request's own two build folders, as its pre-flight names them: built by the first
    # test when it ran on this worker (then a cache hit here), else built now. Other tests
    # leave folders of their own beside them, so the folders are not found by listing.
    first = pipeline.preflight(request(), runs_root=root, device="cpu")
    assert first.ok, first.errors
    folders = [Path(b["folder"]) for b in first.builds]
    assert len(folders) == 2 and all(f.is_dir() for f in folders), folders
    for folder in folders:
        (next(folder.glob("fast_matmul_*")) / "lock").write_text("")  # a killed build's
    start = time.monotonic()
    pre = pipeline.preflight(request(), runs_root=root, device="cpu")  # a new process
    assert pre.ok, pre.errors
    assert time.monotonic() - start < 120
    assert [(b["cache_hit"], len(b["stale_locks"])) for b in pre.builds] == [(True, 1)] * 2


IMPORT = """
import json, sys
from pathlib import Path
from nsight_agent.engine.harness import runtime
builds = runtime.Builds(sys.argv[1])
module = runtime.load_user_module("candidate", sys.argv[2], builds)
print(json.dumps({"tag": module.run(1), "builds": builds.records}))
"""


def test_two_processes_building_one_folder_both_load_it_and_one_compiles(tmp_path: Path) -> None:
    source = tmp_path / "candidate.py"
    source.write_text(CANDIDATE.format(tag=7, scale=1))
    argv = [sys.executable, "-c", IMPORT, str(tmp_path / "cache"), str(source)]
    procs = [
        subprocess.Popen(argv, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=500) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err.decode()[-2000:] for _, err in outs]
    results = [json.loads(out.decode().splitlines()[-1]) for out, _ in outs]
    assert [r["tag"] for r in results] == [7, 7]
    hits = sorted(r["builds"][0]["cache_hit"] for r in results)
    assert hits == [False, True]  # the second waited on our lock, then found the library


def test_a_held_lock_is_waited_on_up_to_the_limit(tmp_path: Path) -> None:
    folder = tmp_path / "ext-0"
    held = pytest.raises(ext_builds.BuildLockTimeout, match=f"process {os.getpid()}")
    with ext_builds.build_lock(folder), held, ext_builds.build_lock(folder, timeout=0.3):
        pass
    with ext_builds.build_lock(folder, timeout=0.3):  # released: taken at once
        pass


def test_only_sources_that_build_extensions_get_a_folder(tmp_path: Path) -> None:
    plain = tmp_path / "plain.py"
    plain.write_text("X = 1\n")
    builds = ext_builds.Builds(tmp_path / "cache")
    with builds.around("plain", plain):
        pass
    assert builds.records == [] and not (tmp_path / "cache").exists()
    a, b = "load_inline(name='k', cpp_sources=['1'])", "load_inline(name='k', cpp_sources=['2'])"
    assert ext_builds.folder_for(tmp_path, a) != ext_builds.folder_for(tmp_path, b)
    assert ext_builds.folder_for(tmp_path, a) == ext_builds.folder_for(tmp_path, a)


CUDA_CANDIDATE = """
import torch
from torch.utils.cpp_extension import load_inline
ext = load_inline(
    name="fast_matmul",
    cpp_sources="torch::Tensor twice(torch::Tensor x);",
    cuda_sources="torch::Tensor twice(torch::Tensor x) { return x * 2; }",
    functions=["twice"],
)
def setup(n, device="cpu"):
    return torch.ones(n, device=device)
def run(x):
    return ext.twice(x)
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with a GPU can build it")
def test_a_cuda_candidate_on_a_machine_without_a_gpu_is_refused_before_any_build(
    root: Path, pool: WorkerPool
) -> None:
    """No compiler runs for a CUDA extension this machine could never run: the candidate is an
    error row saying what is missing and where to run it, the baseline is measured, and no
    child build was started for it (its folder has no build log)."""
    assert ext_builds.cuda_build_impossible(CUDA_CANDIDATE) is not None
    assert ext_builds.cuda_build_impossible(CANDIDATE.format(tag=2, scale=1)) is None  # C++
    req = beside_mine(CANDIDATE.format(tag=5, scale=2.5), "cuda", CUDA_CANDIDATE)
    run = pipeline.time_request(req, pool, runs_root=root)
    message = run.dropped["cuda"].message
    assert run.dropped["cuda"].verdict == "error", run.dropped
    assert "cannot be built here: it builds a CUDA extension" in message, message
    assert "no NVIDIA GPU" in message and "run it on a machine with an NVIDIA GPU" in message
    assert [c.ok for c in run.checks if c.variant == "mine"] == [True]
    cuda_folder = ext_builds.folder_for(root / pipeline.CUDA_CACHE, CUDA_CANDIDATE)
    assert not Path(f"{cuda_folder}.log").exists()
