"""PostgreSQL adapters: tables (``queue_table()`` builds any queue-shaped table), the store (one per
queue table), enqueue on the host's transaction, the leader lease, the LISTEN/NOTIFY wake-up
listener, the webhook model (:mod:`.webhooks`), the event outbox (:mod:`.events`) and the consumer
channels' tables (:mod:`.channels`), whose tables join the shared metadata on import, and the one
mapping of psycopg's outage errors to ``StoreUnavailable``.

Needs the ``postgres`` extra (psycopg 3 + psycopg_pool, SQLAlchemy Core).
"""

from outbox_adapters.postgres import channels, events, schema, statements, webhooks
from outbox_adapters.postgres.enqueue import (
    MAX_PAYLOAD_BYTES,
    TransactionRequired,
    enqueue,
    enqueue_async,
)
from outbox_adapters.postgres.errors import as_unavailable
from outbox_adapters.postgres.health import PostgresHeartbeat
from outbox_adapters.postgres.leader import PostgresLeaderLease
from outbox_adapters.postgres.notify import WAKEUP_CHANNEL, WakeupListener
from outbox_adapters.postgres.store import PostgresStore
from outbox_adapters.postgres.tables import (
    metadata,
    outbox_leader,
    outbox_message,
    outbox_requeue_audit,
    outbox_stale_marks,
    queue_table,
)

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "WAKEUP_CHANNEL",
    "PostgresHeartbeat",
    "PostgresLeaderLease",
    "PostgresStore",
    "TransactionRequired",
    "WakeupListener",
    "as_unavailable",
    "channels",
    "enqueue",
    "enqueue_async",
    "events",
    "metadata",
    "outbox_leader",
    "outbox_message",
    "outbox_requeue_audit",
    "outbox_stale_marks",
    "queue_table",
    "schema",
    "statements",
    "webhooks",
]
