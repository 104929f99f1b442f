"""Enqueue a message on the host's own transaction (ADR 0006).

The outbox row must commit or roll back *with* the business rows that caused it; that is the whole
point of a transactional outbox. So :func:`enqueue` writes through the handle the host is already
using and never commits: it refuses a handle with no open transaction (the row would commit on its
own, or wait for a commit nobody plans), and a handle in autocommit mode outside a transaction block
(every statement would commit by itself).

Accepted handles:

===========================================  =====================  ==========================
handle                                       call                   "in a transaction" means
===========================================  =====================  ==========================
``psycopg.Connection``                       :func:`enqueue`        ``info.transaction_status``
``psycopg.AsyncConnection``                  :func:`enqueue_async`  is INTRANS
``sqlalchemy.Connection`` / ``orm.Session``  :func:`enqueue`        ``in_transaction()`` and
``AsyncConnection`` / ``AsyncSession``       :func:`enqueue_async`  not AUTOCOMMIT
===========================================  =====================  ==========================

A psycopg connection in autocommit mode *inside* ``with conn.transaction():`` is accepted: that block
is a real transaction (BEGIN ... COMMIT), and it is psycopg's recommended style.

The payload is checked by the core's rule (:func:`outbox_adapters.store_rules.payload_json`: a JSON
object of JSON types, within the size cap) before anything is written, so a bad message raises
:class:`~outbox_core.errors.InvalidPayload` where the host can catch it, and the host's transaction
is left untouched.

Wake-up (ADR 0011): on PostgreSQL, the INSERT also sends ``pg_notify('outbox_wakeup', lane)``
for the row it created (``notify=False`` turns that off). A notification is part of the
transaction: delivered when the host commits, discarded when it rolls back, and folded with the
identical ones of the same transaction, so a batch costs one per lane. Polling stays the
correctness path; the notification only ends a worker's idle wait early.

Tracing (ADR 0028): each enqueue runs in a PRODUCER span (:mod:`outbox_adapters.telemetry`), whose
W3C context is written in the row's ``trace_context`` column for the delivery span to link to.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, cast

import psycopg
from psycopg import pq
from sqlalchemy import Connection, Insert, Select, Table, func, select
from sqlalchemy import insert as generic_insert
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from outbox_adapters.postgres import statements
from outbox_adapters.postgres.tables import check_queue_table, outbox_message
from outbox_adapters.store_rules import MAX_PAYLOAD_BYTES, payload_json
from outbox_adapters.telemetry.tracing import producing
from outbox_core.errors import OutboxError
from outbox_core.messages import NewMessage
from outbox_core.ports import EnqueueResult

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "TransactionRequired",
    "enqueue",
    "enqueue_async",
    "require_transaction",
]

_NO_TRANSACTION = (
    "no open transaction; call enqueue inside your transaction "
    "(with conn.transaction(): ...) after your business writes"
)


class TransactionRequired(OutboxError):
    """The handle has no open transaction (or autocommits), so the row would not commit with the
    host's business rows."""


# --- statement parameters -----------------------------------------------------------------------


def _params(message: NewMessage, payload: str, *, notify: bool) -> dict[str, Any]:
    return {
        "lane": message.lane,
        "payload": payload,
        "idempotency_key": message.idempotency_key,
        "not_before": message.not_before,
        "notify": notify,
        "trace_context": message.trace_context,
    }


# --- psycopg ------------------------------------------------------------------------------------


