"""The webhook model's values and rules, shared by every webhook repository (PostgreSQL's
:class:`~outbox_adapters.postgres.webhooks.WebhookRepository` and the in-memory
:class:`~outbox_adapters.memory.MemoryWebhookRepository`): what a repository hands out, what a
producer may write, what an endpoint may be. It imports the standard library, attrs and the core
only, so neither repository's technology leaks into the other (``outbox_adapters.memory`` stays
free of psycopg and SQLAlchemy).

- :func:`webhook_message` is the one check of what ``enqueue_webhook`` writes (an event type that is
  a sane name, data that is a JSON object, the tenant it belongs to, an optional ordering key that
  is short text: :func:`check_ordering_key`), so a bad event fails at enqueue, in the host's code;
  :func:`tenant_of` and :func:`ordering_key_of` read them back at fan-out. Who receives an event
  (tenants, subscriptions, replay targets) is :mod:`outbox_adapters.webhook_scope`, whose names
  this module re-exports.
- :func:`event_body` is the one encoding of the bytes every delivery of an event POSTs (canonical
  JSON: sorted keys, no spaces), so a retry signs and sends the same body.
- The endpoint side's input rules (URL, owner, description, rate cap, reason, overlap, window) are
  :mod:`outbox_adapters.webhook_endpoint_rules`, re-exported here; :func:`health_reason` and :func:`notice_key` are what the health
  sweep writes.
- :func:`new_msg_id` makes the event's stable ``webhook-id``: ``msg_`` + 32 hex digits drawn with
  :mod:`secrets` here, in the adapter (the core never draws randomness).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import attrs

from outbox_adapters.webhook_endpoint_rules import (
    check_description,
    check_endpoint_url,
    check_max_per_second,
    check_overlap,
    check_owner,
    check_reason,
    check_window,
)
from outbox_adapters.webhook_scope import (
    ANY_EVENT_TYPE,
    WebhookRefused,
    check_event_type,
    check_event_types,
    check_replay_target,
    check_tenant,
    receives,
    refused_disabled,
    refused_no_endpoint,
    refused_no_event,
    refused_unsubscribed,
)
from outbox_core.delivery import Status
from outbox_core.errors import InvalidMessage
from outbox_core.messages import ClaimedRow, JSONObject, NewMessage
from outbox_core.signing_keys import Signer

__all__ = [
    "ANY_EVENT_TYPE",
    "DEFAULT_HEALTH_WINDOW",
    "DEFAULT_SECRET_OVERLAP",
    "DELIVERY_LANE",
    "WEBHOOK_LANE",
    "DeliveryGroup",
    "DeliveryReport",
    "DeliveryTarget",
    "Endpoint",
    "EndpointHealth",
    "FanOut",
    "Missed",
    "Notice",
    "Replay",
    "WebhookRefused",
    "check_description",
    "check_endpoint_url",
    "check_event_type",
    "check_event_types",
    "check_max_per_second",
    "check_ordering_key",
    "check_overlap",
    "check_owner",
    "check_reason",
    "check_replay_target",
    "check_tenant",
    "check_window",
    "event_body",
    "event_of",
    "health_reason",
    "new_msg_id",
    "notice_key",
    "ordering_key_of",
    "owner_message",
    "receives",
    "refused_disabled",
    "refused_no_endpoint",
    "refused_no_event",
    "refused_unsubscribed",
    "status_code",
    "tenant_of",
    "webhook_message",
]

#: The lane of the webhook outbox's rows (and the drainer's leader-lease key).
WEBHOOK_LANE: Final = "webhooks"
#: The lane of the delivery rows (and the retry worker's leader-lease key).
DELIVERY_LANE: Final = "webhook_deliveries"
#: Endpoint health (ADR 0018): failing with no success for this long disables an endpoint.
DEFAULT_HEALTH_WINDOW: Final = timedelta(days=5)
#: How long a rotated-out secret keeps signing beside the new one.
DEFAULT_SECRET_OVERLAP: Final = timedelta(hours=24)

#: An ordering key: 1 to 200 characters (an id or two), no C0/C1 control character.
_ORDERING_KEY: Final = re.compile(r"[^\x00-\x1f\x7f-\x9f]{1,200}")


def check_ordering_key(value: object) -> str | None:
    """``value`` if it is ``None`` or an ordering key (1 to 200 characters, none of them a control
    character), else :class:`InvalidMessage` naming the rule."""
    if value is None or (isinstance(value, str) and _ORDERING_KEY.fullmatch(value)):
        return value
    raise InvalidMessage(
        "a webhook ordering key is None or 1 to 200 characters of text without control"
        f" characters, got {value!r:.80}"
    )


def webhook_message(
    event_type: str,
    data: Mapping[str, Any],
    *,
    tenant: str,
    idempotency_key: str | None = None,
    ordering_key: str | None = None,
) -> NewMessage:
    """The webhook outbox row for one event of ``tenant`` (lane ``webhooks``): the payload carries
    the tenant (``"tenant"``) and, when given, the ordering key (``"ordering_key"``) for the
    fan-out to copy onto the event and its deliveries."""
    check_event_type(event_type)
    check_tenant(tenant)
    if not isinstance(data, Mapping):
        raise InvalidMessage(
            f"webhook data must be a JSON object (a mapping), got {type(data).__name__}"
        )
    payload: dict[str, Any] = {"event_type": event_type, "data": dict(data), "tenant": tenant}
    if check_ordering_key(ordering_key) is not None:
        payload["ordering_key"] = ordering_key
    return NewMessage(WEBHOOK_LANE, payload, idempotency_key=idempotency_key)


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


def ordering_key_of(row: ClaimedRow) -> str | None:
    """The ordering key a webhook outbox row carries (``None``: none), or :class:`InvalidMessage`
    for one that :func:`check_ordering_key` refuses (a row written around ``enqueue_webhook``)."""
    key = row.payload.get("ordering_key") if isinstance(row.payload, Mapping) else None
    try:
        return check_ordering_key(key)
    except InvalidMessage as exc:
        raise InvalidMessage(f"webhook outbox row {row.id}: {exc}") from None


def tenant_of(row: ClaimedRow) -> str:
    """The tenant a webhook outbox row carries, or :class:`InvalidMessage` for a row without one
    (written around ``enqueue_webhook``): such an event has no endpoint to go to."""
    tenant = row.payload.get("tenant") if isinstance(row.payload, Mapping) else None
    try:
        return check_tenant(tenant)
    except InvalidMessage as exc:
        raise InvalidMessage(f"webhook outbox row {row.id}: {exc}") from None


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


def health_reason(window: timedelta) -> str:
    """The disabled reason the health sweep writes."""
    if window.total_seconds() % 86400 == 0:
        days = int(window.total_seconds() // 86400)
        span = f"{days} day" + ("" if days == 1 else "s")
    else:
        span = str(window)
    return f"failing without a successful delivery for {span}"


def notice_key(endpoint: Endpoint) -> str:
    """The idempotency key of the owner's notice of one disable: one disable tells once."""
    return f"webhook-endpoint-{endpoint.id}-disabled-{endpoint.disabled_at:%Y%m%dT%H%M%S.%f%z}"


