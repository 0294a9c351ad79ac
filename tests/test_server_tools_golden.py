"""What agents see of the server, byte for byte: tool names, descriptions, input and output
schemas and the resource templates, against a recorded copy.

A change to any of them must be deliberate: regenerate the copy with
``python -m tests.test_server_tools_golden > tests/fixtures/tools_list.json`` and say why in the
commit (a refactor must leave it unchanged).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from mcp import Client

from nsight_agent.server.app import build_server

GOLDEN = Path(__file__).parent / "fixtures" / "tools_list.json"


async def published() -> str:
    async with Client(build_server()) as client:
        tools = (await client.list_tools()).tools
        templates = (await client.list_resource_templates()).resource_templates
    out = {
        "tools": [t.model_dump(mode="json", exclude_none=True) for t in tools],
        "resource_templates": [r.model_dump(mode="json", exclude_none=True) for r in templates],
    }
    return json.dumps(out, indent=1, sort_keys=True) + "\n"


@pytest.mark.anyio
async def test_the_published_tools_match_the_recorded_copy() -> None:
    now = await published()
    recorded = GOLDEN.read_text()
    if now != recorded:
        names = {t["name"] for t in json.loads(now)["tools"]}
        before = {t["name"] for t in json.loads(recorded)["tools"]}
        changed = [
            t["name"] for t in json.loads(now)["tools"] if t not in json.loads(recorded)["tools"]
        ]
        raise AssertionError(
            f"tools/list changed: added {sorted(names - before)}, removed "
            f"{sorted(before - names)}, changed {changed}. If deliberate, regenerate "
            "tests/fixtures/tools_list.json (see this module's docstring)."
        )


if __name__ == "__main__":
    print(asyncio.run(published()), end="")
