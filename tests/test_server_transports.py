"""`nsight-agent serve` as a subprocess, over stdio and streamable HTTP, with the SDK's client."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
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


def _serve_http(
    tmp_path: Path, port: int, *extra: str, token: str | None = None
) -> subprocess.Popen[bytes]:
    env = _env(tmp_path)
    env.pop("NSIGHT_AGENT_TOKEN", None)
    if token is not None:
        env["NSIGHT_AGENT_TOKEN"] = token
    log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - the child keeps it
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "nsight_agent", "serve", "--transport", "streamable-http"),
            *("--port", str(port), "--runs-root", str(tmp_path / "runs"), *extra),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )


TOKEN = "test-token-0123456789abcdef"


@pytest.fixture(params=[None, TOKEN], ids=["no-token", "token"])
def http_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    port = _free_port()
    token = request.param
    proc = _serve_http(
        tmp_path, port, "--host", "127.0.0.1", "--allow-dir", str(H200_REPORT.parent), token=token
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


def _client(url: str, token: str | None) -> Client:
    if token is None:
        return Client(url, read_timeout_seconds=60)
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60)


async def test_streamable_http(http_server: str, request: pytest.FixtureRequest) -> None:
    token = request.node.callspec.params["http_server"]
    async with _client(http_server, token) as client:
        await _exercise(client)
        # Over HTTP, reports are read only from the runs folder and --allow-dir folders, and
        # the refusal does not say whether the path exists.
        for path in ("/etc/passwd", "/no/such/file.ncu-rep", str(ROOT / "README.md")):
            refused = await client.call_tool("summarize_report", {"path": path})
            assert refused.is_error and "--allow-dir" in _text(refused)


def _text(result: object) -> str:
    content = getattr(result, "content", [])
    return "\n".join(c.text for c in content if isinstance(c, TextContent))


async def test_http_checks_token_host_and_origin(
    http_server: str, request: pytest.FixtureRequest
) -> None:
    token = request.node.callspec.params["http_server"]
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(timeout=30) as http:
        if token is not None:
            missing = await http.post(http_server, json=body, headers=accept)
            wrong = await http.post(
                http_server, json=body, headers={**accept, "Authorization": "Bearer nope"}
            )
            assert missing.status_code == 401 and wrong.status_code == 401
        evil_host = await http.post(
            http_server, json=body, headers={**accept, **auth, "Host": "evil.example"}
        )
        assert evil_host.status_code == 421
        evil_origin = await http.post(
            http_server, json=body, headers={**accept, **auth, "Origin": "http://evil.example"}
        )
        assert evil_origin.status_code == 403
        huge = await http.post(
            http_server,
            content=b'{"jsonrpc": "2.0", "id": 2, "method": "ping", "x": "'
            + b"a" * (9 << 20)
            + b'"}',
            headers={**accept, **auth},
        )
        assert huge.status_code == 413


def test_no_public_bind_without_a_token(tmp_path: Path) -> None:
    proc = _serve_http(tmp_path, _free_port(), "--host", "0.0.0.0")
    assert proc.wait(timeout=60) == 2
    log = (tmp_path / "server.log").read_text()
    assert "Refusing to serve on 0.0.0.0 without authentication" in log
    assert "NSIGHT_AGENT_TOKEN" in log
