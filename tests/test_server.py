"""Every MCP tool through the SDK's in-process client: schemas, structured content, errors."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client
from mcp.server import MCPServer
from mcp.types import CallToolResult, ImageContent, TextContent

from nsight_agent.engine import pipeline
from nsight_agent.engine.pipeline import OutputCheck, RunResult
from nsight_agent.server import tools_profile
from nsight_agent.server.app import build_server
from nsight_agent.service.runs import list_runs

H200_REPORT = Path(__file__).parent / "fixtures" / "h200_bf16_matmul_sections.ncu-rep"
TIME = "gpu__time_duration.sum"


pytestmark = pytest.mark.anyio

TRITON_ADD = """
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def setup(n, device):
    return torch.randn(n, device=device), torch.randn(n, device=device)


def run(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server(tmp_path: Path) -> MCPServer:
    return build_server(runs_root=tmp_path)


@pytest.fixture
def run(sweep: Any, tmp_path: Path) -> RunResult:
    """A recorded H200 sweep as a finished run in the server's runs folder (2 variants x 3
    configs); the triton variant's output check failed on the largest config."""
    bad = OutputCheck(
        variant=sweep.variants()[0],
        config_index=2,
        config={"n": 1048576},
        ok=False,
        max_abs_err=1.0,
        message="mismatch",
    )
    return sweep.run(tmp_path, checks=[bad])


def _validate(result: CallToolResult, schema: dict[str, Any] | None) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert schema is not None and result.structured_content is not None
    jsonschema.validate(result.structured_content, schema)
    assert isinstance(result.content[0], TextContent) and result.content[0].text
    return result.structured_content


def _error(result: CallToolResult) -> str:
    assert result.is_error
    text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
    assert "Error executing tool" not in text or ":" in text.split("Error executing tool", 1)[1]
    return text


async def _schemas(client: Client) -> dict[str, Any]:
    return {t.name: t for t in (await client.list_tools()).tools}


# ---------------------------------------------------------------------------------------------


async def test_tools_have_schemas_and_descriptions(server: MCPServer) -> None:
    async with Client(server) as client:
        tools = await _schemas(client)
    expected = {
        "profile_kernel",
        "compare_variants",
        "roofline_metrics",
        "query_metrics",
        "summarize_report",
        "device_info",
        "list_skills",
        "get_skill",
        "get_run",
        "get_run_rows",
        "plot_run",
    }
    assert expected <= set(tools)
    for name in expected:
        tool = tools[name]
        assert tool.description and tool.input_schema["type"] == "object"
        # plot_run answers an image; get_run answers profile_kernel's shape (one schema, once).
        if name not in ("plot_run", "get_run"):
            assert tool.output_schema is not None, name
    props = tools["profile_kernel"].input_schema["properties"]
    assert props["runs"]["description"] and "ctx" not in props
    assert "options" in props and "timeout_s" in props["options"]["description"]


async def test_summarize_report(server: MCPServer) -> None:
    async with Client(server) as client:
        tools = await _schemas(client)
        result = await client.call_tool("summarize_report", {"path": str(H200_REPORT)})
    data = _validate(result, tools["summarize_report"].output_schema)
    action = data["actions"][0]
    assert action["kernel"].startswith("nvjet_sm90") and action["duration_ns"] == 32800.0
    assert action["roofline"]["bound"] == "compute-bound"
    assert len(json.dumps(data, separators=(",", ":"))) < 4000


async def test_diagnose_kernel_on_a_report_and_a_run(server: MCPServer, run: RunResult) -> None:
    async with Client(server) as client:
        tools = await _schemas(client)
        on_report = await client.call_tool("diagnose_kernel", {"report_path": str(H200_REPORT)})
        on_run = await client.call_tool("diagnose_kernel", {"run_id": run.run_id, "limit": 1})
        nothing = await client.call_tool("diagnose_kernel", {})
    schema = tools["diagnose_kernel"].output_schema
    data = _validate(on_report, schema)
    top = data["kernels"][0]["diagnosis"]
    # The cuBLAS bf16 GEMM: compute-bound at its tensor roof, and no invented defect.
    assert top["bound"]["bound"] == "compute-bound"
    assert [c["id"] for c in top["causes"]] == ["compute_at_roof"]
    assert len(json.dumps(data, separators=(",", ":"))) <= 4096
    # The sweep run holds two kernels with only their duration: one in full, one line.
    data = _validate(on_run, schema)
    assert data["run_id"] == run.run_id and data["kernels_total"] == 2
    assert len(data["kernels"]) == 1 and len(data["others"]) == 1
    assert "SpeedOfLight" in data["kernels"][0]["diagnosis"]["deeper"]
    assert "needs source (and configs), a run_id, or a report_path" in _error(nothing)


async def test_summarize_report_missing_path(server: MCPServer) -> None:
    async with Client(server) as client:
        result = await client.call_tool("summarize_report", {"path": "/no/such/report.ncu-rep"})
    text = _error(result)
    assert "No report at /no/such/report.ncu-rep" in text and "Hint:" in text


async def test_query_metrics_and_skills(server: MCPServer) -> None:
    async with Client(server) as client:
        tools = await _schemas(client)
        found = _validate(
            await client.call_tool("query_metrics", {"query": "dram bytes", "limit": 3}),
            tools["query_metrics"].output_schema,
        )
        skills = _validate(
            await client.call_tool("list_skills", {}), tools["list_skills"].output_schema
        )
        name = skills["skills"][0]["name"]
        skill = _validate(
            await client.call_tool("get_skill", {"name": name}), tools["get_skill"].output_schema
        )
        missing = await client.call_tool("get_skill", {"name": "no-such-skill"})
    assert found["results"][0]["name"] == "dram__bytes" and len(found["results"]) == 3
    assert {"timing", "roofline"} <= {s["name"] for s in skills["skills"]}
    assert skill["name"] == name and skill["metrics"] and "---" in skill["skill_md"]
    assert "Available:" in _error(missing)


async def test_device_info_says_what_is_unknown(server: MCPServer) -> None:
    async with Client(server) as client:
        tools = await _schemas(client)
        data = _validate(
            await client.call_tool("device_info", {}), tools["device_info"].output_schema
        )
    assert data["packages"]["mcp"]
    if not data["gpus"]:
        assert data["can_profile"] is False and data["unknown"]
    # The pool the server's jobs run on: one slot per GPU (one "cpu" slot without any).
    pool = data["pool"]
    assert pool["executor"] == "local" and pool["running"] == 0 and pool["queued"] == 0
    assert len(pool["slots"]) == max(1, len(data["gpus"]))


async def test_bad_metric_name_is_refused_with_suggestions(server: MCPServer) -> None:
    async with Client(server) as client:
        result = await client.call_tool(
            "profile_kernel",
            {"source": TRITON_ADD, "configs": [{"n": 1024}], "metrics": ["dram__bytes.summ"]},
        )
    text = _error(result)
    assert "dram__bytes.summ" in text and "dram__bytes.sum" in text and "Hint:" in text


async def test_malformed_requests_are_tool_errors(server: MCPServer) -> None:
    async with Client(server) as client:
        bad_config = await client.call_tool(
            "profile_kernel", {"source": TRITON_ADD, "configs": {"n": []}}
        )
        bad_entry = await client.call_tool(
            "profile_kernel", {"source": TRITON_ADD, "configs": [{"n": 8}], "entry": "-rf"}
        )
        wrong_type = await client.call_tool("profile_kernel", {"source": 3, "configs": "x"})
        one_variant = await client.call_tool(
            "compare_variants", {"variants": [{"name": "a"}], "configs": [{"n": 8}]}
        )
    assert "non-empty list" in _error(bad_config)
    assert "entry: function name" in _error(bad_entry) and "identifier" in _error(bad_entry)
    assert wrong_type.is_error
    assert "at least two variants" in _error(one_variant)


async def test_profiling_without_ncu_fails_at_once_and_names_the_timing_path(
    server: MCPServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No pre-flight first (it cost 10-58 s before saying what doctor knows in seconds): the
    error, the timing path as what answers without ncu, and no run left behind."""
    if shutil.which("ncu"):
        pytest.skip("ncu is installed here")
    monkeypatch.delenv("NCU", raising=False)
    args = {"source": TRITON_ADD, "configs": {"n": [256, 1024]}, "runs": 1}
    async with Client(server) as client:
        result = await client.call_tool("profile_kernel", args)
        diagnosed = await client.call_tool(
            "diagnose_kernel", {k: v for k, v in args.items() if k != "runs"}
        )
    for answer in (result, diagnosed):
        text = _error(answer)
        assert "ncu" in text and "not found" in text and "Nothing was run" in text, text
    # Each names what answers without ncu in its own terms: diagnose_kernel takes no method.
    assert 'method="timing" (--method timing)' in _error(result)
    assert "method='timing' of profile_kernel or compare_variants" in _error(diagnosed)
    assert "diagnose_kernel(report_path=" in _error(diagnosed)
    assert list_runs(tmp_path)["runs"] == []  # no pre-flight ran, no run recorded "passed"


# ---------------------------------------------------------------------------------------------
# Runs: detail later without profiling again


async def test_get_run_views(server: MCPServer, run: RunResult) -> None:
    async with Client(server) as client:
        tools = await _schemas(client)
        view = _validate(
            await client.call_tool("get_run", {"run_id": run.run_id, "limit": 2}),
            tools["profile_kernel"].output_schema,
        )
        rows = _validate(
            await client.call_tool(
                "get_run_rows", {"run_id": run.run_id, "table": "raw", "limit": 4}
            ),
            tools["get_run_rows"].output_schema,
        )
        unknown = await client.call_tool("get_run", {"run_id": "nope"})
        bad_metric = await client.call_tool(
            "get_run", {"run_id": run.run_id, "metrics": ["dram__bytes.sum"]}
        )
    assert view["page"]["total"] == 6 and len(view["results"]) == 2
    assert "offset=2" in view["page"]["truncated"]
    assert rows["columns"][0] == "Annotation" and len(rows["rows"]) == 4
    assert "No finished run 'nope'" in _error(unknown)
    assert "not in run" in _error(bad_metric)


async def test_compare_variants_from_a_run(sweep: Any, server: MCPServer, run: RunResult) -> None:
    cand, base = sweep.variants()
    async with Client(server) as client:
        tools = await _schemas(client)
        data = _validate(
            await client.call_tool("compare_variants", {"run_id": run.run_id, "baseline": base}),
            tools["compare_variants"].output_schema,
        )
    assert data["baseline"] == base and "95% CIs" in data["rule"]
    assert data["configs"][2]["variants"][cand]["verdict"] == "incorrect"
    assert data["overall"][cand]["verdict"] == "incorrect"


async def test_roofline_metrics_from_a_run_and_a_report(server: MCPServer, run: RunResult) -> None:
    async with Client(server) as client:
        tools = await _schemas(client)
        schema = tools["roofline_metrics"].output_schema
        from_run = _validate(
            await client.call_tool("roofline_metrics", {"run_id": run.run_id, "limit": 3}), schema
        )
        from_report = _validate(
            await client.call_tool("roofline_metrics", {"report_path": str(H200_REPORT)}), schema
        )
        nothing = await client.call_tool("roofline_metrics", {})
    assert from_run["run_id"] == run.run_id and len(from_run["kernels"]) == 3
    assert from_run["kernels"][0]["config"] == {"n": 4096}
    k = from_report["kernels"][0]
    assert k["roofline"]["bound"] == "compute-bound" and "dram_pct_of_peak" in k["roofline"]
    assert "run_id" in _error(nothing)


async def test_plot_run_returns_a_png(server: MCPServer, run: RunResult) -> None:
    async with Client(server) as client:
        result = await client.call_tool("plot_run", {"run_id": run.run_id, "metric": TIME})
    assert not result.is_error, result.content
    image = result.content[0]
    assert isinstance(image, ImageContent) and image.mime_type == "image/png"
    assert (run.run_dir / f"plot-{TIME}.png").read_bytes()[:4] == b"\x89PNG"


async def test_run_artifacts_are_resources(server: MCPServer, run: RunResult) -> None:
    async with Client(server) as client:
        templates = await client.list_resource_templates()
        csv = await client.read_resource(f"nsight-agent://runs/{run.run_id}/processed_csv")
        report = await client.read_resource(f"nsight-agent://runs/{run.run_id}/report")
        with pytest.raises(Exception, match="no artifact"):
            await client.read_resource(f"nsight-agent://runs/{run.run_id}/nothing")
    assert any("{run_id}" in t.uri_template for t in templates.resource_templates)
    text = csv.contents[0]
    assert getattr(text, "text", "").startswith("Annotation,Metric,n,AvgValue")
    assert getattr(report.contents[0], "blob", "")


# ---------------------------------------------------------------------------------------------
# Progress and cancellation around a (stand-in) pipeline run


@pytest.fixture
def fake_profile(
    monkeypatch: pytest.MonkeyPatch, run: RunResult
) -> Iterator[Callable[[], threading.Event | None]]:
    seen: dict[str, threading.Event | None] = {"cancel": None}

    def profile(
        request: Any,
        *,
        runs_root: Path | None = None,
        on_progress: Callable[[int, int, str], None] | None = None,
        cancel: threading.Event | None = None,
        preflight: Any = None,  # the server's warm pre-flight: this stand-in runs none
        targets: Any = None,  # the slot's pre-launched ncu targets: none here
    ) -> RunResult:
        seen["cancel"] = cancel
        total = 3
        for done in range(1, total + 1):
            if on_progress is not None:
                on_progress(done, total, f"{done}/{total} ranges")
        if request.runs == 99:  # the slow run: wait to be cancelled
            deadline = time.monotonic() + 20
            while cancel is not None and not cancel.is_set() and time.monotonic() < deadline:
                time.sleep(0.02)
        return run

    # The stand-in needs no ncu: let the server go past its ncu check.
    monkeypatch.setattr("nsight_agent.engine.collection.ncu.find_ncu", lambda: "/usr/bin/true")
    monkeypatch.setattr(pipeline, "profile", profile)
    yield lambda: seen["cancel"]


async def test_progress_is_reported(server: MCPServer, fake_profile: Any) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((p, total, message))

    async with Client(server) as client:
        tools = await _schemas(client)
        result = await client.call_tool(
            "profile_kernel",
            {"source": TRITON_ADD, "configs": {"n": [4096, 65536, 1048576]}, "runs": 3},
            progress_callback=on_progress,
        )
    data = _validate(result, tools["profile_kernel"].output_schema)
    assert data["run_id"] == "20261129-sweep"
    assert [(p, t) for p, t, _ in progress][-3:] == [(1, 3), (2, 3), (3, 3)]


async def test_cancellation_sets_the_pipeline_cancel_event(
    server: MCPServer, fake_profile: Callable[[], threading.Event | None]
) -> None:
    async with Client(server) as client:
        args = {"source": TRITON_ADD, "configs": [{"n": 8}], "runs": 99}
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "profile_kernel", args)
            with anyio.fail_after(30):  # cancelled once the run is in the pipeline, not at 1 s
                while fake_profile() is None:
                    await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
        event = fake_profile()
        assert event is not None
        with anyio.fail_after(10):
            while not event.is_set():
                await anyio.sleep(0.05)


def test_compact_contract_of_the_server_module() -> None:
    # The server keeps no shaping of its own: the models come from the views.
    assert tools_profile.run_views.ProfileSummary.__module__ == "nsight_agent.views.runs"


# ---------------------------------------------------------------------------------------------
# On a GPU with ncu: the three profiling tools for real (skipped elsewhere)


@pytest.mark.gpu
async def test_profiling_tools_on_gpu(server: MCPServer) -> None:
    from nsight_agent import demo

    configs = demo.CONFIGS[:2]
    progress: list[float] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append(p)

    async with Client(server, read_timeout_seconds=900) as client:
        tools = await _schemas(client)
        profiled = _validate(
            await client.call_tool(
                "profile_kernel",
                {"source": demo.EXAMPLE_SOURCE, "configs": configs, "runs": 3},
                progress_callback=on_progress,
            ),
            tools["profile_kernel"].output_schema,
        )
        compared = _validate(
            await client.call_tool(
                "compare_variants",
                {
                    "source": demo.EXAMPLE_SOURCE,
                    "variants": [
                        {"name": "torch_eager", "entry": "torch_eager"},
                        {"name": "triton_fused", "entry": "run"},
                    ],
                    "configs": configs,
                    "runs": 5,
                },
            ),
            tools["compare_variants"].output_schema,
        )
        roof = _validate(
            await client.call_tool(
                "roofline_metrics", {"source": demo.EXAMPLE_SOURCE, "configs": configs[-1:]}
            ),
            tools["roofline_metrics"].output_schema,
        )
        rows = await client.call_tool("get_run_rows", {"run_id": profiled["run_id"], "limit": 3})
    assert progress and len(profiled["results"]) == 2
    assert profiled["results"][0]["stats"][TIME]["n"] == 3
    assert profiled["kernels"] == {"run": ["fused_kernel"]}  # demo.EXAMPLE_SOURCE
    assert {v["verdict"] for v in compared["configs"][0]["variants"].values()} <= {
        "baseline",
        "faster",
        "slower",
        "within_noise",
    }
    kernel = roof["kernels"][0]
    assert kernel["roofline"]["bound"] in {"memory-bound", "compute-bound", "latency-bound"}
    assert kernel["roofline"]["dram_bytes_per_s"] > 1e11
    assert not rows.is_error


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain ``text`` (from /proc; Linux only)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended while we looked
            continue
        if text in argv:
            found.append(argv)
    return found


@pytest.mark.gpu
async def test_cancelling_a_real_run_stops_ncu_and_the_server_keeps_serving(
    server: MCPServer, tmp_path: Path
) -> None:
    from nsight_agent import demo

    started = anyio.Event()

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        if p >= 1:  # ncu has profiled at least one range: cancel mid-collection
            started.set()

    long_sweep = {"n": [1 << k for k in range(12, 22)]}
    async with Client(server, read_timeout_seconds=900) as client:
        with anyio.fail_after(300):
            async with anyio.create_task_group() as tasks:

                async def call() -> None:
                    await client.call_tool(
                        "profile_kernel",
                        {"source": demo.EXAMPLE_SOURCE, "configs": long_sweep, "runs": 50},
                        progress_callback=on_progress,
                    )

                tasks.start_soon(call)
                await started.wait()
                assert _processes_mentioning(str(tmp_path)), "ncu was not running"
                tasks.cancel_scope.cancel()
        with anyio.fail_after(30):
            while _processes_mentioning(str(tmp_path)):
                await anyio.sleep(0.2)
        info = await client.call_tool("device_info", {})
    assert not info.is_error
    run_dirs = [d for d in tmp_path.iterdir() if (d / "request.json").is_file()]
    assert run_dirs, "the cancelled run's folder is gone"


@pytest.mark.gpu
async def test_device_info_probes_counter_access(server: MCPServer) -> None:
    async with Client(server, read_timeout_seconds=300) as client:
        tools = await _schemas(client)
        data = _validate(
            await client.call_tool("device_info", {"probe_counters": True}),
            tools["device_info"].output_schema,
        )
    assert data["gpus"] and data["ncu_version"]
    assert data["counters"]["permitted"] == "yes", data["counters"]
    assert data["can_profile"] is True


TIMED = """
import torch

def setup(n, device="cpu"):
    # The global generator: the harness seeds it anew for every run.
    return (torch.randn(n, device=device),)

def run(x):
    return x * 2.0

def fast(x):
    return x + x

_memo = {}
def memo(x):
    # Returns the first call's result for ever: right on the first inputs, stale after.
    key = x.numel()
    if key not in _memo:
        _memo[key] = x * 2.0
    return _memo[key]
"""


async def test_the_timing_method_needs_no_ncu_and_catches_a_stale_variant(
    tmp_path: Path,
) -> None:
    async with Client(build_server(tmp_path)) as client:
        tools = await _schemas(client)
        profiled = await client.call_tool(
            "profile_kernel",
            {"source": TIMED, "configs": [{"n": 20000}], "language": "torch", "method": "timing"},
        )
        compared = await client.call_tool(
            "compare_variants",
            {
                "source": TIMED,
                "configs": {"n": [20000, 40000]},
                "language": "torch",
                "method": "timing",
                "variants": [
                    {"name": "run"},
                    {"name": "fast", "entry": "fast"},
                    {"name": "memo", "entry": "memo"},
                ],
            },
        )
    data = _validate(profiled, tools["profile_kernel"].output_schema)
    assert data["results"][0]["stats"]["gpu__time_duration.sum"]["n"] >= 5
    assert any("measured by perf_counter" in w for w in data["warnings"])
    # the text a model reads names CPU times as such, not as the GPU duration metric
    for answer in (profiled, compared):
        text = "\n".join(c.text for c in answer.content if isinstance(c, TextContent))
        assert "CPU time (perf_counter)" in text, text
    data = _validate(compared, tools["compare_variants"].output_schema)
    assert data["overall"]["memo"]["verdict"] == "incorrect"
    assert "geomean_speedup" not in data["overall"]["memo"]
    assert data["overall"]["fast"]["verdict"] != "incorrect"
