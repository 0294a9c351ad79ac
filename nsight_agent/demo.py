"""The main job, end to end: a real MCP client session against ``nsight-agent serve``.

The SDK's client starts the server as a subprocess over stdio, lists its tools and calls them
as an agent would. With a GPU and ncu: profile_kernel, compare_variants and roofline_metrics
on a bundled Triton kernel. Without: device_info and summarize_report on the bundled H200
report, then a plain statement of what needs a GPU.

    python -m nsight_agent.demo        (or: make demo / nsight-agent demo)
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

BUNDLED_REPORT = "h200_bf16_matmul_sections.ncu-rep"
CALL_TIMEOUT_S = 900.0

# y = relu(2x + b): eager PyTorch runs three kernels, the Triton version one fused kernel,
# and a third variant "forgets" the relu, so its outputs are wrong.
EXAMPLE_SOURCE = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def fused_kernel(x_ptr, b_ptr, out_ptr, n, RELU: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        y = 2.0 * tl.load(x_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask)
        if RELU:
            y = tl.maximum(y, 0.0)
        tl.store(out_ptr + offs, y, mask=mask)


    def setup(n, device="cuda"):
        # torch's global generator: the harness seeds it per round (fresh inputs each run)
        return torch.randn(n, device=device), torch.randn(n, device=device)


    def _fused(x, b, relu):
        out = torch.empty_like(x)
        fused_kernel[(triton.cdiv(x.numel(), 1024),)](x, b, out, x.numel(), RELU=relu, BLOCK=1024)
        return out


    def run(x, b):
        return _fused(x, b, True)


    def torch_eager(x, b):
        return torch.relu(x * 2.0 + b)


    def forgot_relu(x, b):
        return _fused(x, b, False)
    """
)
CONFIGS: list[dict[str, Any]] = [{"n": 1 << 20}, {"n": 1 << 22}, {"n": 1 << 24}]

# A gather with a stride of 32 floats: every load of a warp touches 32 sectors for 32 useful
# values. diagnose_kernel should name uncoalesced global access and point at the load.
STRIDED_SOURCE = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def strided_copy(x_ptr, out_ptr, n, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        v = tl.load(x_ptr + (offs * STRIDE) % n, mask=mask)
        tl.store(out_ptr + offs, v, mask=mask)


    def setup(n, device="cuda"):
        return (torch.randn(n, device=device),)


    def run(x):
        out = torch.empty_like(x)
        strided_copy[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), STRIDE=32, BLOCK=1024)
        return out
    """
)


def bundled_report() -> Path:
    return Path(str(resources.files("nsight_agent") / "data" / "reports" / BUNDLED_REPORT))


def server_parameters() -> StdioServerParameters:
    """``nsight-agent serve`` in this interpreter (works without the console script on PATH)."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "nsight_agent", "serve"],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _text(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def _show(name: str, args: dict[str, Any], result: CallToolResult) -> None:
    shown = {k: (v if len(json.dumps(v)) < 80 else "...") for k, v in args.items()}
    print(f"\n>>> {name}({json.dumps(shown)})")
    status = "ERROR" if result.is_error else "ok"
    size = (
        len(json.dumps(result.structured_content, separators=(",", ":")))
        if result.structured_content
        else 0
    )
    print(f"<<< {status}; structured content {size} bytes of JSON; text:")
    print(textwrap.indent(_text(result), "    "))


async def session(out: list[dict[str, Any]]) -> bool:
    """Run the client session; returns whether the GPU path ran."""
    async with Client(server_parameters(), read_timeout_seconds=CALL_TIMEOUT_S) as client:
        tools = await client.list_tools()
        print(f"connected to nsight-agent serve over stdio: {len(tools.tools)} tools")
        print("  " + ", ".join(t.name for t in tools.tools))

        async def call(name: str, args: dict[str, Any]) -> CallToolResult:
            result = await client.call_tool(name, args)
            _show(name, args, result)
            out.append(
                {"tool": name, "is_error": result.is_error, "structured": result.structured_content}
            )
            return result

        info = await call("device_info", {})
        can_profile = bool((info.structured_content or {}).get("can_profile"))
        if not can_profile:
            await call("summarize_report", {"path": str(bundled_report())})
            await call("diagnose_kernel", {"report_path": str(bundled_report())})
            await call("query_metrics", {"query": "dram bytes", "limit": 3})
            return False

        profiled = await call(
            "profile_kernel", {"source": EXAMPLE_SOURCE, "configs": CONFIGS, "runs": 5}
        )
        await call(
            "compare_variants",
            {
                "source": EXAMPLE_SOURCE,
                "variants": [
                    {"name": "torch_eager", "entry": "torch_eager"},
                    {"name": "triton_fused", "entry": "run"},
                    {"name": "forgot_relu", "entry": "forgot_relu"},
                ],
                "baseline": "torch_eager",
                "configs": CONFIGS,
                "runs": 10,
            },
        )
        run_id = (profiled.structured_content or {}).get("run_id")
        await call("roofline_metrics", {"source": EXAMPLE_SOURCE, "configs": CONFIGS[-1:]})
        if run_id:
            await call("get_run_rows", {"run_id": run_id, "table": "raw", "limit": 5})
        await call("diagnose_kernel", {"source": STRIDED_SOURCE, "configs": [{"n": 1 << 24}]})
        if run_id:
            await call("diagnose_kernel", {"run_id": run_id, "limit": 1})
        foreign = os.environ.get("NSIGHT_AGENT_DEMO_FOREIGN_REPORT")
        await call("diagnose_kernel", {"report_path": foreign or str(bundled_report())})
        return True


def main(argv: Sequence[str] | None = None) -> int:
    del argv
    calls: list[dict[str, Any]] = []
    gpu = anyio.run(session, calls)
    if os.environ.get("NSIGHT_AGENT_DEMO_JSON"):  # keep every answer, e.g. for the docs
        Path(os.environ["NSIGHT_AGENT_DEMO_JSON"]).write_text(json.dumps(calls, indent=1))
    failed = [c["tool"] for c in calls if c["is_error"]]
    print()
    if not gpu:
        print(
            "No GPU profiling here: this machine has no usable NVIDIA GPU with Nsight Compute "
            "(see device_info above). What ran was real: an MCP client session over stdio, "
            "device_info, summarize_report and diagnose_kernel on a report recorded on an H200. "
            "profile_kernel, compare_variants, roofline_metrics and diagnose_kernel on source need an NVIDIA GPU, its "
            "driver, and ncu with access to the performance counters."
        )
    if failed:
        print(f"Tools that returned errors: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
