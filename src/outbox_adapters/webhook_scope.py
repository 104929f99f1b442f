"""Who receives a webhook event: the tenant that owns it, and the subscriptions that take its type.

Shared by every webhook repository (PostgreSQL's and the in-memory one) and by ``enqueue_webhook``,
so the rules are one: standard library and the core only.

- A **tenant** is the host's opaque id of the customer (account, workspace, organisation) an
  endpoint belongs to and an event is about: 1 to 200 characters of text without a control
  character (:func:`check_tenant`). Every endpoint has one, every event has one, and an event fans
  out only to its own tenant's endpoints (ADR 0017, docs/guides/webhooks.md "Tenants").
- A replay goes to endpoints of its event's tenant only (:func:`check_replay_target`); the
  ``refused_*`` functions are the replay's refusals, one sentence each.
- A **subscription** is an exact event type (``invoice.paid``), ``*`` (every type), or a prefix
  wildcard ``invoice.*`` that takes every type under ``invoice.`` (``invoice.paid``,
  ``invoice.line.added``) and not ``invoice`` itself (:func:`check_event_types`,
  :func:`receives`). The SQL twin of :func:`receives` is
  :func:`outbox_adapters.postgres.webhooks.statements.subscribed`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final, Protocol

from outbox_core.errors import InvalidMessage, OutboxError


class Receiver(Protocol):
    """What the replay's check reads of an endpoint (:class:`~outbox_adapters.webhook_model.Endpoint`
    has it)."""

    @property
    def id(self) -> int: ...
    @property
    def tenant(self) -> str: ...
    @property
    def enabled(self) -> bool: ...
    @property
    def event_types(self) -> tuple[str, ...]: ...
    @property
    def disabled_reason(self) -> str | None: ...


__all__ = [
    "ANY_EVENT_TYPE",
    "MAX_TENANT",
    "WILDCARD_SUFFIX",
    "Receiver",
    "WebhookRefused",
    "check_event_type",
    "check_event_types",
    "check_replay_target",
    "check_tenant",
    "receives",
    "refused_disabled",
    "refused_no_endpoint",
    "refused_no_event",
    "refused_unsubscribed",
]

#: An endpoint subscribed to this receives every event type.
ANY_EVENT_TYPE: Final = "*"
#: ``invoice.*``: every event type that starts with ``invoice.``.
WILDCARD_SUFFIX: Final = ".*"
#: The longest tenant id.
MAX_TENANT: Final = 200
#: ``invoice.paid``, ``user:created``, ``Order_Shipped.v2``: a letter or digit, then up to 127 of
#: ``[A-Za-z0-9._:-]``. No spaces, quotes or control characters reach a header, a log or a query.
_EVENT_TYPE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
#: A tenant id: 1 to 200 characters, no C0/C1 control character.
_TENANT: Final = re.compile(rf"[^\x00-\x1f\x7f-\x9f]{{1,{MAX_TENANT}}}")


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


def _check_subscription(value: object) -> str:
    if value == ANY_EVENT_TYPE:
        return ANY_EVENT_TYPE
    if isinstance(value, str) and value.endswith(WILDCARD_SUFFIX):
        prefix = value[: -len(WILDCARD_SUFFIX)]
        if _EVENT_TYPE.fullmatch(prefix) is not None:
            return value
        raise InvalidMessage(
            f"a wildcard subscription is an event type followed by '.*' (e.g. 'invoice.*'),"
            f" got {value!r:.80}"
        )
    return check_event_type(value)


def check_event_types(values: Sequence[str]) -> tuple[str, ...]:
    """An endpoint's subscription: one or more event types, ``*`` (every type) or wildcards
    (``invoice.*``); duplicates dropped, order kept."""
    if isinstance(values, str) or not values:
        raise InvalidMessage(
            "an endpoint subscribes to at least one event type (or '*', or a wildcard like"
            " 'invoice.*')"
        )
    return tuple(dict.fromkeys(_check_subscription(value) for value in values))


def receives(event_types: Sequence[str], event_type: str) -> bool:
    """Whether an endpoint subscribed to ``event_types`` takes ``event_type``: listed exactly,
    ``*``, or under a wildcard's prefix (``invoice.*`` takes ``invoice.paid``)."""
    for subscription in event_types:
        if subscription in (event_type, ANY_EVENT_TYPE):
            return True
        if subscription.endswith(WILDCARD_SUFFIX) and event_type.startswith(subscription[:-1]):
            return True
    return False


def check_tenant(value: object) -> str:
    """``value`` if it is a tenant id (1 to 200 characters of text, none of them a control
    character), else :class:`InvalidMessage` naming the rule. ``None`` is refused: every webhook
    event and endpoint belongs to a tenant."""
    if isinstance(value, str) and _TENANT.fullmatch(value) is not None:
        return value
    if value is None:
        raise InvalidMessage(
            "a webhook event or endpoint needs a tenant (tenant='<your customer id>'): an event"
            " fans out only to its own tenant's endpoints"
        )
    raise InvalidMessage(
        f"a tenant is 1 to {MAX_TENANT} characters of text without control characters,"
        f" got {value!r:.80}"
    )


def refused_no_event(event_id: int) -> WebhookRefused:
    return WebhookRefused(f"there is no webhook event {event_id}")


def refused_no_endpoint(endpoint_id: int) -> WebhookRefused:
    return WebhookRefused(f"there is no webhook endpoint {endpoint_id}")


def refused_disabled(
    endpoint_id: int, reason: str | None, *, replay_failed: bool = False
) -> WebhookRefused:
    if replay_failed:
        return WebhookRefused(
            f"webhook endpoint {endpoint_id} is disabled; enable it first, then replay"
        )
    return WebhookRefused(
        f"webhook endpoint {endpoint_id} is disabled ({reason or 'no reason given'});"
        " enable it first (outbox endpoints enable), then replay"
    )


def refused_unsubscribed(endpoint_id: int | None, event_type: str) -> WebhookRefused:
    if endpoint_id is None:
        return WebhookRefused(
            f"no enabled endpoint subscribes to {event_type!r}; nothing to replay to"
        )
    return WebhookRefused(f"webhook endpoint {endpoint_id} does not subscribe to {event_type!r}")


def check_replay_target(
    event_type: str, tenant: str, endpoint_id: int | None, endpoints: Sequence[Receiver]
) -> None:
    """Refuse a replay of an ``event_type`` event of ``tenant`` with the reason
    (:class:`WebhookRefused`): ``endpoints`` are every endpoint (``endpoint_id`` None: at least one
    enabled endpoint of the tenant must take the type) or the one asked for (none, or another
    tenant's: it doesn't exist for this event; it must be enabled and take the type)."""
    if endpoint_id is None:
        if not any(
            e.enabled and e.tenant == tenant and receives(e.event_types, event_type)
            for e in endpoints
        ):
            raise refused_unsubscribed(None, event_type)
        return
    endpoint = next((e for e in endpoints if e.id == endpoint_id), None)
    if endpoint is None or endpoint.tenant != tenant:
        raise refused_no_endpoint(endpoint_id)
    if not endpoint.enabled:
        raise refused_disabled(endpoint_id, endpoint.disabled_reason)
    if not receives(endpoint.event_types, event_type):
        raise refused_unsubscribed(endpoint_id, event_type)
