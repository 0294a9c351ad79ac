"""Builds outside the GPU's turn, measured (a GPU machine with the CUDA toolkit):

(a) ``calls``: four concurrent compare calls (the executor's timing path, as the server runs
    them), each with one CUDA ``load_inline`` candidate of its own, against one such call
    alone: the ratio of wall times (target <= 1.5x);
(b) ``build``: one such candidate's build by our path (the build child the executor runs)
    against torch's default ``load_inline`` of the same source in a fresh folder, each in a
    process of its own: the ratio of their build seconds (target <= 0.7x). Ours is measured
    before and after torch's header is precompiled for its flags (``host_pch``; once per
    machine and set of flags, its cost reported beside).

Every source is new (a constant of its own: no cache hits); every cache folder is fresh.

    python -m bench.build_ahead [--parts build,calls] [--json PATH] [--cpu]
    python -m bench run builds        # the suite: results under bench/results/builds/
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

PY = sys.executable

CANDIDATE = """
import torch
from torch.utils.cpp_extension import load_inline

CUDA = r'''
__global__ void scale_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * @K@f;
}
torch::Tensor scale(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
'''
ext = load_inline(
    name="bench_scale",
    cpp_sources=["torch::Tensor scale(torch::Tensor x);"],
    cuda_sources=[CUDA],
    functions=["scale"],
)


def setup(n, device="cuda"):
    return torch.randn(n, device=device)


def run(x):
    return ext.scale(x)
"""

# --cpu: the same shape built from C++ alone, run on the CPU (a smoke run without a GPU).
CPU_CANDIDATE = """
import torch
from torch.utils.cpp_extension import load_inline

ext = load_inline(
    name="bench_scale",
    cpp_sources=["torch::Tensor scale(torch::Tensor x) { return x * @K@; }"],
    functions=["scale"],
)


def setup(n, device="cpu"):
    return torch.randn(n, device=device)


def run(x):
    return ext.scale(x)
"""

BASELINE = """
import torch


def setup(n, device="cuda"):
    return torch.randn(n, device=device)


def run(x):
    return x * @K@
"""

# torch's own path: import the same source in a fresh process, its extensions in a fresh
# folder (TORCH_EXTENSIONS_DIR), and time the import (the load_inline in it) alone.
TORCH_DEFAULT = """
import json, runpy, sys, time
import torch
start = time.monotonic()
runpy.run_path(sys.argv[1])
print(json.dumps({"seconds": time.monotonic() - start}))
"""


def new_constant() -> str:
    """A constant no earlier source had: its build can hit no cache."""
    return f"{1.0 + (uuid.uuid4().int % 10**6) / 10**7:.7f}"


def candidate(k: str | None = None) -> str:
    shape = CPU_CANDIDATE if os.environ.get("BENCH_BUILDS_CPU") else CANDIDATE
    return shape.replace("@K@", k or new_constant())


def measured(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """A child's wall and CPU seconds (its whole process tree), and the JSON it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    out = json.loads(lines[-1]) if lines else {}
    return {
        "rc": done.returncode,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        **out,
        **({"tail": done.stderr[-1500:]} if done.returncode else {}),
    }


def torch_default(folder: Path) -> dict[str, Any]:
    folder.mkdir(parents=True)
    source = folder / "candidate.py"
    source.write_text(candidate())
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(folder / "torch_extensions")}
    return measured([PY, "-c", TORCH_DEFAULT, str(source)], env)


def ours(folder: Path) -> dict[str, Any]:
    """The build child as the executor runs it, on a new source, in a fresh cache folder."""
    from nsight_agent.engine.executors.build_ahead import child_command
    from nsight_agent.engine.harness import build_plan
    from nsight_agent.request import ProfileRequest

    request = ProfileRequest.model_validate(
        {
            "source": BASELINE.replace("@K@", "2.0"),
            "language": "torch",
            "variants": [
                {"name": "base", "entry": "run"},
                {"name": "cand", "entry": "run", "source": candidate()},
            ],
            "configs": [{"n": 1 << 20}],
        }
    )
    folder.mkdir(parents=True)
    plan = build_plan.plan(request, folder / "cache")
    (task,) = plan.tasks
    for name, text in plan.files.items():
        (folder / name).write_text(text)
    details = {"dir": str(folder), "cache": str(plan.cache), "language": plan.language}
    (folder / "task.json").write_text(json.dumps({**task.to_dict(), **details}))
    result = measured(child_command(folder / "task.json", folder / "result.json"))
    built = json.loads((folder / "result.json").read_text())
    return {**result, **built}


