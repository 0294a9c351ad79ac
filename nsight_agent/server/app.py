"""The MCP server: the tools of ``tools_*`` registered in one loop, shared state through the
SDK's lifespan context, and the transports (stdio, streamable HTTP).

Thin by design: tools validate, call ``nsight_agent.service`` and return view models; errors
become ``ToolError`` in ``boundary``. Each tool is built with the SDK's ``Tool.from_function``,
made terse and strict, and handed to the server in one list.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.types import ToolAnnotations

from nsight_agent import __version__
from nsight_agent.arguments import strict_arguments
from nsight_agent.engine import children  # the server's own children (start-up, shutdown)
from nsight_agent.request import KERNEL_CONTRACT_SUMMARY
from nsight_agent.server import http, schemas, shutdown, tools_info, tools_profile, tools_runs
from nsight_agent.server.boundary import CheckedTool, ServerState, lifespan_for
from nsight_agent.service import runs as run_store
from nsight_agent.service.session import ExecutorKind, default_runs_root
from nsight_agent.views.common import ARTIFACT_URI

INSTRUCTIONS = """\
Nsight Compute (ncu) profiling of CUDA, Triton and PyTorch kernels.
Start with device_info (can this machine profile?). profile_kernel measures one kernel over a grid
of configs (time with spread and stability); compare_variants times several implementations
against a baseline with a noise-aware verdict and an output check; roofline_metrics places
kernels on this GPU's roofline and names the bound; diagnose_kernel names the cause of a slow
kernel with its evidence and what to try (also on a run_id or any .ncu-rep). summarize_report digests any existing
.ncu-rep without a GPU. Every run keeps its artifacts: pass its run_id to get_run, get_run_rows,
plot_run, compare_variants or roofline_metrics for more detail without profiling again, or read
nsight-agent://runs/{run_id}/{artifact}. query_metrics finds metric names; list_skills/get_skill
give curated metric bundles with a workflow. Across runs: get_run(run_id, baseline=NAME) names a
baseline; get_run(run_id, against=NAME) compares a later run with it (refused with the reason when
the runs are not comparable); nsight-agent://baselines lists them, nsight-agent://history/{NAME}
gives a kernel's trend.
Kernel contract: `source` is a Python module with setup(**config, device) returning the inputs
(tuple, dict or tensor) and entry functions (default `run`) that launch the work on them and
return outputs; only the entry call is measured and every variant's outputs are checked against
the baseline's. Full text, per language: resource nsight-agent://contract."""

# Field descriptions in tools/list: inputs tell the model what to send; answers describe only
# their top-level fields (nested field names say enough; the answer's text explains numbers).
INPUT_DESCRIPTION_CHARS = 170
OUTPUT_DESCRIPTION_CHARS = 50

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
PROFILES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)

# (tool function, annotations, description or None for its docstring), in listing order.
TOOLS: tuple[tuple[Callable[..., Any], ToolAnnotations, str | None], ...] = (
    (tools_profile.profile_kernel, PROFILES, None),
    (tools_profile.compare_variants, PROFILES, None),
    (tools_profile.roofline_metrics, PROFILES, None),
    (tools_profile.diagnose_kernel, PROFILES, None),
    (tools_runs.get_run, READ_ONLY, None),
    (tools_runs.get_run_rows, READ_ONLY, None),
    (tools_runs.plot_run, READ_ONLY, None),
    (tools_info.summarize_report, READ_ONLY, None),
    (tools_info.query_metrics, READ_ONLY, None),
    (tools_info.list_skills, READ_ONLY, None),
    (tools_info.get_skill, READ_ONLY, None),
    (tools_info.device_info, READ_ONLY, None),
)


def build_tool(fn: Callable[..., Any], hints: ToolAnnotations, description: str | None) -> Tool:
    """The SDK's tool for ``fn``, with its published schemas made terse (arguments and results
    are still validated with the full pydantic models) and an unknown argument (a typo, or a
    knob that lives in `options`) refused by name instead of dropped without a word, each
    malformed argument answered in our words (``CheckedTool``)."""
    tool = Tool.from_function(fn, annotations=hints, description=description)
    meta = tool.fn_metadata
    output = meta.output_schema
    meta = meta.model_copy(
        update={
            "arg_model": strict_arguments(meta.arg_model),
            "output_schema": None
            if output is None
            else schemas.compact_output(output, OUTPUT_DESCRIPTION_CHARS),
        }
    )
    fields = {name: getattr(tool, name) for name in Tool.model_fields}
    return CheckedTool(
        **fields
        | {
            "description": " ".join(tool.description.split()),
            "parameters": schemas.compact(tool.parameters, INPUT_DESCRIPTION_CHARS),
            "fn_metadata": meta,
        }
    )


