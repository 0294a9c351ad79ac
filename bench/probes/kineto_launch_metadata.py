"""Probe: what kineto gives of a kernel's launch configuration on this machine: each kernel
event's ``metadata_json()`` and the Chrome trace's arguments, for a matmul and a cuDNN
convolution (the launch-sampled pre-flight reads grid and block from one or the other).

    python3 -m bench.probes.kineto_launch_metadata
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path


def main() -> int:
    import torch

    from nsight_agent.engine.harness import gpu_activity, runtime

    x = torch.randn(2, 64, 56, 56, device="cuda")
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
    a = torch.randn(512, 512, device="cuda")
    with torch.no_grad():
        conv(x), a @ a
        torch.cuda.synchronize()
        with runtime.kineto_profiler(shapes=True) as prof:
            conv(x), a @ a
            torch.cuda.synchronize()
    kernels = [e for e in prof.kineto_results.events() if str(e.device_type()).endswith("CUDA")]
    for e in kernels[:4]:
        text = e.metadata_json()
        print(f"{e.name()[:60]}: metadata {text[:240]!r} -> {gpu_activity.launch_config(text)}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    found = gpu_activity.configs_of_trace(trace)
    print(f"trace: {len(found)} kernel configurations by correlation id: {list(found.items())[:4]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
