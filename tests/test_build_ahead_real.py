"""Real builds ahead through the local executor. A C++ ``load_inline`` candidate (a C++
compiler and ninja, no GPU): built by the build child before the job queued, loaded by the
harness without compiling again; then torch's header precompiled in the background for its
flags, and the build's own C++ compile reads it and makes the same object file as without
it. On a GPU (``gpu``): CUDA candidates and the ``cuda`` language built ahead, and an ncu run
that compiles nothing."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nsight_agent.engine import pipeline
from nsight_agent.engine.executors.local import LocalExecutor
from nsight_agent.engine.harness import ext_builds, host_pch
from nsight_agent.engine.pipeline import Job
from nsight_agent.engine.store.runs import PreflightResult
from nsight_agent.request import ProfileRequest

pytestmark = pytest.mark.skipif(
    shutil.which("ninja") is None or shutil.which("c++") is None,
    reason="needs a C++ compiler and ninja to build a torch extension",
)

PLAIN = """
import torch


def setup(n, device="cpu"):
    return torch.ones(n, device=device)


def run(x):
    return x * 3
"""

CANDIDATE = """
import torch
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="ahead_tag", cpp_sources=["int64_t tag() { return 3; }"], functions=["tag"])


def run(x):
    return x * ext.tag()
"""


def until(condition: Callable[[], bool], what: str, limit: float = 900) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.5)


def ninja_values(build_dir: Path) -> dict[str, str]:
    values = {}
    for line in (build_dir / "build.ninja").read_text().splitlines():
        name, sep, value = line.partition(" = ")
        if sep:
            values[name.strip()] = value
    return values


@pytest.mark.timeout(2400)
def test_a_candidate_built_ahead_is_loaded_and_its_header_precompiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(host_pch.DIR_ENV, str(tmp_path / "pch"))
    request = ProfileRequest.model_validate(
        {
            "source": PLAIN,
            "language": "torch",
            "variants": [
                {"name": "base", "entry": "run"},
                {"name": "ext", "entry": "run", "source": CANDIDATE},
            ],
            "configs": [{"n": 4}],
            "timeout_s": 900,
        }
    )
    root = tmp_path / "runs"
    with LocalExecutor(["cpu"], targets=0) as pool:  # run_job, builds ahead by child
        pre = pool.submit(Job(request, root, mode="preflight")).result(1200)
        assert isinstance(pre, PreflightResult) and pre.ok, pre.errors
        assert [c.ok for c in pre.checks] == [True] * len(pre.checks) and pre.checks
        (built,) = pre.builds
        assert built["ahead"] and not built["cache_hit"] and len(built["compiled"]) == 1, built
        # the build asked for torch's header for its flags; the executor makes it
        (header,) = [p.parent for p in (tmp_path / "pch").glob(f"*/{host_pch.COMMAND}")]
        until(lambda: (header / host_pch.HEADER).is_file(), "the header precompiled")
    folder = ext_builds.folder_for(root / pipeline.CUDA_CACHE, CANDIDATE)
    (build_dir,) = [p.parent for p in folder.glob("*/build.ninja")]
    values = ninja_values(build_dir)
    cflags = shlex.split(values["cflags"])
    assert f"-I{header}" in cflags
    objects = []
    for flags, out in ((cflags, "with.o"), ([f for f in cflags if f != f"-I{header}"], "none.o")):
        argv = [*shlex.split(values["cxx"]), "-H", *flags, "-c", "main.cpp", "-o"]
        done = subprocess.run(
            [*argv, str(tmp_path / out)], cwd=build_dir, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        objects.append((tmp_path / out).read_bytes())
        used = f"! {header / host_pch.HEADER}" in done.stderr  # gcc -H: "!" a header it read
        assert used == (out == "with.o"), done.stderr[:500]
    assert objects[0] == objects[1]  # the same object file, read from the header or not


CUDA_CANDIDATE = """
import torch
from torch.utils.cpp_extension import load_inline

