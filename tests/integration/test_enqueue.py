"""enqueue / enqueue_async on every handle type, against a real PostgreSQL.

The promise: the outbox row commits or rolls back WITH the host's business rows, because it is
written on the host's own transaction; a handle that would commit it on its own is refused; a bad
payload is refused before anything is written.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import psycopg
import pytest
from psycopg import pq
from sqlalchemy import Engine, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session
from tests.support.postgres import HANDLE_KINDS as KINDS

from outbox_adapters.postgres.enqueue import (
    MAX_PAYLOAD_BYTES,
    TransactionRequired,
    enqueue,
    enqueue_async,
)
from outbox_core.errors import InvalidPayload
from outbox_core.messages import NewMessage
from outbox_core.ports import EnqueueResult

pytestmark = pytest.mark.integration

BUSINESS = "INSERT INTO enqueue_test_signup (email) VALUES ('a@example.org')"


@pytest.fixture(autouse=True)
def _empty_tables(dsn: str, empty_outbox: None) -> None:
    """The outbox (``empty_outbox``) and the host's own business table, empty."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS enqueue_test_signup (email text NOT NULL)")
        conn.execute("TRUNCATE enqueue_test_signup")


def rows(dsn: str, table: str = "outbox_message") -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()  # noqa: S608


def visible(dsn: str, row_id: object) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM outbox_message WHERE id = %s", (row_id,)).fetchone()
    return found is not None


Probe = Callable[[list[EnqueueResult]], None]


async def in_transaction(
    kind: str,
    engine: Engine,
    async_engine: AsyncEngine,
    dsn: str,
    messages: Sequence[NewMessage],
    *,
    commit: bool = True,
    probe: Probe = lambda _: None,
) -> list[EnqueueResult]:
    """A business write and the enqueues in one transaction of ``kind``, then commit or roll back.

    ``probe`` runs before the transaction ends.
    """
    results: list[EnqueueResult] = []
    if kind == "psycopg":
        with psycopg.connect(dsn) as conn, conn.transaction():
            conn.execute(BUSINESS)
            results = [enqueue(conn, m) for m in messages]
            probe(results)
            if not commit:
                raise psycopg.Rollback
    elif kind == "psycopg-async":
        async with await psycopg.AsyncConnection.connect(dsn) as aconn, aconn.transaction():
            await aconn.execute(BUSINESS)
            results = [await enqueue_async(aconn, m) for m in messages]
            probe(results)
            if not commit:
                raise psycopg.Rollback
    elif kind == "sqlalchemy-connection":
        with engine.connect() as sa_conn:
            tx = sa_conn.begin()
            sa_conn.execute(text(BUSINESS))
            results = [enqueue(sa_conn, m) for m in messages]
            probe(results)
            tx.commit() if commit else tx.rollback()
    elif kind == "sqlalchemy-async-connection":
        async with async_engine.connect() as sa_aconn:
            atx = await sa_aconn.begin()
            await sa_aconn.execute(text(BUSINESS))
            results = [await enqueue_async(sa_aconn, m) for m in messages]
            probe(results)
            await (atx.commit() if commit else atx.rollback())
    elif kind == "sqlalchemy-session":
        with Session(engine) as session:
            session.execute(text(BUSINESS))  # autobegins the session's transaction
            results = [enqueue(session, m) for m in messages]
            probe(results)
            session.commit() if commit else session.rollback()
    elif kind == "sqlalchemy-async-session":
        async with AsyncSession(async_engine) as asession:
            await asession.execute(text(BUSINESS))
            results = [await enqueue_async(asession, m) for m in messages]
            probe(results)
            await (asession.commit() if commit else asession.rollback())
    else:  # pragma: no cover
        raise AssertionError(kind)
    return results


@pytest.mark.parametrize("kind", KINDS)
async def test_the_row_commits_with_the_host_transaction(
    kind: str, engine: Engine, async_engine: AsyncEngine, dsn: str
):
    message = NewMessage(lane="email", payload={"to": "a@example.org", "n": [1, 2.5, None, True]})

    def invisible_until_commit(results: list[EnqueueResult]) -> None:
        assert not visible(dsn, results[0].row_id), "the row was committed on its own"

    [result] = await in_transaction(
        kind, engine, async_engine, dsn, [message], probe=invisible_until_commit
    )
    assert result.created
    assert visible(dsn, result.row_id)
    assert len(rows(dsn, "enqueue_test_signup")) == 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        stored = conn.execute(
            "SELECT lane, payload, status, attempts, next_attempt_at <= now() FROM outbox_message"
        ).fetchall()
    assert stored == [
        ("email", {"to": "a@example.org", "n": [1, 2.5, None, True]}, "pending", 0, True)
    ]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_rolled_back_host_transaction_leaves_no_row(
    kind: str, engine: Engine, async_engine: AsyncEngine, dsn: str
):
    message = NewMessage(lane="email", payload={"to": "a@example.org"})
    await in_transaction(kind, engine, async_engine, dsn, [message], commit=False)
    assert rows(dsn) == []
    assert rows(dsn, "enqueue_test_signup") == []


