"""On a GPU: a candidate that makes an illegal memory access (the CUDA context breaks, and the
error surfaces at whatever touches the GPU next) is its own ``error`` row on both methods; the
baseline and the honest candidate are still measured, and the baseline is never blamed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import TextContent

from nsight_agent.server.app import build_server

pytestmark = [pytest.mark.gpu, pytest.mark.gpu_fault, pytest.mark.anyio]

SOURCE = """
import torch
import triton
import triton.language as tl


@triton.jit
def far_copy(x_ptr, out_ptr, n, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK) + shift  # shift: far outside x
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


def setup(n, device="cuda"):
    return (torch.randn(n, device=device),)


def run(x):
    return x * 2


def doubled(x):
    return x + x


def illegal(x):
    out = torch.empty_like(x)
    far_copy[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), 1 << 40, BLOCK=256)
    return out
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("method", ["timing", "ncu"])
async def test_an_illegal_address_is_the_candidates_row(tmp_path: Path, method: str) -> None:
    args: dict[str, Any] = {
        "source": SOURCE,
        "language": "triton",
        "configs": [{"n": 1 << 20}],
        "method": method,
        "runs": 3,
        "variants": [
            {"name": "run"},
            {"name": "illegal", "entry": "illegal"},
            {"name": "doubled", "entry": "doubled"},
        ],
    }
    async with Client(build_server(tmp_path)) as client:
        result = await client.call_tool("compare_variants", args)
        text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
        assert not result.is_error, text
        overall = (result.structured_content or {})["overall"]
        assert overall["illegal"]["verdict"] == "error", overall
        assert overall["run"]["verdict"] == "baseline"
        assert overall["doubled"]["verdict"] in ("within_noise", "faster", "slower"), overall
        configs = (result.structured_content or {})["configs"]
        assert "illegal memory access" in configs[0]["variants"]["illegal"]["check"].lower()
