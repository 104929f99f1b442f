"""The outbox tables as SQLAlchemy Core ``MetaData`` (ADR 0006).

A host that manages its schema with Alembic adds :data:`metadata` to its ``target_metadata`` (a list
is accepted) and lets autogenerate write the migration; a host without Alembic runs
``outbox schema apply`` (:mod:`outbox_adapters.postgres.schema`), which emits the same DDL.

Every queue table (``outbox_message``, and the coming webhook-deliveries and event-outbox tables) is
built by :func:`queue_table`, which defines the queue columns, their checks and partial indexes
once; a table adds columns of its own. The shared tables have fixed names (``outbox_requeue_audit``,
``outbox_stale_marks``, ``outbox_leader``) and live in the connection's current schema: the SQL in
:mod:`.statements` names them unqualified, so a host that wants them elsewhere sets
``search_path`` on the outbox's connections.

Rows are kept after they are sent. A ``dispatched`` row is the delivery record (which message went
out, when, after how many attempts), so the table only grows; every index the hot path uses is
*partial* over the few rows that still matter (``pending``, ``failed``), which keeps claiming as cheap
with a hundred million sent rows as with none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Identity,
    Index,
    Integer,
    Interval,
    MetaData,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from outbox_core.delivery import Status
from outbox_core.errors import ConfigurationError

__all__ = [
    "ADDED_LATER",
    "MESSAGE_STORAGE",
    "QUEUE_COLUMNS",
    "check_queue_table",
    "has_delivery_key_order",
    "has_legacy_null_due",
    "key_order_column",
    "metadata",
    "outbox_heartbeat",
    "outbox_leader",
    "outbox_message",
    "outbox_requeue_audit",
    "outbox_stale_marks",
    "queue_table",
]

#: Marks a column added after its table first shipped (``Column(..., info={ADDED_LATER: True})``,
#: nullable): ``outbox schema apply`` adds it to a table an earlier release created.
ADDED_LATER: Final = "leased_outbox.added_later"

#: Every constraint and index gets a stable name, so Alembic migrations and ``schema verify`` agree.
metadata: Final = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_name)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# jsonb on PostgreSQL (the ``-`` operator the scrub uses needs it); plain JSON on other dialects.
_Payload = JSON().with_variant(JSONB(), "postgresql")

_IDENTIFIER: Final = re.compile(r"[a-z][a-z0-9_]{0,47}")

_STATUSES = ", ".join(f"'{status.value}'" for status in Status)

#: Storage parameters of ``outbox_message``, a small hot queue on top of an ever-growing history.
#:
#: - ``fillfactor=80``: a claim or a mark rewrites the row. Those updates change indexed columns
#:   (``next_attempt_at``, ``status`` in the partial indexes' predicates), so PostgreSQL can't make
#:   them HOT; the free fifth of each page still lets the new row version land on the *same* page,
#:   so a row's three or four versions share one page instead of scattering new pages at the end.
#: - ``autovacuum_vacuum_scale_factor=0.01`` + ``autovacuum_vacuum_threshold=1000``: the default
#:   (20 % of the table) waits for ever longer as the sent history grows, while the dead versions
#:   left by claims and marks pile up in the pending index the claim walks. 1 % plus a fixed floor
#:   keeps vacuum frequent; it is cheap because the all-visible history is skipped via the
#:   visibility map.
#: - ``autovacuum_analyze_scale_factor=0.02``: keeps the planner's view of the pending fraction
#:   fresh, for the same reason.
MESSAGE_STORAGE: Final = {
    "fillfactor": 80,
    "autovacuum_vacuum_scale_factor": 0.01,
    "autovacuum_vacuum_threshold": 1000,
    "autovacuum_analyze_scale_factor": 0.02,
}

#: The columns every queue table has, in this order (what the store's statements read and write).
QUEUE_COLUMNS: Final = (
    "id",
    "lane",
    "status",
    "payload",
    "attempts",
    "next_attempt_at",
    "claim_token",
    "claimed_at",
    "last_error",
    "idempotency_key",
    "created_at",
    "updated_at",
    "resolved_at",
    "scrubbed_at",
    "trace_context",
)

#: The ``Table.info`` key :func:`queue_table` sets: the only tables a ``PostgresStore`` accepts
#: (its statements name the table, so the table must be one the library made, never free text).
_QUEUE_MARK: Final = "leased_outbox.queue_table"
#: The ``Table.info`` key of a queue table whose due column may hold NULL (``legacy_null_due``).
_LEGACY_NULL_DUE: Final = "leased_outbox.legacy_null_due"
#: The ``Table.info`` key of a queue table claimed in per-key order (``ordered_by``): the column.
_ORDERED_BY: Final = "leased_outbox.ordered_by"


def _queue_columns(*, legacy_null_due: bool = False) -> list[Column[Any]]:
    """A fresh set of the queue columns (a Column belongs to one table)."""
    return [
        Column("id", BigInteger, Identity(), primary_key=True),
        #: The queue the row belongs to (``email``, ``webhook``, ...); each lane is claimed
        #: separately.
        Column("lane", Text, nullable=False),
        Column("status", Text, nullable=False, server_default=Status.PENDING.value),
        Column("payload", _Payload, nullable=False),
        #: Claims so far. Only the claim increments it; an operator's requeue resets it to 0.
        Column("attempts", Integer, nullable=False, server_default=text("0")),
        #: When the row is due. While the row is claimed it doubles as the lease expiry: the claim
        #: pushes it to ``now + lease``, so a sibling can take the row only after the lease ran out.
        #: NULL only on a ``legacy_null_due`` table, in rows written before due times were
        #: always set; the claim treats such a row as due (see ``claim_forms.legacy_null_due``).
        Column(
            "next_attempt_at",
            DateTime(timezone=True),
            nullable=legacy_null_due,
            server_default=func.now(),
        ),
        #: The fencing token of the latest claim; every mark must present it (ADR 0004).
        Column("claim_token", Text, nullable=True),
        Column("claimed_at", DateTime(timezone=True), nullable=True),
        #: Why the last attempt failed or was skipped. A sentence, never a secret.
        Column("last_error", Text, nullable=True),
        #: The producer's key; a second enqueue with the same lane and key writes nothing.
        Column("idempotency_key", Text, nullable=True),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
        Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
        #: When the row became dispatched, skipped or failed (NULL while pending).
        Column("resolved_at", DateTime(timezone=True), nullable=True),
        #: When the dispatched/skipped mark removed the secret payload keys (the scrub).
        Column("scrubbed_at", DateTime(timezone=True), nullable=True),
        #: The W3C trace context of the enqueue (``traceparent``, then a space and the
        #: ``tracestate``), written by the producer's span (ADR 0028); NULL when nothing traced it.
        Column("trace_context", Text, nullable=True, info={ADDED_LATER: True}),
    ]


def queue_table(
    name: str,
    meta: MetaData,
    *extra: Column[Any],
    storage: Mapping[str, object] = MESSAGE_STORAGE,
    legacy_null_due: bool = False,
    ordered_by: str | None = None,
) -> Table:
    """A queue-shaped table: the queue columns (:data:`QUEUE_COLUMNS`), their checks and partial
    indexes, then ``extra`` columns of its own (nullable or with a default: the store's statements
    never write them, the producer does).

    ``legacy_null_due`` makes ``next_attempt_at`` nullable for this table only, and the store's
    claim on it also takes pending rows whose due time is NULL (rows written by an older producer
    that left it unset; the webhook deliveries table keeps that branch until no such row can
    exist). Every other table's due column stays NOT NULL and its claim unchanged.

    ``ordered_by`` names one of the ``extra`` columns (a partition key, NOT NULL) whose rows must be
    worked in id order per key: the store's claim on this table orders by id and never takes a row
    while an earlier row of the same key is pending and not in the same claim (waiting for a retry,
    or leased by another claim); see ``claim_forms.per_key_order``. Two partial indexes serve it.
    Other tables' claims are unchanged.

    Every queue table is built here, once per name, so the queue columns are defined in one
    place; :class:`~outbox_adapters.postgres.store.PostgresStore` accepts only a table built here
    (``PostgresStore(pool, table=...)``). Raises :class:`ConfigurationError` for a name that is
    not a plain lower-case SQL identifier, or an extra column that shadows a queue column.
    """
    if not _IDENTIFIER.fullmatch(name):
        raise ConfigurationError(
            f"a queue table name is 1 to 48 characters of [a-z0-9_] starting with a letter,"
            f" got {name!r:.80}"
        )
    clashes = sorted({column.name for column in extra} & set(QUEUE_COLUMNS))
    if clashes:
        raise ConfigurationError(
            f"queue table {name}: extra column(s) {', '.join(clashes)} are queue columns already"
        )
    if ordered_by is not None:
        _check_ordered_by(name, ordered_by, extra)
    table = Table(
        name,
        meta,
        *_queue_columns(legacy_null_due=legacy_null_due),
        *extra,
        CheckConstraint(f"status IN ({_STATUSES})", name="status"),
        CheckConstraint("attempts >= 0", name="attempts"),
        postgresql_with=dict(storage),
    )
    c = table.c
    pending = c.status == Status.PENDING.value
    #: The claim's index: due pending rows of a lane in claim order. Partial, so sent rows cost
    #: nothing.
    Index(f"ix_{name}_due", c.lane, c.next_attempt_at, c.id, postgresql_where=pending)
    #: The operator's index: failed rows of a lane by when they failed (``outbox failed``).
    Index(
        f"ix_{name}_failed",
        c.lane,
        c.resolved_at,
        postgresql_where=c.status == Status.FAILED.value,
    )
    #: The producer's idempotency key, unique per lane. ``enqueue`` names this index's columns
    #: and predicate in ``ON CONFLICT (lane, idempotency_key) WHERE idempotency_key IS NOT NULL``.
    Index(
        f"uq_{name}_idempotency_key",
        c.lane,
        c.idempotency_key,
        unique=True,
        postgresql_where=c.idempotency_key.is_not(None),
    )
    if ordered_by is not None:
        key = c[ordered_by]
        #: The per-key claim's test "an earlier pending row of this key", per key in id order.
        Index(f"ix_{name}_key_order", c.lane, key, c.id, postgresql_where=pending)
        #: The per-key claim walks pending rows in id order (not due-time order).
        Index(f"ix_{name}_pending_id", c.lane, c.id, postgresql_where=pending)
    table.info[_QUEUE_MARK] = name
    table.info[_LEGACY_NULL_DUE] = legacy_null_due
    table.info[_ORDERED_BY] = ordered_by
    return table


def _check_ordered_by(name: str, ordered_by: object, extra: tuple[Column[Any], ...]) -> None:
    columns = {column.name: column for column in extra}
    if not isinstance(ordered_by, str) or ordered_by not in columns:
        raise ConfigurationError(
            f"queue table {name}: ordered_by must name one of its extra columns"
            f" ({', '.join(sorted(columns)) or 'none'}), got {ordered_by!r:.80}"
        )
    if not _IDENTIFIER.fullmatch(ordered_by):
        raise ConfigurationError(
            f"queue table {name}: ordered_by column {ordered_by!r:.80} is not a plain lower-case"
            " SQL identifier"
        )
    if columns[ordered_by].nullable:
        raise ConfigurationError(
            f"queue table {name}: ordered_by column {ordered_by} must be NOT NULL (a row with no"
            " key would be ordered against nothing)"
        )


def has_legacy_null_due(table: Table) -> bool:
    """Whether ``table`` was built with ``queue_table(..., legacy_null_due=True)``."""
    return bool(table.info.get(_LEGACY_NULL_DUE, False))


def has_delivery_key_order(table: Table) -> bool:
    """Whether ``table`` is claimed in per-(endpoint, key) delivery order: it has the webhook
    deliveries' ``endpoint_id``, ``event_id`` and ``ordering_key`` columns (ADR 0018)."""
    return {"endpoint_id", "event_id", "ordering_key"} <= set(table.c.keys())


