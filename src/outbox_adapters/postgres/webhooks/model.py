"""The webhook model's values and rules: what the repository hands out, what a producer may write.

- :func:`webhook_message` is the one check of what ``enqueue_webhook`` writes (an event type that is
  a sane name, data that is a JSON object), so a bad event fails at enqueue, in the host's code.
- :func:`event_body` is the one encoding of the bytes every delivery of an event POSTs (canonical
  JSON: sorted keys, no spaces), so a retry signs and sends the same body.
- :func:`new_msg_id` makes the event's stable ``webhook-id``: ``msg_`` + 32 hex digits drawn with
  :mod:`secrets` here, in the adapter (the core never draws randomness).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import attrs

from outbox_adapters.postgres.webhooks.tables import WEBHOOK_LANE
from outbox_core.delivery import Status
from outbox_core.errors import InvalidMessage, OutboxError
from outbox_core.messages import ClaimedRow, JSONObject, NewMessage
from outbox_core.signing import WebhookSecret

__all__ = [
    "ANY_EVENT_TYPE",
    "DeliveryGroup",
    "DeliveryReport",
    "DeliveryTarget",
    "Endpoint",
    "FanOut",
    "Missed",
    "Replay",
    "WebhookRefused",
    "check_event_type",
    "check_event_types",
    "event_body",
    "event_of",
    "new_msg_id",
    "webhook_message",
]

#: An endpoint subscribed to this receives every event type.
ANY_EVENT_TYPE: Final = "*"
#: ``invoice.paid``, ``user:created``, ``Order_Shipped.v2``: a letter or digit, then up to 127 of
#: ``[A-Za-z0-9._:-]``. No spaces, quotes or control characters reach a header, a log or a query.
_EVENT_TYPE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


class WebhookRefused(OutboxError):
    """An operation on the webhook model the state refuses (no such endpoint or event, a replay to
    a disabled endpoint, ...). The message says which and why."""


def check_event_type(value: object) -> str:
    """``value`` if it is a sane event type name, else :class:`InvalidMessage` naming the rule."""
    if not isinstance(value, str) or _EVENT_TYPE.fullmatch(value) is None:
        raise InvalidMessage(
            "a webhook event type is 1 to 128 characters of [A-Za-z0-9._:-] starting with a"
            f" letter or digit, got {value!r:.80}"
        )
    return value


def check_event_types(values: Sequence[str]) -> tuple[str, ...]:
    """An endpoint's subscription: one or more event types (or ``*``), duplicates dropped."""
    if isinstance(values, str) or not values:
        raise InvalidMessage("an endpoint subscribes to at least one event type (or '*')")
    return tuple(dict.fromkeys(v if v == ANY_EVENT_TYPE else check_event_type(v) for v in values))


def webhook_message(
    event_type: str, data: Mapping[str, Any], *, idempotency_key: str | None = None
) -> NewMessage:
    """The webhook outbox row for one event (lane ``webhooks``)."""
    check_event_type(event_type)
    if not isinstance(data, Mapping):
        raise InvalidMessage(
            f"webhook data must be a JSON object (a mapping), got {type(data).__name__}"
        )
    return NewMessage(
        WEBHOOK_LANE,
        {"event_type": event_type, "data": dict(data)},
        idempotency_key=idempotency_key,
    )


def event_of(row: ClaimedRow) -> tuple[str, JSONObject]:
    """The event type and data of a webhook outbox row, or :class:`InvalidMessage` saying why the
    row can't be fanned out (a row written around ``enqueue_webhook``)."""
    payload = row.payload
    if not isinstance(payload, Mapping):
        raise InvalidMessage(f"webhook outbox row {row.id}: the payload is not a JSON object")
    data = payload.get("data")
    if not isinstance(data, Mapping):
        raise InvalidMessage(f"webhook outbox row {row.id}: 'data' is not a JSON object")
    return check_event_type(payload.get("event_type")), data


def new_msg_id() -> str:
    """A fresh ``msg_`` + 32 hex digits (128 random bits)."""
    return "msg_" + secrets.token_hex(16)


def event_body(event_type: str, created_at: datetime, data: JSONObject) -> bytes:
    """The exact bytes every delivery of the event POSTs:
    ``{"data": ..., "timestamp": "<ISO 8601 UTC>", "type": ...}``, canonical JSON."""
    stamp = created_at.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    document = {"type": event_type, "timestamp": stamp, "data": data}
    return json.dumps(
        document, ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
    ).encode("utf-8")


@attrs.frozen
class Endpoint:
    """A registered receiver. Its secrets are never part of it (nor of its repr)."""

    id: int
    url: str
    event_types: tuple[str, ...]
    enabled: bool
    owner_email: str | None
    disabled_reason: str | None
    disabled_at: datetime | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Endpoint:
        return cls(**{**record, "event_types": tuple(record["event_types"])})


@attrs.frozen
class FanOut:
    """What one drained webhook outbox row became."""

    #: False: the outbox row's fence refused (another claim owns it, or it is resolved), and
    #: nothing was written.
    marked: bool
    event_id: int | None = None
    msg_id: str | None = None
    #: Born leased: ``attempts == 1``, the birth token, ``lease_expires_at = now + birth lease``.
    deliveries: tuple[ClaimedRow, ...] = ()


@attrs.frozen
class DeliveryTarget:
    """Everything one attempt of a delivery needs, read in one query."""

    delivery_id: int
    event_id: int
    endpoint_id: int
    url: str
    enabled: bool
    #: Every unexpired secret of the endpoint, newest first (all of them sign).
    secrets: tuple[WebhookSecret, ...]
    msg_id: str
    event_type: str
    #: The exact JSON bytes to POST (:func:`event_body`).
    body: bytes


@attrs.frozen
class Missed:
    """What an endpoint missed while it was disabled (``enable_endpoint``'s answer): the events
    of its types created since it was disabled, which have no delivery to it."""

    endpoint: Endpoint
    disabled_since: datetime | None
    event_ids: tuple[int, ...]


@attrs.frozen
class Replay:
    """One replay: the clone event and the born-leased deliveries made for it."""

    event_id: int
    replay_of: int
    msg_id: str
    #: ``None``: every enabled endpoint subscribed to the event's type.
    endpoint_id: int | None
    #: Every delivery this replay made.
    delivery_ids: tuple[int, ...]
    #: Those born leased to this process for their first attempt (none from the CLI).
    deliveries: tuple[ClaimedRow, ...]
    #: True when this completed a clone an interrupted replay had left open.
    resumed: bool


@attrs.frozen
class DeliveryGroup:
    """Deliveries sharing a status and an error (``outbox deliveries``)."""

    status: Status
    error: str | None
    deliveries: int
    first_at: datetime
    last_at: datetime
    #: From the most recent delivery of the group: the payload keys the fenced marks patch in.
    last_status: int | None
    response: str | None
    endpoint_ids: tuple[int, ...]


@attrs.frozen
class DeliveryReport:
    groups: tuple[DeliveryGroup, ...]
    #: Deliveries per status, over the same filters.
    by_status: Mapping[Status, int]
