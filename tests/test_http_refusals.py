"""HTTP refusals the MCP SDK's client can show: a refused Host (421), a
missing or wrong token (401) and a body over the limit (413) answered with a JSON-RPC error
that says why and what to do (mcp 2.3's client shows a JSON-RPC error body of a non-2xx
answer as the error's message; any other body becomes an opaque -32603 "Server returned an
error response"); the server's log says the same, and start-up prints the hosts it accepts.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from nsight_agent.server import http

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "records-token-0123456789abcdef"


def show(what: str, value: str) -> None:
    """What a user sees, printed for ``pytest -rP`` (the closing notes quote it)."""
    print(f"{what}: {value}")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, Path]]:
    """``serve --transport streamable-http --host 0.0.0.0`` with a token file; its log."""
    tmp = tmp_path_factory.mktemp("http")
    port = free_port()
    (tmp / "token").write_text(TOKEN + "\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("NSIGHT_AGENT_TOKEN", None)
    log = tmp / "server.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "nsight_agent", "serve", "--transport", "streamable-http",
         "--host", "0.0.0.0", "--port", str(port), "--token-file", str(tmp / "token"),
         "--runs-root", str(tmp / "runs")],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=tmp,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "Uvicorn running" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the server did not listen within 60 s"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", port, log
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def refusal(url: str, headers: dict[str, str], tool_args: dict[str, Any] | None) -> str:
    """What the SDK's client raises for one call through ``headers``."""
    client = Client(
        streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=60)),
        read_timeout_seconds=60,
    )
    with pytest.raises(BaseException) as info:  # the SDK's MCPError, maybe in a group
        async with client:
            if tool_args is None:
                await client.list_tools()
            else:
                await client.call_tool("profile_kernel", tool_args)
    err: BaseException = info.value
    while getattr(err, "exceptions", None):  # an exception group (Python 3.10: the backport)
        err = err.exceptions[0]  # type: ignore[attr-defined]
    assert isinstance(err, MCPError), repr(err)
    return str(err)


async def test_a_refused_host_names_it_and_the_option_that_allows_it(
    server: tuple[str, int, Path],
) -> None:
    url, port, log = server
    host = f"10.9.8.7:{port}"  # a remote client reaching the server by its address
    said = await refusal(url, {"Authorization": f"Bearer {TOKEN}", "Host": host}, None)
    show("a refused Host, as the SDK client raises it", said)
    assert "421" in said and f"--allow-host {host}" in said and "127.0.0.1:" in said, said
    assert "refused an HTTP request (421)" in log.read_text()


async def test_a_missing_or_wrong_token_says_so(server: tuple[str, int, Path]) -> None:
    url, _, _ = server
    missing = await refusal(url, {}, None)
    show("no token, as the SDK client raises it", missing)
    assert "401" in missing and "no bearer token" in missing and "--token-file" in missing
    wrong = await refusal(url, {"Authorization": "Bearer nope"}, None)
    assert "does not match" in wrong, wrong


async def test_a_body_over_the_limit_names_the_limit(server: tuple[str, int, Path]) -> None:
    url, _, log = server
    huge = {"source": "#" + "a" * (9 << 20), "configs": [{"n": 1}], "language": "torch"}
    said = await refusal(url, {"Authorization": f"Bearer {TOKEN}"}, huge)
    show("a 9 MiB body, as the SDK client raises it", said)
    assert "413" in said and "8 MiB" in said, said
    assert "refused an HTTP request (413)" in log.read_text()


def test_start_up_prints_the_hosts_it_accepts_and_how_to_add_one(
    server: tuple[str, int, Path],
) -> None:
    _, port, log = server
    text = log.read_text()
    show("start-up", text[: text.find("Uvicorn running")].strip())
    assert f"accepted Host headers: 127.0.0.1:{port}, localhost:{port}, [::1]:{port}" in text
    assert f"--allow-host NAME:{port}" in text and "token: required" in text


def test_start_up_text_lists_the_extra_hosts() -> None:
    text = http.startup_text("127.0.0.1", 8000, None, ("gpu-box:8000",))
    assert "127.0.0.1:8000, localhost:8000, [::1]:8000, gpu-box:8000" in text
    assert "token: none (loopback only)" in text
