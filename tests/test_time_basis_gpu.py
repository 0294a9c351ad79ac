"""Per-call time beside GPU time on a GPU, both methods: a reference of four launches (eager
torch: mul, add, relu, mul) against one fused Triton kernel. Each answer names its basis,
holds both times, and the per-call time of a call holds its kernels' time.

Skipped (conftest) without a CUDA GPU and ncu; run with `pytest -m gpu`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nsight_agent.service import profile, summaries
from nsight_agent.service.measure import Measuring, Method
from nsight_agent.time_basis import CALL_METRIC

pytestmark = pytest.mark.gpu

SOURCE = '''
import torch
import triton
import triton.language as tl


def setup(n, device):
    return (torch.randn(n, device=device),)


def reference(x):
    """Four launches a call."""
    y = x * 2.0
    y = y + 1.0
    y = torch.relu(y)
    return y * 3.0


@triton.jit
def fused_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    x = tl.load(x_ptr + i, mask=mask)
    tl.store(out_ptr + i, tl.maximum(x * 2.0 + 1.0, 0.0) * 3.0, mask=mask)


def fused(x):
    """One launch a call."""
    out = torch.empty_like(x)
    fused_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out
'''


@pytest.mark.parametrize("method", ["timing", "ncu"])
def test_four_launches_against_one_fused_show_per_call_time_with_its_basis(
    method: Method, tmp_path: Path
) -> None:
    run = profile.profile(
        Measuring(runs_root=tmp_path),
        method,
        source=SOURCE,
        language="triton",
        variants=[{"name": "reference", "entry": "reference"}, {"name": "fused", "entry": "fused"}],
        configs={"n": [4096]},
        runs=10,
    )
    assert run.preflight is not None
    counts = run.preflight.kernel_counts
    assert counts["reference"][0] == 4 and counts["fused"][0] == 1, counts
    assert set(run.preflight.call_ns) == {"reference", "fused"}
    s = summaries.compare_summary(run)
    assert s.time_basis == "gpu" and s.other_basis is not None
    assert s.other_basis.time_basis == "call" and "CUDA events" in s.other_basis.basis
    for name in ("reference", "fused"):
        timing = s.configs[0].variants[name]
        assert timing.time is not None and timing.other_time is not None
        # End to end, a call holds its kernels (CUPTI's and the events' clocks differ by a
        # little): never much shorter than its GPU time.
        assert timing.other_time >= 0.9 * timing.time, (name, timing)
    call = summaries.compare_summary(run, time_basis="call")
    assert call.metric == CALL_METRIC and call.basis is not None and "CUDA events" in call.basis
    # One launch against four: shorter per call. The verdict itself may be within_noise where
    # the host is loaded (other GPU tests beside this one widen each call's interval).
    fused = call.configs[0].variants["fused"]
    assert fused.speedup is not None and fused.speedup > 1.0, call.configs
    assert call.overall["fused"].verdict in ("faster", "within_noise"), call.configs
    said = (s.overall["fused"].verdict, call.overall["fused"].verdict)
    assert bool(s.disagreements) == (said == ("slower", "faster")), s.disagreements
    print(method, {n: (v.time, v.other_time) for n, v in s.configs[0].variants.items()}, said)
