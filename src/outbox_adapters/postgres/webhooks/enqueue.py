"""``enqueue_webhook``: write a webhook event on the host's own transaction.

The same path as e-mail (:func:`outbox_adapters.postgres.enqueue.enqueue`, same handle rules: the
host's open transaction, never a commit) into the webhook outbox table. The fan-out to endpoints
happens later, when the drainer claims the row (:meth:`.WebhookRepository.fan_out`), so the host's
transaction never reads the endpoints and a rolled-back business write never makes an event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from outbox_adapters.postgres.enqueue import enqueue, enqueue_async
from outbox_adapters.postgres.webhooks.model import webhook_message
from outbox_adapters.postgres.webhooks.tables import outbox_webhook
from outbox_core.ports import EnqueueResult

__all__ = ["enqueue_webhook", "enqueue_webhook_async"]


def enqueue_webhook(  # noqa: PLR0913 - keyword-only options of one enqueue
    handle: object,
    event_type: str,
    data: Mapping[str, Any],
    *,
    tenant: str,
    idempotency_key: str | None = None,
    ordering_key: str | None = None,
    notify: bool = True,
) -> EnqueueResult:
    """Write one webhook event (``event_type``, a JSON object ``data``) of ``tenant`` in the open
    transaction of ``handle`` (a ``psycopg.Connection``, ``sqlalchemy.Connection`` or
    ``Session``).

    The event goes to ``tenant``'s enabled endpoints subscribed to its type, and to no other
    tenant's (docs/guides/webhooks.md, "Tenants"). An event type that isn't a sane name, data that
    isn't a JSON object within the payload rules, or a tenant that is ``None`` or not 1 to 200
    characters of text raises :class:`~outbox_core.errors.InvalidMessage` before anything is
    written. With
    ``idempotency_key``, a second enqueue of the same key writes nothing (``created=False``).

    With ``ordering_key`` (1 to 200 characters of text without control characters; anything else
    raises :class:`~outbox_core.errors.InvalidMessage`), the deliveries of this event are
    attempted in event order with the other events of the same key, per endpoint: a delivery is
    not attempted while an earlier one of its (endpoint, key) is still pending (ADR 0018,
    docs/guides/webhooks.md). Without one, a delivery waits for nothing.
    """
    message = webhook_message(
        event_type, data, tenant=tenant, idempotency_key=idempotency_key, ordering_key=ordering_key
    )
    return enqueue(handle, message, notify=notify, table=outbox_webhook)


async def enqueue_webhook_async(  # noqa: PLR0913 - keyword-only options of one enqueue
    handle: object,
    event_type: str,
    data: Mapping[str, Any],
    *,
    tenant: str,
    idempotency_key: str | None = None,
    ordering_key: str | None = None,
    notify: bool = True,
) -> EnqueueResult:
    """:func:`enqueue_webhook` for ``psycopg.AsyncConnection`` and SQLAlchemy ``AsyncConnection``
    / ``AsyncSession``."""
    message = webhook_message(
        event_type, data, tenant=tenant, idempotency_key=idempotency_key, ordering_key=ordering_key
    )
    return await enqueue_async(handle, message, notify=notify, table=outbox_webhook)
