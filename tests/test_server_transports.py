"""`nsight-agent serve` as a subprocess, over stdio and streamable HTTP, with the SDK's client."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextContent

H200_REPORT = Path(__file__).parent / "fixtures" / "h200_bf16_matmul_sections.ncu-rep"

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


async def _exercise(client: Client) -> None:
    tools = {t.name for t in (await client.list_tools()).tools}
    assert {"profile_kernel", "summarize_report", "device_info"} <= tools
    result = await client.call_tool("summarize_report", {"path": str(H200_REPORT)})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["actions"][0]["kernel"].startswith("nvjet_sm90")
    assert isinstance(result.content[0], TextContent) and "NVIDIA H200" in result.content[0].text


async def test_stdio(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nsight_agent", "serve", "--runs-root", str(tmp_path / "runs")],
        env=_env(tmp_path),
        cwd=str(tmp_path),
    )
    async with Client(params, read_timeout_seconds=60) as client:
        await _exercise(client)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nsight_agent",
            "serve",
            "--transport",
            "streamable-http",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--runs-root",
            str(tmp_path / "runs"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited: {(tmp_path / 'server.log').read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("server did not listen within 60 s")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


async def test_streamable_http(http_server: str) -> None:
    async with Client(http_server, read_timeout_seconds=60) as client:
        await _exercise(client)