def key_order_column(table: Table) -> str | None:
    """The column a ``queue_table(..., ordered_by=...)`` table is claimed in per-key order by."""
    value = table.info.get(_ORDERED_BY)
    return value if isinstance(value, str) else None


def check_queue_table(table: object) -> Table:
    """``table`` if :func:`queue_table` built it; else :class:`ConfigurationError` saying why."""
    if not isinstance(table, Table):
        raise ConfigurationError(
            f"a queue table is a sqlalchemy Table built by queue_table(), got {type(table).__name__}"
        )
    if table.info.get(_QUEUE_MARK) != table.name:
        raise ConfigurationError(
            f"table {table.name!r} was not built by outbox_adapters.postgres.tables.queue_table(),"
            " so it may lack the queue columns the store's statements use"
        )
    return table


#: One row per e-mail (and any lane that needs no columns of its own). ``status`` follows
#: :mod:`outbox_core.delivery`.
outbox_message: Final = queue_table("outbox_message", metadata)

#: Who put which failed row back to pending, and what it had failed with.
#:
#: ``message_id`` is deliberately not a foreign key: the audit trail must outlive a pruned message.
outbox_requeue_audit: Final = Table(
    "outbox_requeue_audit",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    #: The queue table the row lives in (``outbox_message``, or another :func:`queue_table`).
    Column("queue", Text, nullable=False, server_default="outbox_message"),
    Column("message_id", BigInteger, nullable=False, index=True),
    Column("actor", Text, nullable=False),
    Column("requeued_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("previous_attempts", Integer, nullable=False),
    Column("previous_error", Text, nullable=True),
    #: Why, as the operator said it (``outbox requeue --reason``).
    Column("reason", Text, nullable=True, info={ADDED_LATER: True}),
)

#: Marks the fence refused, per queue table and lane (``outbox stats``). ``MARK`` and
#: ``MARK_MANY`` bump its row in the same statement when they match nothing; a lean mark
#: (``MARK_SENT``) that matches nothing is counted by ``COUNT_STALE`` right after it. Stale marks
#: are rare (a lease that ran out under a paused worker), so the counter row is no hot spot.
outbox_stale_marks: Final = Table(
    "outbox_stale_marks",
    metadata,
    Column("queue", Text, primary_key=True),
    Column("lane", Text, primary_key=True),
    Column("stale_marks", BigInteger, nullable=False),
    #: In database time.
    Column("last_stale_at", DateTime(timezone=True), nullable=False),
    CheckConstraint("stale_marks >= 0", name="stale_marks"),
)

#: One leadership lease per lane (ADR 0008; see :mod:`.leader`).
outbox_leader: Final = Table(
    "outbox_leader",
    metadata,
    Column("lane", Text, primary_key=True),
    Column("holder", Text, nullable=False),
    #: Grows by one each time leadership starts afresh; a renewal keeps it.
    Column("term", BigInteger, nullable=False),
    Column("elected_at", DateTime(timezone=True), nullable=False),
    #: In database time; past it, anyone may take the lane.
    Column("expires_at", DateTime(timezone=True), nullable=False),
    CheckConstraint("term >= 1", name="term"),
)

#: Workers' heartbeats (``outbox healthcheck``; :mod:`.health`): one row per (lane, holder),
#: rewritten by the worker's loop at most every 10 s. Rows of workers gone for a day are deleted by
#: the next beat on their lane.
outbox_heartbeat: Final = Table(
    "outbox_heartbeat",
    metadata,
    Column("lane", Text, primary_key=True),
    Column("holder", Text, primary_key=True),
    #: The host the worker runs on (``socket.gethostname()``) and its process id.
    Column("host", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    #: In database time.
    Column("beat_at", DateTime(timezone=True), nullable=False),
    #: How old this beat may get while its worker is alive (the lane's own figure).
    Column("stale_after", Interval, nullable=False),
    #: Whether it led the lane when it beat (NULL: the lane is not leader-gated).
    Column("leads", Boolean, nullable=True),
    #: When its worker stopped cleanly (its stop beat; NULL while it runs): not live since.
    Column("stopped_at", DateTime(timezone=True), nullable=True, info={ADDED_LATER: True}),
)
