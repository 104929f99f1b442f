"""Dead letters in the browser: the failed rows of every outbox, and an audited requeue, as an ASGI
app a host mounts behind its own authentication (ADR 0026).

::

    letters = DeadLetters(pool, authorize)     # authorize(request) -> operator name | None
    app = Starlette(routes=[Mount("/ops/dead-letters", letters.app)])

There is no default authorization: ``authorize`` is required, and it answers who is asking (the
name goes into the requeue audit) or ``None`` (401). Nothing here is open by default.

=====================================  ============================================================
``GET  /``                             the page: per outbox, the failed rows by error class and the
                                       newest rows, each with a requeue button
``GET  /api/failed?queue=Q``           ``{"groups": [...], "rows": [...]}`` (no payload values);
                                       ``queue=parked``: the events the consumer channels parked
                                       (read-only: they are redriven through the broker)
``POST /api/requeue``                  JSON ``{"queue": Q, "ids": [...], "reason": "..."}`` →
                                       ``{"requeued": [...], "refused": {id: why}}``; audited with
                                       the operator's name and the reason
=====================================  ============================================================

The requeue takes JSON only: a cross-site form can't send ``application/json`` without a CORS
preflight the app never answers, so a page elsewhere can't requeue on an operator's behalf. On top
of that the app is a :class:`~outbox_adapters.browser.BrowserGuard`: a state-changing request whose
``Sec-Fetch-Site`` or ``Origin`` says it comes from another origin is a 403, and every response
forbids framing (``frame-ancestors 'none'``, ``X-Frame-Options: DENY``) and sniffing. A bad body is
a 400 whose ``error`` names the field.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Final

from psycopg_pool import AsyncConnectionPool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route, Router

from outbox_adapters.browser import BrowserGuard
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.postgres.parked import REDRIVE_HINT, parked_report
from outbox_adapters.postgres.queues import QUEUES
from outbox_core.errors import StoreUnavailable
from outbox_core.operator import ErrorGroup, ParkedEvent, StoredRow
from outbox_core.ports import RequeueRequest
from outbox_core.top import error_class, error_classes

__all__ = ["Authorize", "DeadLetters"]

#: The host's authorization: the request in, the operator's name out (``None``: 401).
Authorize = Callable[[Request], Awaitable[str | None] | str | None]

_PAGE: Final = (Path(__file__).parent / "page.html").read_text(encoding="utf-8")
_SCRIPT: Final = (Path(__file__).parent / "page.js").read_text(encoding="utf-8")
_MAX_IDS: Final = 1000
#: The largest requeue body read (1,000 ids and a reason fit many times over).
_MAX_BODY: Final = 64 * 1024
#: The page's own policy: its script and styles only, no form posts, never framed.
_PAGE_POLICY: Final = (
    "default-src 'self'; style-src 'self' 'unsafe-inline'; base-uri 'none'; form-action 'none';"
    " frame-ancestors 'none'"
)
_SHAPE: Final = '{"queue": ..., "ids": [...], "reason": ...}'


def _when(moment: Any) -> str | None:  # noqa: ANN401 - a datetime or None
    return None if moment is None else moment.isoformat()


def _group(group: ErrorGroup) -> dict[str, Any]:
    return {
        "error_class": group.error,
        "rows": group.rows,
        "first_failed_at": _when(group.first_failed_at),
        "last_failed_at": _when(group.last_failed_at),
    }


def _row(row: StoredRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "lane": row.lane,
        "attempts": row.attempts,
        "failed_at": _when(row.resolved_at),
        "error_class": error_class(row.last_error),
        "requeueable": row.scrubbed_at is None,
    }


def _parked(event: ParkedEvent) -> dict[str, Any]:
    return {
        "id": event.event_id,
        "lane": f"{event.channel} / {event.kind}",
        "attempts": event.attempts,
        "failed_at": _when(event.parked_at),
        "error_class": error_class(event.reason),
        "requeueable": False,
        "note": REDRIVE_HINT,
    }


def _bad(message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=400)


def _requeue_fields(body: object) -> tuple[str, list[int], str | None] | str:
    """The queue, the ids and the reason of a requeue body, or the 400 message naming the field
    that is wrong."""
    if not isinstance(body, dict):
        return f"the body must be a JSON object {_SHAPE}"
    queue, ids, reason = body.get("queue"), body.get("ids"), body.get("reason")
    if queue == "parked":
        return REDRIVE_HINT
    if not isinstance(queue, str) or queue not in QUEUES:
        return f"queue must be one of {', '.join(QUEUES)}"
    if (
        not isinstance(ids, list)
        or not ids
        or len(ids) > _MAX_IDS
        or not all(isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in ids)
    ):
        return f"ids must be a list of 1 to {_MAX_IDS} positive row ids"
    if reason is not None and not isinstance(reason, str):
        return "reason must be a string or null"
    return queue, ids, reason or None


class DeadLetters:
    """The dead-letter console over ``pool`` (autocommit connections), behind ``authorize``.

    ``allowed_origins``: other origins whose requeues are accepted (the public one, when a proxy in
    front changes the scheme or host the app sees); see :class:`~outbox_adapters.browser.BrowserGuard`.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        authorize: Authorize,
        *,
        allowed_origins: Iterable[str] = (),
    ) -> None:
        if not callable(authorize):
            raise TypeError("DeadLetters needs an authorize(request) -> operator name | None")
        self._pool = pool
        self._authorize = authorize
        router = Router(
            routes=[
                Route("/", self._page, methods=["GET"]),
                Route("/page.js", self._script, methods=["GET"]),
                Route("/api/failed", self._failed, methods=["GET"]),
                Route("/api/requeue", self._requeue, methods=["POST"]),
            ]
        )
        #: The ASGI app to mount: the routes behind the cross-site rule and security headers.
        self.app = BrowserGuard(router, allowed_origins=allowed_origins)

    async def _operator(self, request: Request) -> str | None:
        answer = self._authorize(request)
        name = await answer if inspect.isawaitable(answer) else answer
        return name if isinstance(name, str) and name else None

    async def _page(self, request: Request) -> Response:
        if await self._operator(request) is None:
            return HTMLResponse("<h1>401: not authorized</h1>", status_code=401)
        return HTMLResponse(_PAGE, headers={"content-security-policy": _PAGE_POLICY})

    async def _script(self, request: Request) -> Response:
        if await self._operator(request) is None:
            return Response("", status_code=401)
        return Response(_SCRIPT, media_type="text/javascript")

    async def _failed(self, request: Request) -> Response:
        if await self._operator(request) is None:
            return JSONResponse({"error": "not authorized"}, status_code=401)
        queue = request.query_params.get("queue", "messages")
        if queue == "parked":
            return await self._parked_events()
        if queue not in QUEUES:
            return JSONResponse(
                {"error": f"queue must be one of {', '.join(QUEUES)}"}, status_code=400
            )
        store = PostgresStore(self._pool, table=QUEUES[queue])
        try:
            report = await store.list_failed(limit=100)
        except StoreUnavailable:
            return JSONResponse({"error": "the database is unavailable"}, status_code=503)
        finally:
            await store.close()
        return JSONResponse(
            {
                "groups": [_group(g) for g in error_classes(report.by_error)],
                "rows": [_row(r) for r in report.rows],
            }
        )

    async def _parked_events(self) -> Response:
        try:
            parked = await parked_report(self._pool, limit=100)
        except StoreUnavailable:
            return JSONResponse({"error": "the database is unavailable"}, status_code=503)
        return JSONResponse(
            {
                "groups": [_group(g) for g in error_classes(parked.by_error)],
                "rows": [_parked(e) for e in parked.rows],
            }
        )

    async def _requeue(self, request: Request) -> Response:  # noqa: PLR0911 - one per refusal
        operator = await self._operator(request)
        if operator is None:
            return JSONResponse({"error": "not authorized"}, status_code=401)
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return JSONResponse({"error": "send JSON (application/json)"}, status_code=415)
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > _MAX_BODY:
                return JSONResponse(
                    {"error": f"the body must be at most {_MAX_BODY} bytes"}, status_code=413
                )
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than json can read
            return _bad(f"the body must be JSON: {_SHAPE}")
        fields = _requeue_fields(body)
        if isinstance(fields, str):
            return _bad(fields)
        queue, ids, reason = fields
        try:
            request_ = RequeueRequest(actor=operator, row_ids=tuple(ids), reason=reason)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        store = PostgresStore(self._pool, table=QUEUES[queue])
        try:
            result = await store.requeue_failed(request_)
        except StoreUnavailable:
            return JSONResponse({"error": "the database is unavailable"}, status_code=503)
        finally:
            await store.close()
        return JSONResponse(
            {
                "requeued": list(result.requeued),
                "refused": {str(k): v for k, v in result.refused.items()},
            }
        )
