"""PostgreSQL adapters: tables, the store, enqueue on the host's transaction, the leader lease,
the LISTEN/NOTIFY wake-up listener.

Needs the ``postgres`` extra (psycopg 3 + psycopg_pool, SQLAlchemy Core).
"""

from outbox_adapters.postgres import schema, statements
from outbox_adapters.postgres.enqueue import (
    MAX_PAYLOAD_BYTES,
    TransactionRequired,
    enqueue,
    enqueue_async,
)
from outbox_adapters.postgres.leader import PostgresLeaderLease
from outbox_adapters.postgres.notify import WAKEUP_CHANNEL, WakeupListener
from outbox_adapters.postgres.store import (
    ErrorGroup,
    FailedReport,
    PostgresStore,
    StoredRow,
    StoreStats,
)
from outbox_adapters.postgres.tables import (
    metadata,
    outbox_leader,
    outbox_message,
    outbox_requeue_audit,
)

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "WAKEUP_CHANNEL",
    "ErrorGroup",
    "FailedReport",
    "PostgresLeaderLease",
    "PostgresStore",
    "StoreStats",
    "StoredRow",
    "TransactionRequired",
    "WakeupListener",
    "enqueue",
    "enqueue_async",
    "metadata",
    "outbox_leader",
    "outbox_message",
    "outbox_requeue_audit",
    "schema",
    "statements",
]