def kernel_contract() -> str:
    return KERNEL_CONTRACT_SUMMARY


def build_server(
    runs_root: Path | None = None,
    *,
    executor: ExecutorKind = "local",
    ray_address: str | None = None,
    report_folders: tuple[Path, ...] | None = None,
) -> MCPServer[ServerState]:
    """A server whose runs live under ``runs_root`` (default: the cache folder) and whose
    profiling jobs run on ``executor``: this machine's GPUs (one job each, the rest queued)
    or a Ray cluster (``ray_address``, or a local one)."""
    mcp: MCPServer[ServerState] = MCPServer(
        "nsight-agent",
        title="Nsight Compute profiling",
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level="INFO",
        lifespan=lifespan_for(runs_root, executor, ray_address, report_folders),
        tools=[build_tool(fn, hints, description) for fn, hints, description in TOOLS],
    )
    mcp.resource(
        ARTIFACT_URI,
        name="run-artifact",
        description="A run's artifact: request, harness, manifest, report (.ncu-rep), ncu log, "
        "raw/processed CSV, plot. Names are listed in each profiling answer.",
    )(tools_runs.run_artifact)
    mcp.resource(
        "nsight-agent://contract",
        name="contract",
        description="The kernel contract the profiling tools expect of `source`",
        mime_type="text/plain",
    )(kernel_contract)
    mcp.resource(
        "nsight-agent://history/{key}",
        name="history",
        description="One kernel's trend (JSON): its runs against baseline NAME, or against the "
        "oldest run of a source hash",
        mime_type="application/json",
    )(tools_runs.history)
    # A static resource gets no context: the runs folder is bound here instead.
    mcp.resource(
        "nsight-agent://baselines",
        name="baselines",
        description="Named baselines: run, variant, source hash, GPU, method, dates (JSON)",
        mime_type="application/json",
    )(functools.partial(tools_runs.baselines_json, runs_root))
    mcp.resource(
        "nsight-agent://runs",
        name="runs",
        description="Run ids under the runs folder, newest first (JSON)",
        mime_type="application/json",
    )(functools.partial(run_store.list_runs_json, runs_root))
    return mcp


def serve(
    transport: Literal["stdio", "streamable-http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    runs_root: Path | None = None,
    executor: ExecutorKind = "local",
    ray_address: str | None = None,
    *,
    token_file: Path | None = None,
    allow_dirs: tuple[Path, ...] = (),
    allowed_hosts: tuple[str, ...] = (),
    allowed_origins: tuple[str, ...] = (),
) -> None:
    """Run the server; logs go to stderr (on stdio, stdout is the wire). Over HTTP: loopback
    unless a token is set, Host/Origin checked, bodies capped, reports read only from the runs
    folder and ``allow_dirs`` (docs/SECURITY.md)."""
    if transport == "stdio":
        server = build_server(runs_root, executor=executor, ray_address=ray_address)
        # Every child dies with the server and is reaped: stdin closed (the client went away),
        # SIGTERM, SIGINT or SIGHUP kill them all after the runs in flight are marked
        # interrupted by it (server.shutdown), then the process ends even if a worker thread
        # is still unwinding. Orphans of an earlier, killed server go first.
        children.reap_orphans()
        shutdown.run_stdio(server)
        shutdown.end_children()
        os._exit(0)
    token = http.read_token(token_file)
    http.check_exposure(host, token)  # before anything starts
    folders = (Path(runs_root or default_runs_root()), *allow_dirs)
    server = build_server(
        runs_root, executor=executor, ray_address=ray_address, report_folders=folders
    )
    app = http.http_app(
        server,
        host=host,
        port=port,
        token=token,
        hosts=allowed_hosts,
        origins=allowed_origins,
    )
    print(http.startup_text(host, port, token, allowed_hosts, allowed_origins), file=sys.stderr)
    shutdown.run_http(app, host, port)