CUDA = r'''
__global__ void scale_kernel(const float* x, float* y, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * {k}f;
}}
torch::Tensor scale(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    int n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}}
'''
ext = load_inline(
    name="ahead_scale",
    cpp_sources=["torch::Tensor scale(torch::Tensor x);"],
    cuda_sources=[CUDA],
    functions=["scale"],
)


def run(x):
    return ext.scale(x) / {k}
"""

CUDA_BASE = """
import torch


def setup(n, device="cuda"):
    return torch.randn(n, device=device)


def run(x):
    return x * 1.0
"""


@pytest.mark.gpu
def test_cuda_candidates_build_ahead_and_the_ncu_run_compiles_nothing(tmp_path: Path) -> None:
    """Two CUDA candidates of one call built at once before it queued for the GPU; the
    pre-flight loads both (built ahead, for the present arch) and the ncu process too."""
    request = ProfileRequest.model_validate(
        {
            "source": CUDA_BASE,
            "language": "torch",
            "variants": [
                {"name": "base", "entry": "run"},
                {"name": "two", "entry": "run", "source": CUDA_CANDIDATE.format(k=2.0)},
                {"name": "three", "entry": "run", "source": CUDA_CANDIDATE.format(k=3.0)},
            ],
            "configs": [{"n": 1 << 16}],
            "runs": 2,
        }
    )
    with LocalExecutor(targets=0) as pool:
        run = pool.profile(request, runs_root=tmp_path)
    assert [c.ok for c in run.checks] == [True] * len(run.checks) and run.checks
    assert run.preflight is not None
    builds = run.preflight.builds
    assert [(b["ahead"], bool(b["compiled"])) for b in builds] == [(True, True)] * 2, builds
    assert all(b.get("parallel") == 2 for b in builds), builds
    manifest = json.loads((run.run_dir / "manifest.json").read_text())
    # The ncu process found both built ahead (a build of its own would have said ahead False
    # and its own seconds), and ninja ran each target once: a rebuild adds a second line.
    evidence = ninja_evidence(tmp_path / pipeline.CUDA_CACHE)
    assert [b["ahead"] for b in manifest["builds"]] == [True, True], (manifest["builds"], evidence)
    assert len(evidence) == 2, evidence
    for found in evidence.values():
        assert isinstance(found, dict) and found["log"], evidence
        targets = [line.split("\t")[3] for line in found["log"] if not line.startswith("#")]
        assert sorted(targets) == sorted(set(targets)) and len(targets) == 3, evidence


def ninja_evidence(cache: Path) -> dict[str, object]:
    """Each build folder's ninja log and flags: what ninja ran, and with which command."""
    found: dict[str, object] = {}
    for ninja in sorted(cache.glob("ext-*/*/build.ninja")):
        log = ninja.parent / ".ninja_log"
        found[str(ninja.parent.relative_to(cache))] = {
            "log": log.read_text().splitlines() if log.is_file() else None,
            "flags": ninja_values(ninja.parent),
        }
    return found


@pytest.mark.gpu
def test_the_cuda_language_builds_ahead(tmp_path: Path) -> None:
    example = Path(__file__).parents[1] / "examples" / "contract" / "cuda_vector_add.py"
    request = ProfileRequest.model_validate(
        {
            "source": example.read_text(),
            "language": "cuda",
            "variants": [{"name": "torch", "entry": "reference"}, {"name": "cuda", "entry": "run"}],
            "baseline": "torch",
            "configs": [{"n": 1 << 16}],
            "runs": 2,
        }
    )
    with LocalExecutor(targets=0) as pool:
        pre = pool.submit(Job(request, tmp_path, mode="preflight")).result(900)
    assert isinstance(pre, PreflightResult) and pre.ok, pre.errors
    assert pre.cuda_build is not None and pre.cuda_build["ahead"], pre.cuda_build
    assert not pre.cuda_build["cache_hit"] and pre.cuda_build["mode"] == "load_inline"