def build_part(scratch: Path) -> dict[str, Any]:
    from nsight_agent.engine.harness import host_pch

    rows: dict[str, Any] = {"torch_default": torch_default(scratch / "torch")}
    rows["ours_cold"] = ours(scratch / "ours-cold")
    wanted = host_pch.wanted()
    start = time.monotonic()
    made = [host_pch.build(folder) for folder in wanted]
    rows["header"] = {"made": made, "seconds": round(time.monotonic() - start, 2)}
    rows["ours"] = ours(scratch / "ours")
    base = float(rows["torch_default"].get("seconds") or 0.0)
    for name in ("ours_cold", "ours"):
        if base > 0 and rows[name].get("seconds"):
            rows[name]["ratio_to_torch"] = round(float(rows[name]["seconds"]) / base, 3)
    rows["target"] = 0.7
    return rows


def calls_part(scratch: Path) -> dict[str, Any]:
    from nsight_agent.engine.executors.base import Executor
    from nsight_agent.engine.executors.local import LocalExecutor
    from nsight_agent.engine.pipeline import Job
    from nsight_agent.engine.store.runs import RunResult
    from nsight_agent.engine.worker.pool import WorkerPool
    from nsight_agent.request import ProfileRequest

    def request() -> ProfileRequest:
        k = new_constant()  # the candidate computes what the baseline does
        return ProfileRequest.model_validate(
            {
                "source": BASELINE.replace("@K@", k),
                "language": "torch",
                "variants": [
                    {"name": "base", "entry": "run"},
                    {"name": "cand", "entry": "run", "source": candidate(k)},
                ],
                "configs": [{"n": 1 << 20}],
                "runs": 20,
            }
        )

    def one(executor: Executor, root: Path, rows: list[dict[str, Any]]) -> None:
        start = time.monotonic()
        run = executor.run(Job(request(), root, mode="timing"))
        assert isinstance(run, RunResult)
        wall = time.monotonic() - start
        builds = run.preflight.builds if run.preflight is not None else []
        ok = [c.ok for c in run.checks]
        rows.append({"wall_s": round(wall, 2), "checks": ok, "builds": builds})

    with WorkerPool() as workers, LocalExecutor(workers=workers) as executor:
        executor.warm_up()  # the worker and targets start before any call is timed
        alone: list[dict[str, Any]] = []
        start = time.monotonic()
        one(executor, scratch / "alone", alone)
        alone_s = time.monotonic() - start
        four: list[dict[str, Any]] = []
        threads = [
            threading.Thread(target=one, args=(executor, scratch / f"four-{i}", four))
            for i in range(4)
        ]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        four_s = time.monotonic() - start
    return {
        "alone": {"wall_s": round(alone_s, 2), "calls": alone},
        "four_at_once": {"wall_s": round(four_s, 2), "calls": four},
        "ratio": round(four_s / alone_s, 3) if alone_s > 0 else None,
        "target": 1.5,
    }


PARTS = {"build": build_part, "calls": calls_part}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.build_ahead", description=__doc__)
    parser.add_argument("--parts", default="build,calls", help="default: build,calls")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--cpu", action="store_true", help="C++ candidates on the CPU (smoke)")
    args = parser.parse_args(argv)
    if args.cpu:
        os.environ["BENCH_BUILDS_CPU"] = "1"
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-builds-") as tmp:
        scratch = Path(tmp)
        # A fresh folder for the precompiled headers too: the first build finds none.
        os.environ["NSIGHT_AGENT_PCH_DIR"] = str(scratch / "pch")
        for part in args.parts.split(","):
            folder = scratch / part
            folder.mkdir()
            start = time.monotonic()
            out[part] = PARTS[part](folder)
            out[part]["seconds"] = round(time.monotonic() - start, 1)
            print(f"{part}: {json.dumps(out[part])[:2000]}", file=sys.stderr, flush=True)
    text = json.dumps(out, indent=1)
    if args.json is not None:
        args.json.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