def _check_psycopg(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    status = conn.info.transaction_status
    if status == pq.TransactionStatus.INERROR:
        raise TransactionRequired(
            "the transaction has already failed (an earlier statement raised); roll it back "
            "before enqueueing"
        )
    if status != pq.TransactionStatus.INTRANS:
        if conn.autocommit:
            raise TransactionRequired(
                "the connection is in autocommit mode and no transaction is open, so the row "
                f"would commit on its own; {_NO_TRANSACTION}"
            )
        raise TransactionRequired(_NO_TRANSACTION)


def _enqueue_psycopg(
    conn: psycopg.Connection[Any], message: NewMessage, payload: str, *, notify: bool, table: Table
) -> tuple[int, bool]:
    params = _params(message, payload, notify=notify)
    with conn.cursor() as cur:
        cur.execute(statements.render(statements.ENQUEUE, table), params)
        row = cur.fetchone()
        if row is not None:
            return int(row[0]), True
        cur.execute(statements.render(statements.ENQUEUE_EXISTING, table), params)
        return _existing(cur.fetchone(), message), False


async def _enqueue_psycopg_async(
    conn: psycopg.AsyncConnection[Any],
    message: NewMessage,
    payload: str,
    *,
    notify: bool,
    table: Table,
) -> tuple[int, bool]:
    params = _params(message, payload, notify=notify)
    async with conn.cursor() as cur:
        await cur.execute(statements.render(statements.ENQUEUE, table), params)
        row = await cur.fetchone()
        if row is not None:
            return int(row[0]), True
        await cur.execute(statements.render(statements.ENQUEUE_EXISTING, table), params)
        return _existing(await cur.fetchone(), message), False


# --- SQLAlchemy -----------------------------------------------------------------------------------


def _check_sqlalchemy(conn: Connection) -> None:
    if _autocommits(conn):
        raise TransactionRequired(
            "the SQLAlchemy connection uses isolation_level='AUTOCOMMIT', so the row would commit "
            "on its own; enqueue on a connection or session that runs a real transaction"
        )


def _autocommits(conn: Connection) -> bool:
    if conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
        return True
    # An engine created with isolation_level="AUTOCOMMIT" sets it on the DBAPI connection instead;
    # ask the dialect (no round trip). A dialect that can't tell falls back to in_transaction().
    dbapi = conn.connection.dbapi_connection
    if dbapi is None:  # pragma: no cover - an open transaction has a DBAPI connection
        return False
    try:
        return bool(conn.dialect.detect_autocommit_setting(dbapi))
    except NotImplementedError:
        return False


def _sqlalchemy_insert(conn: Connection, message: NewMessage, payload: str, table: Table) -> Insert:
    values = {
        "lane": message.lane,
        # The validated text, decoded again: what is stored is exactly what was checked.
        "payload": json.loads(payload),
        "idempotency_key": message.idempotency_key,
        "next_attempt_at": message.not_before if message.not_before is not None else func.now(),
        "trace_context": message.trace_context,
    }
    key = table.c.idempotency_key
    returning = table.c.id
    if conn.dialect.name == "postgresql":
        return (
            postgresql.insert(table)
            .values(values)
            .on_conflict_do_nothing(index_elements=["lane", key], index_where=key.is_not(None))
            .returning(returning)
        )
    if conn.dialect.name == "sqlite":
        return (
            sqlite.insert(table)
            .values(values)
            .on_conflict_do_nothing(index_elements=["lane", key], index_where=key.is_not(None))
            .returning(returning)
        )
    # Other dialects have no ON CONFLICT: a duplicate key raises IntegrityError from the index.
    return generic_insert(table).values(values).returning(returning)


def _sqlalchemy_enqueue(
    conn: Connection, message: NewMessage, payload: str, *, notify: bool, table: Table
) -> Insert | Select[tuple[int, Any]]:
    insert = _sqlalchemy_insert(conn, message, payload, table)
    if not notify or conn.dialect.name != "postgresql":
        return insert  # other dialects have no LISTEN/NOTIFY: their workers poll
    # statements.ENQUEUE's shape: the notification comes from the INSERT's own statement, once per
    # row it created, and is delivered only if the host's transaction commits.
    created = insert.cte("created")
    return select(created.c.id, func.pg_notify(statements.WAKEUP_CHANNEL, message.lane))


def _existing_select(message: NewMessage, table: Table) -> Any:  # noqa: ANN401 - one column
    return select(table.c.id).where(
        table.c.lane == message.lane,
        table.c.idempotency_key == message.idempotency_key,
    )


def _enqueue_sqlalchemy(
    conn: Connection, message: NewMessage, payload: str, *, notify: bool, table: Table
) -> tuple[int, bool]:
    _check_sqlalchemy(conn)
    statement = _sqlalchemy_enqueue(conn, message, payload, notify=notify, table=table)
    row = conn.execute(statement).first()
    if row is not None:
        return int(row[0]), True
    return _existing(conn.execute(_existing_select(message, table)).first(), message), False


async def _enqueue_sqlalchemy_async(
    conn: AsyncConnection, message: NewMessage, payload: str, *, notify: bool, table: Table
) -> tuple[int, bool]:
    sync = conn.sync_connection
    if sync is None:  # pragma: no cover - in_transaction() was checked, so it has started
        raise TransactionRequired(f"the SQLAlchemy connection has {_NO_TRANSACTION}")
    _check_sqlalchemy(sync)
    statement = _sqlalchemy_enqueue(sync, message, payload, notify=notify, table=table)
    row = (await conn.execute(statement)).first()
    if row is not None:
        return int(row[0]), True
    existing = (await conn.execute(_existing_select(message, table))).first()
    return _existing(existing, message), False


def _existing(row: Any, message: NewMessage) -> int:  # noqa: ANN401 - a driver's row
    if row is None:  # pragma: no cover - the conflicting row vanished between two statements
        raise RuntimeError(
            f"enqueue found idempotency key {message.idempotency_key!r} taken in lane "
            f"{message.lane!r} but could not read the row that holds it"
        )
    return int(row[0])


# --- entry points -------------------------------------------------------------------------------


def _async_sqlalchemy() -> tuple[type[Any], type[Any]] | None:
    """SQLAlchemy's ``AsyncConnection`` and ``AsyncSession``, if the host has imported them.

    Importing ``sqlalchemy.ext.asyncio`` fails without greenlet, and no async handle can exist
    until someone has imported it; so look, don't import.
    """
    module = sys.modules.get("sqlalchemy.ext.asyncio")
    if module is None:
        return None
    return module.AsyncConnection, module.AsyncSession


def enqueue(
    handle: object, message: NewMessage, *, notify: bool = True, table: Table = outbox_message
) -> EnqueueResult:
    """Write ``message`` in the open transaction of ``handle``; never commits.

    ``handle`` is a ``psycopg.Connection``, a ``sqlalchemy.Connection`` or a
    ``sqlalchemy.orm.Session``. Returns the new row's id; or, when the lane already has a row with
    the message's idempotency key, that row's id with ``created=False`` (nothing is written then).

    With ``notify`` (the default) a created row also sends ``NOTIFY outbox_wakeup, '<lane>'`` in
    the same transaction, so a :class:`~outbox_adapters.postgres.notify.WakeupListener` wakes the
    lane's worker as soon as the host commits; ``notify=False`` leaves the row to the poll.

    ``table`` is the queue table to write to (default ``outbox_message``; any table built by
    ``queue_table()``, whose own extra columns keep their defaults).
    """
    check_queue_table(table)
    payload = payload_json(message.payload)
    with producing(message, queue=table.name) as produced:
        result = _enqueue(handle, produced.message, payload, notify=notify, table=table)
        produced.wrote(result.row_id, created=result.created)
    return result


def _enqueue(
    handle: object, message: NewMessage, payload: str, *, notify: bool, table: Table
) -> EnqueueResult:
    if isinstance(handle, psycopg.Connection):
        _check_psycopg(handle)
        row_id, created = _enqueue_psycopg(handle, message, payload, notify=notify, table=table)
    elif isinstance(handle, Connection):
        if not handle.in_transaction():
            raise TransactionRequired(f"the SQLAlchemy connection has {_NO_TRANSACTION}")
        row_id, created = _enqueue_sqlalchemy(handle, message, payload, notify=notify, table=table)
    elif isinstance(handle, Session):
        if not handle.in_transaction():
            raise TransactionRequired(f"the SQLAlchemy session has {_NO_TRANSACTION}")
        conn = handle.connection(bind_arguments={"clause": table.insert()})
        row_id, created = _enqueue_sqlalchemy(conn, message, payload, notify=notify, table=table)
    elif isinstance(handle, (psycopg.AsyncConnection, *(_async_sqlalchemy() or ()))):
        raise TypeError(f"{type(handle).__name__} is asynchronous; use `await enqueue_async(...)`")
    else:
        raise TypeError(_unsupported(handle))
    return EnqueueResult(row_id=row_id, created=created)


async def enqueue_async(
    handle: object, message: NewMessage, *, notify: bool = True, table: Table = outbox_message
) -> EnqueueResult:
    """:func:`enqueue` for ``psycopg.AsyncConnection`` and SQLAlchemy ``AsyncConnection`` /
    ``AsyncSession``."""
    check_queue_table(table)
    payload = payload_json(message.payload)
    with producing(message, queue=table.name) as produced:
        result = await _enqueue_async(handle, produced.message, payload, notify=notify, table=table)
        produced.wrote(result.row_id, created=result.created)
    return result


async def _enqueue_async(
    handle: object, message: NewMessage, payload: str, *, notify: bool, table: Table
) -> EnqueueResult:
    sa_async = _async_sqlalchemy()
    if isinstance(handle, psycopg.AsyncConnection):
        _check_psycopg(handle)
        row_id, created = await _enqueue_psycopg_async(
            handle, message, payload, notify=notify, table=table
        )
    elif sa_async is not None and isinstance(handle, sa_async[0]):
        aconn = cast("AsyncConnection", handle)
        if not aconn.in_transaction():
            raise TransactionRequired(f"the SQLAlchemy connection has {_NO_TRANSACTION}")
        row_id, created = await _enqueue_sqlalchemy_async(
            aconn, message, payload, notify=notify, table=table
        )
    elif sa_async is not None and isinstance(handle, sa_async[1]):
        asession = cast("AsyncSession", handle)
        if not asession.in_transaction():
            raise TransactionRequired(f"the SQLAlchemy session has {_NO_TRANSACTION}")
        aconn = await asession.connection(bind_arguments={"clause": table.insert()})
        row_id, created = await _enqueue_sqlalchemy_async(
            aconn, message, payload, notify=notify, table=table
        )
    elif isinstance(handle, psycopg.Connection | Connection | Session):
        raise TypeError(f"{type(handle).__name__} is synchronous; use `enqueue(...)`")
    else:
        raise TypeError(_unsupported(handle))
    return EnqueueResult(row_id=row_id, created=created)


def require_transaction(handle: object) -> None:
    """Raise :class:`TransactionRequired` unless ``handle`` (any handle :func:`enqueue` or
    :func:`enqueue_async` takes) has an open transaction that is not autocommitting: what every
    write on the host's transaction needs (the webhook host API's too)."""
    sa_async = _async_sqlalchemy() or ()
    if isinstance(handle, psycopg.Connection | psycopg.AsyncConnection):
        _check_psycopg(handle)
    elif isinstance(handle, Connection):
        if not handle.in_transaction():
            raise TransactionRequired(f"the SQLAlchemy connection has {_NO_TRANSACTION}")
        _check_sqlalchemy(handle)
    elif isinstance(handle, (Session, *sa_async)):
        if not handle.in_transaction():  # type: ignore[attr-defined]
            raise TransactionRequired(f"the SQLAlchemy handle has {_NO_TRANSACTION}")
    else:
        raise TypeError(_unsupported(handle))


def _unsupported(handle: object) -> str:
    return (
        "enqueue needs a psycopg Connection/AsyncConnection or a SQLAlchemy Connection, "
        f"AsyncConnection, Session or AsyncSession; got {type(handle).__name__}"
    )
