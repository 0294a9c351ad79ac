"""Through a real MCP client, on the CPU's timing path: what a tool cannot use is refused with
what to do, never dropped or answered as if it meant something (an argument beside a run_id
or a report, a misspelt variant key, a page past the end, a table or metric a run lacks, a
hint the diagnosis cannot read), and a run without measurements is said to be one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import TextContent

from nsight_agent.server.app import build_server

SOURCE = """import torch
def setup(n, device="cpu"):
    return {"x": torch.randn(n, device=device)}
def run(x):
    return x * 2.0
def run_sum(x):
    return x + x
"""
TIMED = {"configs": [{"n": 1000}], "language": "torch", "method": "timing"}
REPORT = next((Path(__file__).parents[1] / "nsight_agent" / "data" / "reports").glob("*.ncu-rep"))

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def _refused(client: Client, tool: str, args: dict[str, Any], *needles: str) -> str:
    answer = await client.call_tool(tool, args)
    text = _text(answer)
    assert answer.is_error, text
    for needle in needles:
        assert needle in text, (needle, text)
    return text


async def test_earlier_runs_are_read_as_they_are_and_what_they_lack_is_said(
    tmp_path: Path,
) -> None:
    async with Client(build_server(tmp_path)) as client:
        one = await client.call_tool("profile_kernel", {"source": SOURCE, **TIMED})
        assert not one.is_error, _text(one)
        single = one.structured_content["run_id"]
        two = await client.call_tool(
            "compare_variants",
            {"source": SOURCE, "variants": [{"name": "a"}, {"name": "b", "entry": "run_sum"}]}
            | TIMED,
        )
        assert not two.is_error, _text(two)
        pair = two.structured_content["run_id"]

        # A page past the end: refused with the pages there are, never "no measurements".
        text = await _refused(
            client, "get_run", {"run_id": single, "offset": 99}, "past the end", "offsets 0 to 0"
        )
        assert "no measurements" not in text
        await _refused(client, "get_run_rows", {"run_id": single, "offset": 500}, "past the end")
        await _refused(
            client, "diagnose_kernel", {"report_path": str(REPORT), "offset": 50}, "past the end"
        )
        # A timed run keeps no raw rows, and a metric it lacks is named with those it has.
        await _refused(
            client, "get_run_rows", {"run_id": single, "table": "raw"}, "keeps no raw rows"
        )
        await _refused(
            client,
            "get_run_rows",
            {"run_id": single, "metric": "nope"},
            "'nope' is not in run",
            "gpu__time_duration.sum",
        )
        # Re-reading a comparison: a new measurement's arguments would be ignored.
        await _refused(
            client,
            "compare_variants",
            {"run_id": pair, "variants": [{"name": "x"}, {"name": "y"}], "method": "timing"},
            "- variants: compare_variants with run_id",
            "- method:",
        )
        await _refused(client, "compare_variants", {"run_id": single}, "nothing to compare")
        again = await client.call_tool("compare_variants", {"run_id": pair, "baseline": "b"})
        assert not again.is_error, _text(again)
        assert again.structured_content["baseline"] == "b"


async def test_a_report_with_a_run_id_or_unreadable_hints_is_refused_with_every_problem(
    tmp_path: Path,
) -> None:
    async with Client(build_server(tmp_path)) as client:
        args = {"report_path": str(REPORT), "run_id": "x", "source": SOURCE}
        args |= {"ideal_bytes": -5, "input_dtypes": ["notatype", "bf16", "torch.float16"]}
        text = await _refused(client, "diagnose_kernel", args, "has 4 problems")
        for line in (
            "- ideal_bytes: must be a positive number",
            "- input_dtypes: 'notatype' is not a dtype name",
            "- run_id: diagnose_kernel with report_path",
            "- source: diagnose_kernel with report_path",
        ):
            assert line in text, (line, text)
        await _refused(
            client, "summarize_report", {"path": "  "}, "The report path is empty", "run_id"
        )
        ok = await client.call_tool(
            "diagnose_kernel", {"report_path": str(REPORT), "input_dtypes": ["bfloat16"]}
        )
        assert not ok.is_error, _text(ok)


async def test_a_misspelt_variant_key_and_a_mistyped_grid_are_named(tmp_path: Path) -> None:
    async with Client(build_server(tmp_path)) as client:
        variants = [{"name": "a"}, {"name": "b", "entyr": "run_sum"}]
        await _refused(
            client,
            "compare_variants",
            {"source": SOURCE, "variants": variants, **TIMED},
            "'variants.1.entyr' is not allowed here",
            "takes name, entry, source",
        )
        grid = {**TIMED, "configs": {"n": 4096}}
        text = await _refused(
            client,
            "profile_kernel",
            {"source": SOURCE, **grid},
            "argument 'configs.n' must be a list (configs given as an object)",
        )
        assert "argument 'configs' must" not in text, text
        listed = {**TIMED, "configs": [{"n": 8}, 3]}
        await _refused(
            client,
            "profile_kernel",
            {"source": SOURCE, **listed},
            "argument 'configs.1' must be an object (configs given as a list)",
        )
        text = await _refused(client, "profile_kernel", {"source": SOURCE, "bogus": 1, **TIMED})
        assert "did you mean" not in text, text  # nothing is close to "bogus"


async def test_a_failed_run_has_nothing_to_plot_and_says_where_to_read_why(
    tmp_path: Path,
) -> None:
    broken = SOURCE.replace("return x * 2.0", "raise ValueError('boom')")
    async with Client(build_server(tmp_path)) as client:
        text = await _refused(client, "profile_kernel", {"source": broken, **TIMED}, "boom")
        run_id = text.split("(run ", 1)[1].split(")", 1)[0]
        await _refused(
            client, "plot_run", {"run_id": run_id}, "has no measurements to plot", "get_run("
        )
