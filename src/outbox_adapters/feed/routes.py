"""The feed's HTTP routes, mounted by the host behind its own authentication (ADR 0022).

====================================  ==================================================================
``GET  /notifications``               a page, newest first: ``{"items": [...], "next_cursor": ...}``;
                                      ``?limit=`` (1 to ``max_page_size``) and ``?cursor=`` (from the
                                      previous page) are the only parameters read
``GET  /notifications/unread-count``  ``{"unread": n}``
``POST /notifications/{id}/read``     204; 404 when the principal's scope has no such notification
``POST /notifications/read-all``      ``{"marked": n}``
``GET  /stream``                      ``text/event-stream``: ``refresh`` events, ``: ping`` comments
====================================  ==================================================================

Every handler starts from the principal the host's :data:`~.principal.Authenticate` returns (none:
401) and works in that principal's scope. A ``?tenant_id=`` or any other parameter is never read
for scoping, and a row of another scope is indistinguishable from a row that does not exist (404).
Bad input is a 400 whose ``error`` names the parameter and what it must be. The POSTs read no
body: one may be empty or a JSON object (``{}``), anything else is a 400; a cross-site POST never
gets here (403 from the :class:`~outbox_adapters.browser.BrowserGuard` in front), nor a body of
another type than JSON (415).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from outbox_adapters.feed.replies import ServedFeed, error, principal_scope
from outbox_adapters.feed.stream import StreamEndpoint
from outbox_adapters.postgres.channels.feed import Cursor, Scope
from outbox_core.errors import StoreUnavailable

__all__ = ["STREAM", "routes"]

#: The stream's path (served without the guard's wrapped ``send``).
STREAM: Final = "/stream"
#: The most of a POST's body read (the POSTs read no field).
_MAX_BODY: Final = 1024

_WHOLE: Final = re.compile(r"\d{1,9}")
#: How much of a bad value an error message quotes back.
_QUOTE: Final = 40


def _quoted(value: str) -> str:
    return repr(value if len(value) <= _QUOTE else value[:_QUOTE] + "...")


def _limit(feed: ServedFeed, request: Request) -> int | str:
    """The page size asked for, or the 400 message saying why it can't be."""
    most = feed.settings.max_page_size
    raw = request.query_params.get("limit")
    if raw is None:
        return feed.settings.page_size
    if _WHOLE.fullmatch(raw) and 1 <= int(raw) <= most:
        return int(raw)
    return f"limit must be a whole number from 1 to {most}, got {_quoted(raw)}"


Handler = Callable[[ServedFeed, Request, Scope], Awaitable[Response]]


def _scoped(feed: ServedFeed, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` called with the principal's scope: 401 without a principal, 503 without the
    database."""

    async def endpoint(request: Request) -> Response:
        scope = await principal_scope(feed.authenticate, request)
        if scope is None:
            return error(401, "not authenticated")
        if request.method == "POST" and (bad := await _bad_body(request)) is not None:
            return error(400, bad)
        try:
            return await handler(feed, request, scope)
        except StoreUnavailable:
            return error(503, "the feed's database is unavailable; try again shortly")

    return endpoint


async def _bad_body(request: Request) -> str | None:
    """Why a POST's body is refused (it must be empty or a JSON object), or ``None``."""
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > _MAX_BODY:
            return f"the body must be empty or a JSON object of at most {_MAX_BODY} bytes"
    if not raw.strip():
        return None
    try:
        found = json.loads(raw)
    except (ValueError, RecursionError):
        found = None
    if isinstance(found, dict):
        return None
    return "the body must be empty or a JSON object ({}): this endpoint reads no field"


async def _page(feed: ServedFeed, request: Request, scope: Scope) -> Response:
    limit = _limit(feed, request)
    if isinstance(limit, str):
        return error(400, limit)
    after = None
    raw = request.query_params.get("cursor")
    if raw is not None:
        try:
            after = Cursor.parse(raw)
        except ValueError as exc:
            return error(400, f"{exc}, got {_quoted(raw)}")
    found = await feed.store.page(scope, limit=limit, after=after)
    return JSONResponse(
        {
            "items": [item.as_json() for item in found.items],
            "next_cursor": None if found.next is None else found.next.text,
        }
    )


async def _unread(feed: ServedFeed, _request: Request, scope: Scope) -> Response:
    return JSONResponse({"unread": await feed.store.unread(scope)})


async def _mark_one(feed: ServedFeed, request: Request, scope: Scope) -> Response:
    notification_id: int = request.path_params["notification_id"]
    if not await feed.store.mark_read(scope, notification_id):
        return error(404, f"no notification {notification_id} in this feed")
    return Response(status_code=204)


async def _mark_all(feed: ServedFeed, _request: Request, scope: Scope) -> Response:
    return JSONResponse({"marked": await feed.store.mark_all_read(scope)})


def routes(feed: ServedFeed) -> list[Route]:
    """The routes of ``feed``, to mount where the host likes (``Mount("/feed", feed.app)``)."""
    return [
        Route("/notifications", _scoped(feed, _page), methods=["GET"]),
        Route("/notifications/unread-count", _scoped(feed, _unread), methods=["GET"]),
        Route(
            "/notifications/{notification_id:int}/read", _scoped(feed, _mark_one), methods=["POST"]
        ),
        Route("/notifications/read-all", _scoped(feed, _mark_all), methods=["POST"]),
        Route(STREAM, StreamEndpoint(feed), methods=["GET"]),
    ]
