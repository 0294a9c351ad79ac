"""Probe (H200): how often CUPTI loses a kernel's record in the pre-flight's short profiler
sessions, read two ways.

An honest baseline's pre-flight once counted 0 kernels in one of its calls, and the
comparison failed. torch 2.11+cu130 carries CUPTI 13.0, whose kernel records can be dropped by
kineto (pytorch/pytorch#192021, fixed in CUPTI 13.1). The probe found none lost in 400
sessions; the cause was a variant's replaced ``torch.cuda.synchronize``. This runs ``--calls`` one-kernel calls,
each in its own session after an idle gap of 0-20 ms (as the pre-flight's calls are), and
counts, per way of reading:

- ``function_events``: the old reading (CUDA activity only, ``prof.events()``): calls that
  showed no kernel;
- ``kineto``: the new reading (``harness/gpu_activity.py``): calls with a kernel launch and no
  GPU record (lost), and calls counted with no kernel at all.

No assertion: a reading. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

from nsight_agent.engine.harness import gpu_activity


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    x = torch.randn(4096 * 4096, device="cuda")
    torch.relu(x)
    torch.cuda.synchronize()
    rng = random.Random(0)
    old_zero = new_lost = new_zero = 0
    t0 = time.monotonic()
    for i in range(args.calls):
        time.sleep(rng.choice((0.0, 0.001, 0.005, 0.02)))
        if i % 2 == 0:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                torch.relu(x)
                torch.cuda.synchronize()
            kernels = [e for e in prof.events() if str(e.device_type).endswith("CUDA")]
            old_zero += not kernels
        else:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof2:
                with record_function(f"{gpu_activity.CALL_PREFIX}0"):
                    torch.relu(x)
                torch.cuda.synchronize()
            found = gpu_activity.attribute(prof2.profiler.kineto_results.events())  # type: ignore[union-attr]
            new_lost += bool(found.lost.get(0))
            new_zero += not found.lost.get(0) and not found.calls.get(0)
    half = args.calls // 2
    print(
        json.dumps(
            {
                "calls_each": half,
                "function_events_zero": old_zero,
                "kineto_lost": new_lost,
                "kineto_zero_without_loss": new_zero,
                "seconds": round(time.monotonic() - t0, 1),
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
            }
        )
    )


if __name__ == "__main__":
    main()
