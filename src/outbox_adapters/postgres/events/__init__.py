"""The event outbox on PostgreSQL (ADR 0020): the ``outbox_event`` table and ``publish`` on the
host's transaction.

The table is a queue table claimed in per-key order: the relay (``outbox_adapters.lanes.relay``)
is the one runtime over ``PostgresStore(pool, table=outbox_event)``.
"""

from outbox_adapters.postgres.events.publish import (
    Published,
    event_message,
    new_event,
    publish,
    publish_async,
)
from outbox_adapters.postgres.events.tables import EVENT_TABLE, RELAY_LANE, outbox_event

__all__ = [
    "EVENT_TABLE",
    "RELAY_LANE",
    "Published",
    "event_message",
    "new_event",
    "outbox_event",
    "publish",
    "publish_async",
]
