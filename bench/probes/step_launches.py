"""Probe (the step view): how many kernel launches one forward step of each KernelBench
level-3 model makes, and how many distinct launch configurations they fall into.

Under ncu each profiled launch costs its replay passes (15 for the step view's cheap sections,
about 0.05 s a pass of a small kernel on an H100:
``bench/results/section-costs/2026-12-06-h100-80gb-hbm3-1f031cd.json``), so the
launch count says which models the step view can profile within a limit, and the count of
distinct (kernel, grid, block) says what one launch per configuration would cost instead.
One forward after a warm-up, under torch.profiler (CUPTI); grid and block are read from the
profiler's Chrome trace, where kineto writes them for each kernel.

    python3 -m bench.probes.step_launches --kb .kb [--models A.py,B.py] [--out DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any


def kernels_of_trace(trace: dict[str, Any]) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    """Each kernel event of a Chrome trace in start order: (name, grid, block)."""
    events = [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]
    events.sort(key=lambda e: float(e.get("ts", 0.0)))
    found = []
    for e in events:
        args = e.get("args", {})
        found.append((str(e["name"]), tuple(args.get("grid", ())), tuple(args.get("block", ()))))
    return found


def summarize(kernels: list[tuple[str, tuple[int, ...], tuple[int, ...]]]) -> dict[str, Any]:
    configs = Counter(kernels)
    return {
        "launches": len(kernels),
        "kernel_names": len({k[0] for k in kernels}),
        "configs": len(configs),
        "most_repeated": [
            [k[0][:80], list(k[1]), list(k[2]), n] for k, n in configs.most_common(5)
        ],
    }


def one_model(path: Path) -> dict[str, Any]:
    import torch

    spec = importlib.util.spec_from_file_location("problem", path)
    assert spec is not None and spec.loader is not None
    problem = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(problem)
    torch.manual_seed(0)
    model = problem.Model(*problem.get_init_inputs()).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
    with torch.no_grad():
        model(*inputs)
        torch.cuda.synchronize()
        start = time.monotonic()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            model(*inputs)
            torch.cuda.synchronize()
        seconds = time.monotonic() - start
    with tempfile.TemporaryDirectory() as tmp:
        trace_path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace_path))
        trace = json.loads(trace_path.read_text())
    return summarize(kernels_of_trace(trace)) | {"profiled_s": round(seconds, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--kb", type=Path, default=Path(".kb"))
    ap.add_argument("--models", help="level-3 files, comma-separated (default: every one)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    args = ap.parse_args(argv)
    level3 = args.kb / "KernelBench" / "level3"
    names = args.models.split(",") if args.models else sorted(p.name for p in level3.glob("*.py"))
    found: dict[str, Any] = {}
    for name in names:
        try:
            found[name] = one_model(level3 / name)
        except Exception as err:  # a model that fails is a row, not the end of the probe
            found[name] = {"error": f"{type(err).__name__}: {err}"[:300]}
        row = found[name]
        print(
            f"{name}: {row.get('launches')} launches, {row.get('configs')} configs "
            f"{row.get('error', '')}",
            flush=True,
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "step_launches.json").write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
