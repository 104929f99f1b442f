"""What the portal reads from a request: the JSON body (bounded), the fields of each operation's
body and the query of the deliveries list, each refusal a :class:`BadRequest` naming the field.

The portal's own checks are of shape (a string where a string belongs, a list of strings, a
positive id); what a value may be (a URL the guard lets through, an event type's characters) is
the tenant API's rule, answered by :class:`~outbox_core.errors.InvalidMessage` and reported by the
app with the field it was about.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Final

import attrs
from starlette.requests import Request

from outbox_adapters.webhook_model import check_description, check_endpoint_url
from outbox_adapters.webhook_scope import check_event_types
from outbox_core.delivery import Status
from outbox_core.errors import InvalidMessage

__all__ = [
    "MAX_BODY",
    "UNSET",
    "BadRequest",
    "DeliveryQuery",
    "Registration",
    "Update",
    "delivery_query",
    "disable_reason",
    "json_body",
    "overlap_of",
    "path_id",
    "registration",
    "replay_event",
    "update",
]

#: The largest body read: a registration with a long URL and many event types fits many times.
MAX_BODY: Final = 64 * 1024
#: The largest id a path or body may name (PostgreSQL's bigint).
MAX_ID: Final = 2**63 - 1
#: The most deliveries one page of the list shows.
MAX_LIMIT: Final = 200
#: The longest overlap a rotation may ask for, in hours (a week).
MAX_OVERLAP_HOURS: Final = 24 * 7
_SCHEMES: Final = ("v1", "v1a")


class BadRequest(Exception):
    """A request the portal refuses before the tenant API sees it: the HTTP status, the message
    (which names the field), and the field (``None``: the body as a whole)."""

    def __init__(self, message: str, *, field: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.status = status


@attrs.frozen
class Registration:
    url: str
    event_types: tuple[str, ...]
    description: str | None
    scheme: str


#: A field the update leaves as it is.
UNSET: Final = object()


@attrs.frozen
class Update:
    """The fields an update names (the others are :data:`UNSET`)."""

    url: Any = UNSET
    event_types: Any = UNSET
    description: Any = UNSET


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object (an empty body is ``{}``), at most :data:`MAX_BODY` bytes."""
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise BadRequest(f"the body must be at most {MAX_BODY} bytes", status=413)
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than json can read
        raise BadRequest("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _ruled(field: str, rule: Any, value: Any) -> Any:  # noqa: ANN401 - the rule's value
    """``rule(value)``, its :class:`InvalidMessage` a :class:`BadRequest` about ``field``."""
    try:
        return rule(value)
    except InvalidMessage as exc:
        raise BadRequest(f"{field}: {exc}", field=field) from None


def _text(body: Mapping[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{field} must be a non-empty string", field=field)
    return value.strip()


def _description(body: Mapping[str, Any]) -> str | None:
    """An optional description: a string (blank: none) or null."""
    value = body.get("description")
    if value is not None and not isinstance(value, str):
        raise BadRequest("description must be a string or null", field="description")
    described: str | None = _ruled("description", check_description, (value or "").strip() or None)
    return described


def _event_types(body: Mapping[str, Any]) -> tuple[str, ...]:
    value = body.get("event_types")
    if isinstance(value, str):  # "invoice.paid, invoice.*" as typed in a form
        value = [part for part in value.replace(",", " ").split() if part]
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(item, str) and item for item in value)
    ):
        raise BadRequest(
            'event_types must be a list of event types (e.g. ["invoice.paid", "invoice.*"])',
            field="event_types",
        )
    checked: tuple[str, ...] = _ruled("event_types", check_event_types, value)
    return checked


def _unknown(body: Mapping[str, Any], known: frozenset[str]) -> None:
    extra = sorted(set(body) - known)
    if extra:
        raise BadRequest(
            f"unknown field {extra[0]!r:.60}; the fields are {', '.join(sorted(known))}",
            field=str(extra[0])[:60],
        )


def registration(body: Mapping[str, Any]) -> Registration:
    """A new endpoint's fields: ``url``, ``event_types``, ``description`` (optional), ``scheme``
    (``v1`` unless named)."""
    _unknown(body, frozenset({"url", "event_types", "description", "scheme"}))
    url = _ruled("url", check_endpoint_url, _text(body, "url"))
    scheme = body.get("scheme", "v1")
    if scheme not in _SCHEMES:
        raise BadRequest('scheme must be "v1" (HMAC) or "v1a" (Ed25519)', field="scheme")
    return Registration(
        url=url,
        event_types=_event_types(body),
        description=_description(body),
        scheme=scheme,
    )


def update(body: Mapping[str, Any]) -> Update:
    """The fields an update changes: any of ``url``, ``event_types``, ``description`` (null or
    empty clears it), at least one."""
    _unknown(body, frozenset({"url", "event_types", "description"}))
    if not body:
        raise BadRequest("name at least one of url, event_types, description")
    return Update(
        url=_ruled("url", check_endpoint_url, _text(body, "url")) if "url" in body else UNSET,
        event_types=_event_types(body) if "event_types" in body else UNSET,
        description=_description(body) if "description" in body else UNSET,
    )


def disable_reason(body: Mapping[str, Any]) -> str:
    _unknown(body, frozenset({"reason"}))
    return _text(body, "reason")


def overlap_of(body: Mapping[str, Any]) -> timedelta | None:
    """A rotation's ``overlap_hours`` (how long the old secret keeps signing), or ``None``: the
    tenant API's default."""
    _unknown(body, frozenset({"overlap_hours"}))
    hours = body.get("overlap_hours")
    if hours is None:
        return None
    if (
        isinstance(hours, bool)
        or not isinstance(hours, int | float)
        or not 0 <= hours <= MAX_OVERLAP_HOURS
    ):
        raise BadRequest(
            f"overlap_hours must be a number from 0 to {MAX_OVERLAP_HOURS}", field="overlap_hours"
        )
    return timedelta(hours=hours)


def _positive_id(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_ID:
        raise BadRequest(f"{field} must be a positive id", field=field)
    return value


def replay_event(body: Mapping[str, Any]) -> int:
    """The ``event_id`` a replay to one endpoint sends again."""
    _unknown(body, frozenset({"event_id"}))
    return _positive_id(body.get("event_id"), "event_id")


def path_id(text: str) -> int | None:
    """An endpoint id from the path, or ``None`` when it can't be one (answered as a missing
    endpoint: a 404 like any other)."""
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        return None
    value = int(text)
    return value if 0 < value <= MAX_ID else None


@attrs.frozen
class DeliveryQuery:
    status: Status | None
    limit: int
    before_id: int | None


def delivery_query(params: Mapping[str, str]) -> DeliveryQuery:
    """``?status=failed&limit=50&before_id=123`` of the deliveries list."""
    status: Status | None = None
    if params.get("status"):
        try:
            status = Status(params["status"])
        except ValueError:
            names = ", ".join(s.value for s in Status)
            raise BadRequest(f"status must be one of {names}", field="status") from None
    limit = 50
    if params.get("limit"):
        text = params["limit"]
        if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
            raise BadRequest(f"limit must be 1 to {MAX_LIMIT}", field="limit")
        limit = int(text)
    before_id = None
    if params.get("before_id"):
        before_id = path_id(params["before_id"])
        if before_id is None:
            raise BadRequest("before_id must be a positive id", field="before_id")
    return DeliveryQuery(status=status, limit=limit, before_id=before_id)
