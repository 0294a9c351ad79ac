"""What the server costs an agent's context, measured through the SDK client.

tools/list: names, descriptions and input schemas (what a model reads of every tool on every
turn) <= 8 KiB in all; output schemas <= 18.5 KiB; the README and docs/MCP.md state both figures
as measured here. Answers: profile_kernel of 3 configs x 1 metric <= 1.2 KB, compare_variants
of 4 variants x 3 configs <= 3.1 KB, summarize_report of 8 kernels <= 4 KB by default. Sizes
are compact JSON of the structured content, the part a client passes to the model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from mcp import Client

from nsight_agent.engine import pipeline
from nsight_agent.engine.pipeline import RunResult
from nsight_agent.judge.reading import read_report
from nsight_agent.server.app import build_server
from nsight_agent.service.summaries import report_summary
from nsight_agent.views.common import dump
from nsight_agent.views.report import KernelLine, summarize_action

PLANTED = Path(__file__).parent / "fixtures" / "planted"
TIME = "gpu__time_duration.sum"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def size(data: Any) -> int:
    return len(json.dumps(data, separators=(",", ":")))


def four_variants(root: Path, sweep: Any) -> RunResult:
    """The recorded sweep's two variants, each also under a second name: 4 x 3 configs."""
    run = sweep.run(root, metrics=[TIME])
    copies = []
    for frame in (run.processed, run.raw):
        renamed = frame.copy()
        renamed["Annotation"] = renamed["Annotation"] + "_v2"
        copies.append(pd.concat([frame, renamed], ignore_index=True))
    run.processed, run.raw = copies
    run.kernels = {**run.kernels, **{f"{k}_v2": v for k, v in run.kernels.items()}}
    pipeline.save_result(run)
    return pipeline.load_run(run.run_id, runs_root=root)


async def tool_list_sizes() -> tuple[int, int]:
    """(model-visible bytes: names, descriptions and input schemas; output schema bytes)."""
    async with Client(build_server()) as client:
        tools = (await client.list_tools()).tools
    visible = sum(len(t.name) + len(t.description or "") + size(t.input_schema) for t in tools)
    outputs = sum(size(t.output_schema) for t in tools if t.output_schema)
    return visible, outputs


@pytest.mark.anyio
async def test_tools_list_fits_its_budget() -> None:
    visible, outputs = await tool_list_sizes()
    print(f"tools/list: {visible} B visible, {outputs} B of output schemas")
    assert visible <= 8 * 1024, visible
    # Output schemas are read by clients that validate answers; the model sees them only
    # where a client passes them on. diagnose_kernel's step view is most of them, then
    # compare_variants' time bases and KernelBench's result fields.
    assert outputs <= 18.5 * 1024, outputs


ROOT = Path(__file__).resolve().parents[1]
# "<under|about> N KB" of each figure, where the README and docs/MCP.md state it.
VISIBLE_FIGURE = re.compile(r"tool list costs (?:an agent )?(under|about) (\d+) KB of context")
OUTPUT_FIGURE = re.compile(r"(under|about) (\d+) KB\s+of output schemas")


def figure_holds(word: str, kb: int, measured: int) -> bool:
    """ "under N KB": within N KiB and more than N-1 (the figure stays tight); "about N KB":
    N KiB when rounded."""
    if word == "under":
        return (kb - 1) * 1024 < measured <= kb * 1024
    return round(measured / 1024) == kb


@pytest.mark.anyio
async def test_the_docs_state_the_tool_list_sizes_the_server_publishes() -> None:
    visible, outputs = await tool_list_sizes()
    stated = {
        "README.md": [(VISIBLE_FIGURE, visible)],
        "docs/MCP.md": [(VISIBLE_FIGURE, visible), (OUTPUT_FIGURE, outputs)],
    }
    for doc, figures in stated.items():
        text = " ".join((ROOT / doc).read_text().split())
        for pattern, measured in figures:
            found = pattern.findall(text)
            assert found, f"{doc} states no figure matching {pattern.pattern!r}"
            for word, kb in found:
                assert figure_holds(word, int(kb), measured), (
                    f"{doc} says {word} {kb} KB; the server publishes {measured} B "
                    f"({measured / 1024:.1f} KiB)"
                )


@pytest.mark.anyio
async def test_answers_fit_their_budgets(tmp_path: Path, sweep: Any) -> None:
    one_variant = sweep.run(tmp_path, variants=[sweep.variants()[0]], run_id="one")
    compared = four_variants(tmp_path / "four", sweep)
    async with Client(build_server(tmp_path)) as client:
        profiled = await client.call_tool("get_run", {"run_id": one_variant.run_id})
    async with Client(build_server(tmp_path / "four")) as client:
        compare = await client.call_tool("compare_variants", {"run_id": compared.run_id})
    assert not profiled.is_error and not compare.is_error
    # get_run answers exactly what profile_kernel answered for the run.
    assert len(profiled.structured_content["results"]) == 3
    print(
        f"profile 3x1: {size(profiled.structured_content)} B; compare 4x3: {size(compare.structured_content)} B"
    )
    assert size(profiled.structured_content) <= 1200, size(profiled.structured_content)
    assert len(compare.structured_content["overall"]) == 4
    # 2500 B until the answer named its time basis and what the times are (about 100 B),
    # 2600 B until each cell carried its median and 20th/80th percentiles beside its mean
    # (about 42 B a cell).
    assert size(compare.structured_content) <= 3100, size(compare.structured_content)
    cell = compare.structured_content["configs"][0]["variants"]
    assert all(v["median"] > 0 for v in cell.values() if v.get("time")), cell


PATH_ALLOWANCE = 64  # characters of a report's path, as a user passes it


def test_summarize_report_of_eight_kernels_fits_4kb() -> None:
    """By default two kernels in full and one line for the others: the answer for 8 kernels is
    bounded by the largest full entry and the longest line seen on the planted H200 reports."""
    reports = sorted(PLANTED.glob("*.ncu-rep"))
    if not reports:
        pytest.skip("planted fixtures not present")
    full, line = 0, 0
    for path in reports:
        read = read_report(path)
        action = read.actions[0]
        full = max(full, size(dump(summarize_action(0, action, read.ranges[0]))))
        name = str(action.name())[:80]
        line = max(
            line, size(dump(KernelLine(index=7, kernel=name, duration_ns=1.234e6, share_pct=12.3)))
        )
    summary = report_summary(reports[0])
    # The answer names the report's path: count a path of PATH_ALLOWANCE characters, not this
    # checkout's (a clone under a longer folder must not change the verdict).
    envelope = size(dump(summary)) - size(dump(summary.actions[0]))
    envelope += PATH_ALLOWANCE - len(summary.report)
    worst = envelope + 2 * full + 6 * line
    print(f"summarize_report of 8 kernels, worst case: {worst} bytes")
    assert worst <= 4096, (envelope, full, line, worst)