@pytest.mark.parametrize("kind", KINDS)
async def test_a_second_enqueue_with_the_same_key_is_a_no_op_that_says_so(
    kind: str, engine: Engine, async_engine: AsyncEngine, dsn: str
):
    first = NewMessage(lane="email", payload={"n": 1}, idempotency_key="invoice-42")
    again = NewMessage(lane="email", payload={"n": 2}, idempotency_key="invoice-42")
    other_lane = NewMessage(lane="webhook", payload={"n": 3}, idempotency_key="invoice-42")
    created, same_tx, elsewhere = await in_transaction(
        kind, engine, async_engine, dsn, [first, again, other_lane]
    )
    assert created.created
    assert same_tx == EnqueueResult(row_id=created.row_id, created=False)
    assert elsewhere.created
    assert elsewhere.row_id != created.row_id
    [later] = await in_transaction(kind, engine, async_engine, dsn, [again])
    assert later == EnqueueResult(row_id=created.row_id, created=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        payloads = conn.execute("SELECT payload FROM outbox_message ORDER BY id").fetchall()
    assert payloads == [({"n": 1},), ({"n": 3},)]


# --- refused handles -----------------------------------------------------------------------------

MESSAGE = NewMessage(lane="email", payload={"to": "a@example.org"})


def test_psycopg_without_an_open_transaction_is_refused(dsn: str):
    with (
        psycopg.connect(dsn) as conn,
        pytest.raises(TransactionRequired, match="no open transaction"),
    ):
        enqueue(conn, MESSAGE)
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        pytest.raises(TransactionRequired, match="autocommit"),
    ):
        enqueue(conn, MESSAGE)
    assert rows(dsn) == []


def test_psycopg_autocommit_inside_a_transaction_block_is_a_real_transaction(dsn: str):
    # autocommit + `with conn.transaction()` is BEGIN ... COMMIT: psycopg's recommended style.
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.transaction():
            result = enqueue(conn, MESSAGE)
            assert not visible(dsn, result.row_id)
        assert visible(dsn, result.row_id)
        with conn.transaction():
            enqueue(conn, MESSAGE)
            raise psycopg.Rollback  # the block swallows it and rolls back
    assert len(rows(dsn)) == 1  # type: ignore[unreachable, unused-ignore]  # mypy: the transaction block swallows Rollback


def test_psycopg_in_a_failed_transaction_is_refused(dsn: str):
    with psycopg.connect(dsn) as conn:
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT * FROM no_such_table")
        with pytest.raises(TransactionRequired, match="already failed"):
            enqueue(conn, MESSAGE)


async def test_psycopg_async_without_an_open_transaction_is_refused(dsn: str):
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        with pytest.raises(TransactionRequired, match="no open transaction"):
            await enqueue_async(conn, MESSAGE)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        with pytest.raises(TransactionRequired, match="autocommit"):
            await enqueue_async(conn, MESSAGE)
    assert rows(dsn) == []


def test_sqlalchemy_without_a_transaction_or_with_autocommit_is_refused(engine: Engine, dsn: str):
    with (
        engine.connect() as conn,
        pytest.raises(TransactionRequired, match="no open transaction"),
    ):
        enqueue(conn, MESSAGE)
    with (
        engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn,
        conn.begin(),
        pytest.raises(TransactionRequired, match="AUTOCOMMIT"),
    ):
        enqueue(conn, MESSAGE)
    with (
        Session(engine) as session,
        pytest.raises(TransactionRequired, match="no open transaction"),
    ):
        enqueue(session, MESSAGE)
    autocommit_engine = engine.execution_options(isolation_level="AUTOCOMMIT")
    with Session(autocommit_engine) as session, session.begin():
        session.execute(text(BUSINESS))
        with pytest.raises(TransactionRequired, match="AUTOCOMMIT"):
            enqueue(session, MESSAGE)
    assert rows(dsn) == []


