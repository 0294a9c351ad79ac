"""Streamable HTTP that is safe by default (docs/SECURITY.md).

The server runs the code its clients send, so who can reach it is the whole question:
- loopback unless told otherwise; any other address needs a bearer token (from
  ``NSIGHT_AGENT_TOKEN`` or a token file), compared in constant time, or it refuses to start;
- Host and Origin are checked on every bind (the SDK's DNS-rebinding protection, which it only
  turns on by itself for loopback), with the allowed values configurable;
- request bodies are capped (the SDK answers 413 past the cap);
- report paths are read only under the runs folder and the folders given with ``--allow-dir``.
A refused request (401, 403, 413, 421) is answered with a JSON-RPC error body that says why
and what to do, which the MCP SDK's client shows as the error's message (mcp 2.3 reads a
JSON-RPC error from a non-2xx JSON body; any other body becomes an opaque -32603), and the
server's log (stderr) says the same. Start-up prints the Host values it accepts.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from nsight_agent.errors import InvalidRequestError

TOKEN_ENV = "NSIGHT_AGENT_TOKEN"
MAX_BODY_BYTES = 8 * 1024 * 1024  # a source is capped at 4 MiB; JSON escaping may double it
# JSON-RPC codes of refused requests (the implementation-defined server error range).
REFUSED_CODES = {401: -32001, 403: -32003, 413: -32013, 421: -32021}
log = logging.getLogger("nsight_agent.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(token_file: Path | None) -> str | None:
    """The bearer token: the file's first line, else ``NSIGHT_AGENT_TOKEN``; None if neither."""
    if token_file is not None:
        try:
            text = token_file.read_text().strip()
        except OSError as err:
            raise InvalidRequestError(
                f"Cannot read the token file {token_file}: {err.strerror}.",
                "Give a readable file holding one line: the token.",
            ) from err
        if not text:
            raise InvalidRequestError(f"The token file {token_file} is empty.")
        return text.splitlines()[0]
    return os.environ.get(TOKEN_ENV) or None


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to listen off loopback without a token."""
    if not is_loopback(host) and not token:
        raise InvalidRequestError(
            f"Refusing to serve on {host} without authentication: anyone who reaches it could "
            "run code on this machine.",
            f"Set a bearer token ({TOKEN_ENV}=<long random string>, or --token-file FILE), "
            "or bind to 127.0.0.1 and reach it through an SSH tunnel or a TLS reverse proxy "
            "(docs/SECURITY.md).",
        )


def security_settings(
    host: str, port: int, hosts: Sequence[str] = (), origins: Sequence[str] = ()
) -> TransportSecuritySettings:
    """Host/Origin validation on every bind: loopback names, the bound address, and extras."""
    names = ["127.0.0.1", "localhost", "[::1]"]
    if not is_loopback(host) and host not in ("0.0.0.0", "::"):
        names.append(host)
    allowed_hosts = [f"{n}:{port}" for n in names] + [*hosts]
    allowed_origins = [f"http://{n}:{port}" for n in names] + [*origins]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
    )


def header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return ""


async def refuse(send: Send, status: int, message: str, headers: Sequence[Any] = ()) -> None:
    """Answer a refused request with a JSON-RPC error the SDK's client shows, and log it."""
    log.warning("refused an HTTP request (%d): %s", status, message)
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": REFUSED_CODES.get(status, -32000),
            "message": message, "data": {"http_status": status}}}  # fmt: skip
    start = [(b"content-type", b"application/json"), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


class BearerToken:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        given = header(scope, b"authorization")
        token = given[7:].strip().encode("latin-1") if given[:7].lower() == "bearer " else b""
        if hmac.compare_digest(token, self.token):
            await self.app(scope, receive, send)
            return
        said = "a bearer token that does not match" if token else "no bearer token"
        await refuse(
            send,
            401,
            f"nsight-agent refused the request (401 Unauthorized): it carries {said}. Send "
            "`Authorization: Bearer <token>` with the token the server was started with "
            f"(its --token-file or {TOKEN_ENV}).",
            [(b"www-authenticate", b'Bearer realm="nsight-agent"')],
        )


class RefusalBodies:
    """ASGI middleware: the SDK's plain-text refusals (421 Host, 403 Origin, 413 body too
    large) become JSON-RPC errors that name the value refused and the option that allows it."""

    def __init__(self, app: ASGIApp, hosts: Sequence[str], max_body: int) -> None:
        self.app, self.hosts, self.max_body = app, list(hosts), max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        refused: list[int] = []

        async def send_or_rewrite(message: Message) -> None:
            start = message["type"] == "http.response.start"
            if start and message["status"] in (403, 413, 421) and not _is_json(message):
                refused.append(int(message["status"]))
                return
            if refused and message["type"] == "http.response.body":
                if not message.get("more_body"):
                    await refuse(send, refused[0], self.explain(refused[0], scope))
                return
            await send(message)

        await self.app(scope, receive, send_or_rewrite)

    def explain(self, status: int, scope: Scope) -> str:
        if status == 421:
            host = header(scope, b"host")
            return (
                f"nsight-agent refused the request (421): its Host header {host!r} is not one "
                f"this server accepts ({', '.join(self.hosts)}). Restart the server with "
                f"--allow-host {host or 'HOST:PORT'} to accept it (repeat the option for more)."
            )
        if status == 403:
            origin = header(scope, b"origin")
            return (
                f"nsight-agent refused the request (403): its Origin {origin!r} is not allowed. "
                f"Restart the server with --allow-origin {origin or 'ORIGIN'} to accept it."
            )
        return (
            f"nsight-agent refused the request (413): its body is larger than the server's "
            f"limit of {self.max_body} bytes ({self.max_body / 2**20:g} MiB). Send less: a "
            "source is capped at 4 MiB; split a large sweep into several calls."
        )


def _is_json(start: Message) -> bool:
    types = [bytes(v).lower() for k, v in start.get("headers", []) if k.lower() == b"content-type"]
    return any(t.startswith(b"application/json") for t in types)


def startup_text(
    host: str,
    port: int,
    token: str | None,
    hosts: Sequence[str] = (),
    origins: Sequence[str] = (),
) -> str:
    """What start-up prints (stderr): where it listens, the Host values it accepts, how to add
    one, and whether a token is required."""
    accepted = security_settings(host, port, hosts, origins).allowed_hosts or []
    name = socket.gethostname()
    lines = [
        f"nsight-agent: MCP over streamable HTTP on http://{host}:{port}/mcp",
        f"  accepted Host headers: {', '.join(accepted)}",
        "  a client reaching this server by another name or address gets 421: add it with "
        f"--allow-host NAME:{port} (e.g. --allow-host {name}:{port}; repeatable)",
        "  token: "
        + ("required (Authorization: Bearer <token>)" if token else "none (loopback only)"),
    ]
    return "\n".join(lines)


def http_app(
    server: MCPServer[Any],
    *,
    host: str,
    port: int,
    token: str | None,
    hosts: Sequence[str] = (),
    origins: Sequence[str] = (),
    max_body: int = MAX_BODY_BYTES,
) -> ASGIApp:
    """The server's streamable HTTP app with the checks above."""
    check_exposure(host, token)
    settings = security_settings(host, port, hosts, origins)
    app: ASGIApp = server.streamable_http_app(
        host=host,
        transport_security=settings,
        max_request_body_size=max_body,
    )
    app = RefusalBodies(app, settings.allowed_hosts or [], max_body)
    return BearerToken(app, token) if token else app


def allowed(path: Path, folders: Sequence[Path]) -> bool:
    """Whether ``path`` (resolved: links and ``..`` followed) lies under one of ``folders``."""
    real = path.resolve()
    return any(real.is_relative_to(folder.resolve()) for folder in folders)
