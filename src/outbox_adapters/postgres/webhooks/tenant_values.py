"""What the webhook host API (:mod:`.tenants`) hands out and takes: the values of its answers, the
``UNCHANGED`` marker of ``update_endpoint``, and the id rule."""

from __future__ import annotations

from datetime import datetime
from typing import Final

import attrs

from outbox_adapters.webhook_model import Endpoint
from outbox_core.delivery import Status
from outbox_core.errors import InvalidMessage
from outbox_core.messages import JSONObject

__all__ = ["UNCHANGED", "CreatedEndpoint", "DeliveryView", "TestEvent", "Unchanged", "check_id"]


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
