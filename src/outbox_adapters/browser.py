"""What the library's browser-facing apps share (the feed, ADR 0022; the dead-letter console and
the endpoint portal, ADR 0026): the cross-site rule for state-changing requests and the security headers of every response.

:class:`BrowserGuard` wraps an ASGI app. Every response it passes gets
``Content-Security-Policy: frame-ancestors 'none'``, ``X-Frame-Options: DENY`` and
``X-Content-Type-Options: nosniff`` (no page of another site can frame a button of ours; no answer
is sniffed into another type). A request that changes state (any method but GET, HEAD, OPTIONS)
is refused before it reaches the app:

- 403 when it is cross-site: its ``Origin`` is not one of ``allowed_origins`` and either its
  ``Sec-Fetch-Site`` (sent by every current browser) is not ``same-origin`` or ``none``, or, without
  that header, its ``Origin`` is not the request's own (scheme, host and port of the ``Host``
  header) — an ``Origin: null`` (a sandboxed or file page) included;
- 415 when it carries a body, or a ``Content-Type``, other than ``application/json``: a form of
  another site can post ``application/x-www-form-urlencoded``, ``multipart/form-data`` or
  ``text/plain`` without a CORS preflight, never JSON.

A request with neither header (a script, curl, a test client) is not a browser's cross-site request
and passes. docs/guides/feed.md ("Browsers") and docs/reliability.md ("Security") say what a host
behind a TLS-terminating proxy configures.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["SECURITY_HEADERS", "BrowserGuard", "cross_site_refusal", "origin_of"]

#: The headers every response of a guarded app carries.
SECURITY_HEADERS: Final = (
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
)
_SAFE: Final = frozenset({"GET", "HEAD", "OPTIONS"})
_SAME: Final = frozenset({"same-origin", "none"})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_JSON: Final = "application/json"


def origin_of(url: str) -> str | None:
    """``scheme://host:port`` of ``url`` (the port always written), or ``None`` when it has no
    scheme or host (``null``, garbage)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "")
    if not scheme or not host:
        return None
    if port is None:
        port = _DEFAULT_PORTS.get(scheme)
    return f"{scheme}://{host}:{port}"


def _own_origin(scope: Scope, headers: Headers) -> str | None:
    host = headers.get("host")
    if not host:
        return None
    return origin_of(f"{scope.get('scheme', 'http')}://{host}")


def cross_site_refusal(
    scope: Scope, headers: Headers, allowed_origins: frozenset[str]
) -> str | None:
    """Why this state-changing request is refused as cross-site (403), or ``None``."""
    origin = headers.get("origin")
    if origin is not None and origin_of(origin) in allowed_origins:
        return None
    site = headers.get("sec-fetch-site")
    if site is not None:
        if site.strip().lower() in _SAME:
            return None
        return f"cross-site request refused (Sec-Fetch-Site: {site[:20]})"
    if origin is None:
        return None
    found = origin_of(origin)
    if found is None or found != _own_origin(scope, headers):
        return f"cross-site request refused (Origin: {origin[:80]})"
    return None


def _content_refusal(headers: Headers) -> str | None:
    """Why this request's body is refused (415), or ``None``: JSON or no body at all."""
    kind = headers.get("content-type")
    if kind is not None:
        if kind.split(";")[0].strip().lower() == _JSON:
            return None
        return f"send JSON (Content-Type: {_JSON}) or no body, got Content-Type: {kind[:60]}"
    length = headers.get("content-length", "0").strip()
    if "transfer-encoding" in headers or length not in ("", "0"):
        return f"send JSON (Content-Type: {_JSON}) or no body"
    return None


class BrowserGuard:
    """``app`` behind the cross-site rule, its responses with :data:`SECURITY_HEADERS`.

    ``allowed_origins``: origins (``https://admin.example.com``) whose state-changing requests are
    accepted although they are not the request's own, e.g. the public origin when a proxy in front
    rewrites the scheme or host. ``direct``: route paths (relative to the mount) whose endpoint
    sends the headers itself and is passed the server's ``send`` as is (the feed's stream: no
    wrapped send on every event, ADR 0022).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed_origins: Iterable[str] = (),
        direct: Iterable[str] = (),
    ) -> None:
        self.app = app
        origins = set()
        for allowed in allowed_origins:
            found = origin_of(allowed)
            if found is None:
                raise ValueError(f"allowed origin {allowed!r} is not scheme://host[:port]")
            origins.add(found)
        self.allowed_origins = frozenset(origins)
        self._direct = frozenset(direct)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        if method in _SAFE and _route_path(scope) in self._direct:
            await self.app(scope, receive, send)
            return
        if method not in _SAFE:
            headers = Headers(scope=scope)
            why = cross_site_refusal(scope, headers, self.allowed_origins)
            status = 403
            if why is None:
                why, status = _content_refusal(headers), 415
            if why is not None:
                reply = JSONResponse({"error": why}, status_code=status)
                reply.raw_headers.extend(SECURITY_HEADERS)
                await reply(scope, receive, send)
                return

        started = False

        async def secured(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [*message.get("headers", ()), *SECURITY_HEADERS]
            await send(message)

        try:
            await self.app(scope, receive, secured)
        except HTTPException as exc:
            # A mounted Router raises its 404 and 405 for the host's exception middleware, which
            # would answer outside this guard: answered here instead, with the headers.
            if started:
                raise
            reply = JSONResponse({"error": exc.detail}, status_code=exc.status_code)
            reply.headers.update(exc.headers or {})
            await reply(scope, receive, secured)


def _route_path(scope: Scope) -> str:
    """The path below the mount point (what Starlette's routes match)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("/", ""):
        return path[len(root) :]
    return path
