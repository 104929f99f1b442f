"""What the portal's JSON answers say of an endpoint and a delivery, and how a refusal of the tenant
API becomes an HTTP answer.

An endpoint's view never carries its tenant (the portal serves one tenant, the one the host's
``tenant_of`` named) nor a secret (those only come back from the reveal and the rotation, once per
request). A delivery's view carries its event's data only through the host's ``show_data``, and
its last attempts (``attempts_log``: time, status code, error, response snippet; the snippet was
cleaned of secrets before it was stored).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Final

from starlette.responses import JSONResponse

from outbox_adapters.postgres.webhooks import DeliveryView
from outbox_adapters.webhook_model import Endpoint
from outbox_adapters.webhook_scope import WebhookRefused
from outbox_core.errors import BlockedDestination, InvalidMessage, StoreUnavailable

__all__ = [
    "NO_STORE",
    "ShowData",
    "answer_of",
    "delivery_view",
    "endpoint_view",
    "error",
    "refusal",
]

#: Every API answer: never kept by a cache (a revealed secret above all).
NO_STORE: Final = {"cache-control": "no-store"}
#: What a missing endpoint or event is refused with; another tenant's is refused the same way.
_MISSING: Final = ("there is no webhook endpoint ", "there is no webhook event ")

#: The host's choice of what a tenant sees of an event's data: ``show_data(event_type, data)`` →
#: a JSON value to show, or ``None`` (nothing). A plain function or a coroutine function.
ShowData = Callable[[str, Any], Any]


def _when(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def endpoint_view(endpoint: Endpoint) -> dict[str, Any]:
    """An endpoint as the page shows it: no tenant, no secret."""
    return {
        "id": endpoint.id,
        "url": endpoint.url,
        "event_types": list(endpoint.event_types),
        "description": endpoint.description,
        "scheme": endpoint.scheme,
        "max_per_second": endpoint.max_per_second,
        "enabled": endpoint.enabled,
        "disabled_reason": endpoint.disabled_reason,
        "disabled_at": _when(endpoint.disabled_at),
        "created_at": _when(endpoint.created_at),
        "updated_at": _when(endpoint.updated_at),
    }


async def delivery_view(delivery: DeliveryView, show_data: ShowData | None) -> dict[str, Any]:
    """A delivery as the page lists it, with its last attempts (oldest first); ``data`` only when
    ``show_data`` answers something."""
    view: dict[str, Any] = {
        "id": delivery.id,
        "event_id": delivery.event_id,
        "msg_id": delivery.msg_id,
        "event_type": delivery.event_type,
        "status": delivery.status.value,
        "attempts": delivery.attempts,
        "last_status": delivery.last_status,
        "response": delivery.response,
        "last_error": delivery.last_error,
        "created_at": _when(delivery.created_at),
        "updated_at": _when(delivery.updated_at),
        "next_attempt_at": _when(delivery.next_attempt_at),
        "attempts_log": [
            {"at": _when(a.at), "status": a.status, "error": a.error, "response": a.response}
            for a in delivery.attempts_log
        ],
    }
    if show_data is not None:
        shown = await answer_of(show_data(delivery.event_type, delivery.data))
        if shown is not None:
            view["data"] = shown
    return view


def error(message: str, status: int, *, field: str | None = None) -> JSONResponse:
    """``{"error": message, "field": field}`` with ``status``, never cached."""
    return JSONResponse({"error": message, "field": field}, status_code=status, headers=NO_STORE)


def refusal(exc: Exception, *, field: str | None = None) -> JSONResponse | None:
    """The answer to what the tenant API raised, or ``None`` for an exception that is not one of
    its refusals (it propagates):

    - a missing endpoint or event, the tenant's own or another's alike: 404, the API's sentence;
    - any other :class:`WebhookRefused` (a replay to a disabled endpoint, ...): 409;
    - :class:`BlockedDestination` (the guard refused the URL): 400 about ``url``;
    - :class:`InvalidMessage`: 400 about ``field`` (the operation's input the rule is about);
    - :class:`StoreUnavailable`: 503.
    """
    if isinstance(exc, WebhookRefused):
        text = str(exc)
        return error(text, 404 if text.startswith(_MISSING) else 409)
    if isinstance(exc, BlockedDestination):
        return error(str(exc), 400, field="url")
    if isinstance(exc, InvalidMessage):
        return error(str(exc), 400, field=field)
    if isinstance(exc, StoreUnavailable):
        return error("the database is unavailable; try again", 503)
    return None


async def answer_of(value: Awaitable[Any] | Any) -> Any:  # noqa: ANN401 - the host's callable's
    """``value``, awaited when the host's callable was a coroutine function."""
    return await value if inspect.isawaitable(value) else value
