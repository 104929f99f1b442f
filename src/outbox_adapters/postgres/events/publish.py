"""``publish``: write a domain event into the event outbox on the host's own transaction.

The same path as e-mail (:func:`outbox_adapters.postgres.enqueue.enqueue`, the same handle rules:
the host's open transaction, never a commit) into :data:`~.tables.outbox_event`. The event and the
business rows that caused it commit together or not at all; the relay publishes it later.

Everything about the event is checked before anything is written: the topic, the type and the
source are dotted names, the partition key and the event id printable text, the data a JSON object
within the payload rules, the encoded envelope within the broker's size cap. A bad event raises
:class:`~outbox_core.errors.InvalidPayload` (an :class:`~outbox_core.errors.InvalidMessage`) in the
host's code, and its transaction is left untouched.

The event id is the row's idempotency key: a second publish with an id already written writes
nothing, and says so (``Published.created`` is ``False``, ``row_id`` the first row's).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import attrs

from outbox_adapters.postgres.enqueue import enqueue, enqueue_async
from outbox_adapters.postgres.events.tables import RELAY_LANE, outbox_event
from outbox_adapters.store_rules import payload_json
from outbox_core.events import EventEnvelope, check_event_name
from outbox_core.messages import NewMessage, RowId

__all__ = ["Published", "event_message", "new_event", "publish", "publish_async"]


@attrs.frozen
class Published:
    """What :func:`publish` did: the event, its row, and whether this call wrote it."""

    #: The event as it will be published (its ``id`` is the broker's message id).
    event: EventEnvelope
    #: The event-outbox row that holds it.
    row_id: RowId
    #: ``False`` when a row with this event id already existed: nothing was written.
    created: bool


def new_event(  # noqa: PLR0913 - the envelope's fields, keyword-only
    *,
    key: str,
    type: str,  # noqa: A002 - the CloudEvents attribute's name
    data: Mapping[str, Any],
    source: str = "app",
    event_id: str | None = None,
    time: datetime | None = None,
) -> EventEnvelope:
    """The envelope of a new event (a fresh ``uuid4`` id unless given; ``time`` now unless given);
    :class:`~outbox_core.errors.InvalidPayload` for any field the envelope refuses."""
    return EventEnvelope(
        id=str(uuid.uuid4()) if event_id is None else event_id,
        type=type,
        source=source,
        key=key,
        time=datetime.now(UTC) if time is None else time,
        data=data,
    )


def event_message(topic: str, event: EventEnvelope) -> NewMessage:
    """The event-outbox row for ``event`` on ``topic``, checked whole (topic, JSON rules, size)."""
    check_event_name(topic, "the topic")
    payload = {**event.to_json(), "topic": topic}
    payload_json(payload)  # the payload rules: JSON types only, no NaN, nesting and size caps
    event.encode()  # the broker's cap on the encoded envelope
    return NewMessage(RELAY_LANE, payload, idempotency_key=event.id)


def publish(  # noqa: PLR0913 - the event's fields, keyword-only
    handle: object,
    *,
    topic: str,
    key: str,
    type: str,  # noqa: A002 - the CloudEvents attribute's name
    data: Mapping[str, Any],
    source: str = "app",
    event_id: str | None = None,
    time: datetime | None = None,
    notify: bool = True,
) -> Published:
    """Write one event in the open transaction of ``handle`` (a ``psycopg.Connection``,
    ``sqlalchemy.Connection`` or ``Session``); never commits.

    ``topic`` is the broker subject/topic, ``key`` the partition key (events of one key are
    published in the order they were written), ``type`` and ``source`` dotted names, ``data`` a JSON
    object. ``event_id`` defaults to a fresh ``uuid4``; with an id already in the outbox nothing is
    written (``created=False``). Bad input raises :class:`~outbox_core.errors.InvalidPayload`
    before anything is written; a handle with no open transaction raises
    :class:`~outbox_adapters.postgres.enqueue.TransactionRequired`.
    """
    event = new_event(key=key, type=type, data=data, source=source, event_id=event_id, time=time)
    result = enqueue(handle, event_message(topic, event), notify=notify, table=outbox_event)
    return Published(event, result.row_id, result.created)


async def publish_async(  # noqa: PLR0913 - the event's fields, keyword-only
    handle: object,
    *,
    topic: str,
    key: str,
    type: str,  # noqa: A002 - the CloudEvents attribute's name
    data: Mapping[str, Any],
    source: str = "app",
    event_id: str | None = None,
    time: datetime | None = None,
    notify: bool = True,
) -> Published:
    """:func:`publish` for ``psycopg.AsyncConnection`` and SQLAlchemy ``AsyncConnection`` /
    ``AsyncSession``."""
    event = new_event(key=key, type=type, data=data, source=source, event_id=event_id, time=time)
    message = event_message(topic, event)
    result = await enqueue_async(handle, message, notify=notify, table=outbox_event)
    return Published(event, result.row_id, result.created)