async def test_sqlalchemy_async_without_a_transaction_or_with_autocommit_is_refused(
    async_engine: AsyncEngine, dsn: str
):
    async with async_engine.connect() as conn:
        with pytest.raises(TransactionRequired, match="no open transaction"):
            await enqueue_async(conn, MESSAGE)
    autocommit_engine = async_engine.execution_options(isolation_level="AUTOCOMMIT")
    async with autocommit_engine.connect() as conn, conn.begin():
        with pytest.raises(TransactionRequired, match="AUTOCOMMIT"):
            await enqueue_async(conn, MESSAGE)
    async with AsyncSession(async_engine) as session:
        with pytest.raises(TransactionRequired, match="no open transaction"):
            await enqueue_async(session, MESSAGE)
    async with AsyncSession(autocommit_engine) as session, session.begin():
        with pytest.raises(TransactionRequired, match="AUTOCOMMIT"):
            await enqueue_async(session, MESSAGE)
    assert rows(dsn) == []


async def test_a_handle_of_the_wrong_kind_is_a_type_error(
    engine: Engine, async_engine: AsyncEngine, dsn: str
):
    with pytest.raises(TypeError, match="got str"):
        enqueue("postgresql://", MESSAGE)
    with pytest.raises(TypeError, match="got dict"):
        await enqueue_async({}, MESSAGE)
    async with async_engine.connect() as aconn:
        with pytest.raises(TypeError, match="enqueue_async"):
            enqueue(aconn, MESSAGE)
    with engine.connect() as conn, pytest.raises(TypeError, match="use `enqueue"):
        await enqueue_async(conn, MESSAGE)


# --- bad payloads --------------------------------------------------------------------------------


def unvalidated(payload: object) -> NewMessage:
    """A message whose payload skipped NewMessage's own type check (as a careless caller's might)."""
    with attrs.validators.disabled():
        return NewMessage(lane="email", payload=payload)  # type: ignore[arg-type]


#: (payload, what the refusal names). The rule itself is the core's (validate_payload, unit-tested
#: in tests/unit/test_payload.py) and the contract suite proves the memory store refuses the same;
#: here: every handle refuses before writing, the top level included.
BAD_PAYLOADS = {
    "NaN": ({"amount": math.nan}, "amount"),
    "infinity": ({"amount": [1, math.inf]}, "amount"),
    "not a dict": (["to", "a@example.org"], "must be a JSON object"),
    "a set": ({"tags": {"a"}}, "set"),
    "a tuple": ({"items": ("a", "b")}, "tuple"),
    "a non-string key": ({"n": {1: "one"}}, "int key"),
    "a NUL character": ({"to": "a\x00b"}, "U+0000"),
    "huge": ({"blob": "x" * (MAX_PAYLOAD_BYTES + 1)}, f"the limit is {MAX_PAYLOAD_BYTES:,} bytes"),
}


@pytest.mark.parametrize("case", BAD_PAYLOADS)
def test_a_bad_payload_is_refused_before_anything_is_written(case: str, dsn: str):
    payload, problem = BAD_PAYLOADS[case]
    with psycopg.connect(dsn) as conn, conn.transaction():
        conn.execute(BUSINESS)
        with pytest.raises(InvalidPayload, match=re.escape(problem)):
            enqueue(conn, unvalidated(payload))
        # Nothing reached the server: the host's transaction is intact and can still commit.
        assert conn.info.transaction_status == pq.TransactionStatus.INTRANS
    assert rows(dsn) == []
    assert len(rows(dsn, "enqueue_test_signup")) == 1


async def test_a_bad_payload_is_refused_by_the_async_entry_point_too(async_engine: AsyncEngine):
    async with AsyncSession(async_engine) as session, session.begin():
        with pytest.raises(InvalidPayload, match="JSON cannot represent"):
            await enqueue_async(session, unvalidated({"x": math.nan}))


def test_a_payload_at_the_size_limit_is_accepted(dsn: str):
    # {"blob":"..."} is 11 bytes of JSON around the string.
    payload = {"blob": "x" * (MAX_PAYLOAD_BYTES - 11)}
    with psycopg.connect(dsn) as conn, conn.transaction():
        assert enqueue(conn, NewMessage(lane="email", payload=payload)).created
    assert len(rows(dsn)) == 1
