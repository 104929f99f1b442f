"""What the webhook host API (:mod:`.tenants`) hands out and takes: the values of its answers, the
``UNCHANGED`` marker of ``update_endpoint``, and the id rule."""

from __future__ import annotations

from datetime import datetime
from typing import Final

import attrs

from outbox_adapters.webhook_model import Endpoint, status_code
from outbox_core.attempt_log import logged
from outbox_core.delivery import Status
from outbox_core.errors import InvalidMessage
from outbox_core.messages import JSONObject

__all__ = [
    "UNCHANGED",
    "AttemptView",
    "CreatedEndpoint",
    "DeliveryView",
    "TestEvent",
    "Unchanged",
    "attempt_views",
    "check_id",
]


@attrs.frozen
class Unchanged:
    """The value of an ``update_endpoint`` argument that is not being changed."""

    def __repr__(self) -> str:
        return "UNCHANGED"


#: ``update_endpoint(..., description=UNCHANGED)``: leave it as it is (``None`` clears it).
UNCHANGED: Final = Unchanged()


@attrs.frozen
class CreatedEndpoint:
    """A new endpoint and what its receiver verifies with, shown this once: the ``whsec_``
    secret (``v1``) or the ``whpk_`` public key (``v1a``; the private key is never shown)."""

    endpoint: Endpoint
    verify_with: str = attrs.field(repr=False)


@attrs.frozen
class AttemptView:
    """One attempt of a delivery, from its attempt log (:mod:`outbox_core.attempt_log`)."""

    #: When the attempt started (the sender's clock).
    at: datetime
    #: The receiver's HTTP status code (``None``: no answer).
    status: int | None
    #: Why it failed, bounded (``None``: delivered).
    error: str | None
    #: The response snippet, bounded and cleaned of secrets before it was stored.
    response: str | None


def attempt_views(stored: object) -> tuple[AttemptView, ...]:
    """The attempts of a stored attempt log, oldest first: none for a delivery written before the
    log existed or a log that is not a list of objects; an entry without a readable time is left
    out."""
    views = []
    for entry in logged(stored):
        try:
            at = datetime.fromisoformat(entry["at"])
        except (KeyError, TypeError, ValueError):
            continue
        error, response = entry.get("error"), entry.get("response")
        views.append(
            AttemptView(
                at=at,
                status=status_code(entry.get("status")),
                error=error if isinstance(error, str) else None,
                response=response if isinstance(response, str) else None,
            )
        )
    return tuple(views)


@attrs.frozen
class DeliveryView:
    """One delivery as its tenant sees it."""

    id: int
    event_id: int
    msg_id: str
    event_type: str
    status: Status
    attempts: int
    #: The last attempt's HTTP status code (``None``: none, or no answer).
    last_status: int | None
    #: The stored snippet of the last response (bounded and cleaned by the mark).
    response: str | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    #: When the next attempt is due while pending; ``None`` once terminal.
    next_attempt_at: datetime | None
    #: The event's data (the host decides whether its customer sees it).
    data: JSONObject = attrs.field(repr=False)
    #: Its last attempts (at most ``ATTEMPT_LOG_SIZE``, 10), oldest first; an attempt whose mark
    #: was refused (stale) is not among them, nor a deferral that sent nothing.
    attempts_log: tuple[AttemptView, ...] = ()


@attrs.frozen
class TestEvent:
    """A test event and its one delivery, due now for the delivery lane."""

    event_id: int
    msg_id: str
    delivery_id: int


def check_id(value: object, what: str = "endpoint") -> int:
    """A row id given by a caller (a JSON body, a URL): a positive integer, else
    :class:`InvalidMessage` naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidMessage(f"a webhook {what} id is a positive integer, got {value!r:.40}")
    return value
