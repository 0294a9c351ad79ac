"""Streamable HTTP that is safe by default (docs/SECURITY.md).

The server runs the code its clients send, so who can reach it is the whole question:
- loopback unless told otherwise; any other address needs a bearer token (from
  ``NSIGHT_AGENT_TOKEN`` or a token file), compared in constant time, or it refuses to start;
- Host and Origin are checked on every bind (the SDK's DNS-rebinding protection, which it only
  turns on by itself for loopback), with the allowed values configurable;
- request bodies are capped (the SDK answers 413 past the cap);
- report paths are read only under the runs folder and the folders given with ``--allow-dir``.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from nsight_agent.errors import InvalidRequestError

TOKEN_ENV = "NSIGHT_AGENT_TOKEN"
MAX_BODY_BYTES = 8 * 1024 * 1024  # a source is capped at 4 MiB; JSON escaping may double it

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


class BearerToken:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        given = b""
        for name, value in scope.get("headers", []):
            if name.lower() == b"authorization" and value[:7].lower() == b"bearer ":
                given = value[7:].strip()
        if hmac.compare_digest(given, self.token):
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {"error": "unauthorized", "hint": "send Authorization: Bearer <token>"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="nsight-agent"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


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
    app: ASGIApp = server.streamable_http_app(
        host=host,
        transport_security=security_settings(host, port, hosts, origins),
        max_request_body_size=max_body,
    )
    return BearerToken(app, token) if token else app


def allowed(path: Path, folders: Sequence[Path]) -> bool:
    """Whether ``path`` (resolved: links and ``..`` followed) lies under one of ``folders``."""
    real = path.resolve()
    return any(real.is_relative_to(folder.resolve()) for folder in folders)
