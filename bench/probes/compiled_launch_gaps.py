"""Probe (issue 36's torch.compile outlier): is a compiled call's time under CUDA events longer
than its GPU work because the GPU idles while the CPU launches it?

KernelBench's `time_execution_with_cuda_event` timed `torch.compile(Model)` of level 2's
`92_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp` 13.9 % above our GPU-work time on
the H200, where its reference times matched ours. Per call, for the eager and the compiled
model, this measures: CUDA events around the call (as KernelBench does), the CPU time the call
takes to return (its launches: perf_counter, no sync inside), and the GPU work it caused
(CUPTI records through kineto, the union of their intervals, as our timer reads it). If the
events' excess over the GPU work is about the CPU time beyond the GPU work, the gap is host
launch time, not kernel time.

    python3 -m bench.probes.compiled_launch_gaps --kb .kb [--problem level2/92_...py]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT = "level2/92_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp.py"


def measure(model: Any, inputs: list[Any], calls: int) -> dict[str, float]:
    """Median per call (us): CUDA events and the CPU time to return, untraced (tracing slows
    the launches); then the GPU work (CUPTI), traced."""
    import torch
    from torch.autograd.profiler import record_function

    from nsight_agent.engine.harness import gpu_activity, runtime

    events_us, cpu_us = [], []
    for _ in range(calls):
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        start = time.perf_counter_ns()
        model(*inputs)
        cpu_us.append((time.perf_counter_ns() - start) / 1e3)
        end.record()
        torch.cuda.synchronize()
        events_us.append(begin.elapsed_time(end) * 1e3)
    with runtime.kineto_profiler() as prof:
        for i in range(calls):
            torch.cuda.synchronize()
            with record_function(f"{gpu_activity.CALL_PREFIX}{i}"):
                model(*inputs)
            torch.cuda.synchronize()
    found = gpu_activity.attribute(prof.kineto_results.events())
    gpu_us = [
        runtime.union_ns([(a.start, a.end) for a in found.calls.get(i, [])]) / 1e3
        for i in range(calls)
        if not found.lost.get(i)
    ]
    return {
        "events_us": statistics.median(events_us),
        "cpu_us": statistics.median(cpu_us),
        "gpu_us": statistics.median(gpu_us) if gpu_us else float("nan"),
        "launches": statistics.median([len(found.calls.get(i, [])) for i in range(calls)]),
    }


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--kb", type=Path, default=Path(".kb"))
    ap.add_argument("--problem", default=DEFAULT)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    args = ap.parse_args(argv)
    path = args.kb / "KernelBench" / args.problem
    namespace: dict[str, Any] = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # a KernelBench problem file
    found: dict[str, Any] = {"problem": args.problem}
    for name in ("eager", "compiled"):
        torch.manual_seed(0)
        model = namespace["Model"](*namespace["get_init_inputs"]()).cuda()
        model = torch.compile(model) if name == "compiled" else model
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in namespace["get_inputs"]()]
        with torch.no_grad():
            for _ in range(5):
                model(*inputs)
            row = measure(model, inputs, args.calls)
        row["events_over_gpu_pct"] = 100.0 * (row["events_us"] / row["gpu_us"] - 1.0)
        row["cpu_beyond_gpu_us"] = row["cpu_us"] - row["gpu_us"]
        found[name] = row
        print(f"{name}: {json.dumps(row)}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compiled_launch_gaps.json").write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
