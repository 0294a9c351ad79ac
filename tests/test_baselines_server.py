"""Baselines through MCP, as an agent uses them: profile, name the run a baseline
with get_run(baseline=...), profile again and ask get_run(against=...) "is this better than my
best so far?"; the baselines and history resources. Real runs on the CPU timing path, through
the SDK's in-process client. A run on "another GPU" is a copy of a real run whose record was
edited (labelled stand-in), since this machine has no GPU at all."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from mcp import Client
from mcp.types import TextContent

from nsight_agent.engine.store import baselines
from nsight_agent.server.app import build_server

pytestmark = pytest.mark.anyio

SOURCE = """
import torch

def setup(n, device="cpu"):
    return (torch.randn(n, device=device),)

def run(x):
    return x * 2.0
"""
SLOW = SOURCE.replace(
    "    return x * 2.0", "    import time\n    time.sleep(0.002)\n    return x * 2.0"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _text(result: object) -> str:
    content = getattr(result, "content", [])
    return "\n".join(c.text for c in content if isinstance(c, TextContent))


async def test_name_compare_refuse_and_history_through_mcp(tmp_path: Path) -> None:
    args = {"configs": [{"n": 1000}, {"n": 4000}], "language": "torch", "method": "timing"}
    async with Client(build_server(tmp_path)) as client:
        first = await client.call_tool("profile_kernel", {"source": SOURCE, **args})
        assert not first.is_error, _text(first)
        best = first.structured_content["run_id"]
        named = await client.call_tool("get_run", {"run_id": best, "baseline": "best"})
        assert not named.is_error, _text(named)
        assert named.structured_content["name"] == "best"
        assert named.structured_content["method"] == "perf_counter"
        # The server made that run: its environment is recorded when it is named.
        assert (tmp_path / best / baselines.ENVIRONMENT_FILE).is_file()

        second = await client.call_tool("profile_kernel", {"source": SLOW, **args})
        slow = second.structured_content["run_id"]
        vs = await client.call_tool("get_run", {"run_id": slow, "against": "best"})
        assert not vs.is_error, _text(vs)
        data = vs.structured_content
        assert data["comparable"] is True and data["regression"] is True
        assert [c["verdict"] for c in data["configs"]] == ["slower", "slower"]
        assert data["baseline"]["baseline"] == "best" and data["drift_pct"] > 0
        assert "slower" in _text(vs)

        # Stand-in: a copy of the first run whose record says another GPU made it.
        other = "20261201-000000-standingpu00"
        shutil.copytree(tmp_path / best, tmp_path / other)
        frame = pd.read_csv(tmp_path / other / "processed.csv")
        frame.assign(GPU="NVIDIA A100-SXM4-80GB (stand-in)").to_csv(
            tmp_path / other / "processed.csv", index=False
        )
        refused = await client.call_tool("get_run", {"run_id": other, "against": "best"})
        assert not refused.is_error, _text(refused)
        assert refused.structured_content["comparable"] is False
        assert "GPU model differs" in refused.structured_content["reasons"][0]
        assert "compare_variants" in refused.structured_content["todo"]
        assert "verdict" not in json.dumps(refused.structured_content.get("configs", []))

        unknown = await client.call_tool("get_run", {"run_id": slow, "against": "nope"})
        assert unknown.is_error and "No baseline named 'nope'" in _text(unknown)

        listed = await client.read_resource("nsight-agent://baselines")
        names = [b["name"] for b in json.loads(getattr(listed.contents[0], "text", "[]"))]
        assert names == ["best"]
        history = await client.read_resource("nsight-agent://history/best")
        h = json.loads(getattr(history.contents[0], "text", "{}"))
        verdicts = {p["run_id"]: p["verdict"] for p in h["points"]}
        assert verdicts[best] == "reference" and verdicts[slow] == "slower"
        assert verdicts[other] == "not_comparable"
        with pytest.raises(Exception, match="neither a baseline"):
            await client.read_resource("nsight-agent://history/x")