#: What a host gives to tell a disabled endpoint's owner: the e-mail to enqueue, or ``None``.
Notice = Callable[["Endpoint"], NewMessage | None]


def owner_message(endpoint: Endpoint, notice: Notice | None) -> NewMessage | None:
    """The message ``notice`` builds for a just-disabled ``endpoint``, keyed
    :func:`notice_key` unless it has a key of its own (so one disable tells once); ``None`` when
    there is no notice or it has nothing to send."""
    message = None if notice is None else notice(endpoint)
    if message is None:
        return None
    if message.idempotency_key is None:
        message = attrs.evolve(message, idempotency_key=notice_key(endpoint))
    return message


def status_code(text: object) -> int | None:
    """The last attempt's status code as the report shows it (``None``: none, or not a number)."""
    try:
        return None if text is None else int(str(text))
    except ValueError:
        return None


@attrs.frozen
class Endpoint:
    """A registered receiver. Its secrets are never part of it (nor of its repr)."""

    id: int
    #: The tenant (the host's customer) it belongs to: it receives that tenant's events only.
    tenant: str
    url: str
    event_types: tuple[str, ...]
    enabled: bool
    owner_email: str | None
    disabled_reason: str | None
    disabled_at: datetime | None
    created_at: datetime
    updated_at: datetime
    #: The signature scheme (ADR 0017): ``v1`` (HMAC-SHA256, ``whsec_``) or ``v1a`` (Ed25519).
    scheme: str = "v1"
    #: Deliveries a second this endpoint takes at most, across the process (ADR 0018); ``None``:
    #: no cap.
    max_per_second: int | None = None
    #: What the host or its customer calls it; ``None``: nothing.
    description: str | None = None

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
    #: Every unexpired secret (or Ed25519 key) of the endpoint, newest first (all of them sign).
    secrets: tuple[Signer, ...]
    msg_id: str
    event_type: str
    #: The exact JSON bytes to POST (:func:`event_body`).
    body: bytes
    #: The endpoint's rate cap (deliveries a second, ADR 0018); ``None``: no cap.
    max_per_second: int | None = None
    #: The delivery's attempt log as stored (payload ``attempt_log``; ``None``: none yet), which
    #: this attempt's entry extends (:func:`outbox_core.attempt_log.appended`).
    attempt_log: object = attrs.field(default=None, repr=False, eq=False)


@attrs.frozen
class EndpointHealth:
    """How an endpoint is doing (``endpoint_health``), from its resolved deliveries."""

    endpoint_id: int
    enabled: bool
    disabled_reason: str | None
    disabled_at: datetime | None
    #: When its last delivery succeeded (resolved ``dispatched``); ``None``: never.
    last_success_at: datetime | None
    #: When its last delivery failed (resolved ``failed``); ``None``: never.
    last_failure_at: datetime | None
    #: Its failed deliveries resolved after the last success (all of them if none succeeded),
    #: by resolution time: the current failure streak (0 when the last one succeeded).
    failure_streak: int


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
