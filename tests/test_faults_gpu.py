"""On a GPU with ncu: a kernel that hangs and one that reads out of bounds each get a specific
error, leave no process behind, and the next call on the same session works."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.server import MCPServer
from mcp.types import TextContent

from nsight_agent.server.app import build_server

pytestmark = [pytest.mark.gpu, pytest.mark.gpu_fault, pytest.mark.anyio]

HEADER = """
import torch
import triton
import triton.language as tl


def setup(n, device="cuda"):
    return (torch.ones(n, device=device),)
"""

# Spins for ever: it waits for x[0] to drop to zero, which never happens.
HANGS = (
    HEADER
    + """
@triton.jit
def spin(x_ptr, n, BLOCK: tl.constexpr):
    # A volatile load each turn: the compiler cannot drop the loop, and x stays 1.
    v = tl.load(x_ptr, volatile=True)
    while v > 0:
        v = tl.load(x_ptr, volatile=True)


def run(x):
    spin[(triton.cdiv(x.numel(), 128),)](x, x.numel(), BLOCK=128)
    return x
"""
)

# Reads 2**32 elements apart (lane 1 on is far outside a small tensor), without a mask.
OUT_OF_BOUNDS = (
    HEADER
    + """
@triton.jit
def far_read(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs.to(tl.int64) * 4294967296)
    tl.store(out_ptr + offs, v, mask=offs < n)


def run(x):
    out = torch.empty_like(x)
    far_read[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
    return out
"""
)

VALID = (
    HEADER
    + """
def run(x):
    return x * 2.0
"""
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server(tmp_path: Path) -> MCPServer:
    return build_server(tmp_path)


def _text(result: object) -> str:
    content = getattr(result, "content", [])
    return "\n".join(c.text for c in content if isinstance(c, TextContent))


def _left(marker: str) -> list[str]:
    """Live processes whose command line or environment mentions ``marker``."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            text = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in text:
            found.append(proc.name)
    return found


async def _valid_call_works(client: Client) -> None:
    result = await client.call_tool(
        "profile_kernel",
        {"source": VALID, "configs": [{"n": 4096}], "language": "triton", "runs": 2},
    )
    assert not result.is_error, _text(result)


async def test_a_hanging_kernel_is_killed_and_the_next_call_works(
    server: MCPServer, tmp_path: Path
) -> None:
    async with Client(server, read_timeout_seconds=300) as client:
        with anyio.fail_after(240):
            hung = await client.call_tool(
                "profile_kernel",
                {"source": HANGS, "configs": [{"n": 4096}], "options": {"timeout_s": 20}},
            )
        assert hung.is_error
        text = _text(hung)
        assert "limit" in text and "killed" in text, text
        assert not _left(str(tmp_path)), "a process of the hung run is still alive"
        await _valid_call_works(client)


async def test_an_illegal_address_is_reported_and_the_next_call_works(
    server: MCPServer, tmp_path: Path
) -> None:
    async with Client(server, read_timeout_seconds=300) as client:
        with anyio.fail_after(240):
            bad = await client.call_tool(
                "profile_kernel", {"source": OUT_OF_BOUNDS, "configs": [{"n": 4096}]}
            )
        assert bad.is_error
        text = _text(bad)
        assert "illegal memory access" in text or "CUDA error" in text, text
        assert "out of bounds" in text  # the hint that fits the failure
        assert not _left(str(tmp_path))
        await _valid_call_works(client)
