"""The event outbox table (ADR 0020), in the shared :data:`~outbox_adapters.postgres.tables.metadata`,
so ``outbox schema apply|sql|verify`` and a host's Alembic autogenerate see it with the others.

``outbox_event`` is a :func:`~outbox_adapters.postgres.tables.queue_table` on lane
:data:`RELAY_LANE`, claimed by the one ``PostgresStore`` in per-key order
(``ordered_by="partition_key"``). Its payload is the event's CloudEvents envelope
(:meth:`~outbox_core.events.EventEnvelope.to_json`) plus the ``topic`` it is published to; the
columns an operator or the claim reads are generated from the payload, so the producer's INSERT
stays the generic one:

=================  ===================================================================
``topic``          the broker subject/topic (``platform-events``)
``partition_key``  the envelope's ``subject``: per-key order on the relay and the broker
``event_id``       the envelope's ``id``, unique: the broker's message id, the consumers'
                   de-duplication key (also the row's idempotency key)
``event_type``     the envelope's ``type`` (``tenant.provisioned``)
``published_at``   when the relay recorded the broker's positive acknowledgement: the
                   row's ``resolved_at`` once it is ``dispatched``, NULL before
=================  ===================================================================

Attempts, the lease, the last error and the status are the queue columns every queue table has.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Column, Computed, DateTime, Text

from outbox_adapters.postgres.tables import metadata, queue_table

__all__ = ["EVENT_TABLE", "RELAY_LANE", "outbox_event"]

#: The lane of the event-outbox rows (and the relay's leader-lease key).
RELAY_LANE: Final = "events"
EVENT_TABLE: Final = "outbox_event"

#: One row per domain event the host published in its own transaction.
outbox_event: Final = queue_table(
    EVENT_TABLE,
    metadata,
    Column("topic", Text, Computed("payload ->> 'topic'", persisted=True), nullable=False),
    Column(
        "partition_key", Text, Computed("payload ->> 'subject'", persisted=True), nullable=False
    ),
    Column(
        "event_id", Text, Computed("payload ->> 'id'", persisted=True), nullable=False, unique=True
    ),
    Column("event_type", Text, Computed("payload ->> 'type'", persisted=True), nullable=False),
    Column(
        "published_at",
        DateTime(timezone=True),
        Computed("CASE WHEN status = 'dispatched' THEN resolved_at END", persisted=True),
    ),
    ordered_by="partition_key",
)
