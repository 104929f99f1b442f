"""The contract suite's harness: ONE suite, run against every store and leader lease.

Each contract test takes ``harness`` (or ``leader``, or ``wh`` for the webhook repository:
tests/support/webhook_contract.py), which is parametrised over the in-memory
adapters and PostgreSQL (the latter marked ``integration``), so the same cases prove the same
promises for both and the shipped fake cannot drift from the real store.

A store harness offers:

- ``store``: the store under test;
- ``await enqueue(message)``: the producer's path (PostgreSQL: ``enqueue_async`` on a psycopg
  ``AsyncConnection`` inside a transaction that then commits);
- ``await insert_raw(lane, text)``: a row written AROUND enqueue (a buggy producer, an old row),
  its payload the JSON ``text`` as it is (PostgreSQL: a plain ``INSERT ... %s::jsonb``), due now;
- ``now``: an instant at or after the due time of every row the test enqueues without a
  ``not_before``, to inject as ``ClaimRequest.now`` (an hour after the store's clock read at setup);
- ``await later()``: the store's own clock, strictly after everything it stamped so far and
  strictly before anything it stamps afterwards (for ``failed_since`` / ``failed_before``);
- ``await audit()``: the requeue audit as ``(message_id, actor, previous_attempts, previous_error)``.

- ``store_unavailable()``: a store of the same kind that can't reach its data (memory:
  ``available = False``; PostgreSQL: a pool pointed at a closed port), for the outage contract.

PostgreSQL runs three times: on the e-mail outbox table (``postgres``), on a second queue table
built by ``queue_table()`` with a column of its own (``other-table``), which proves the store's SQL
is one template for every queue table, and on the webhook deliveries table (``deliveries``: its
legacy NULL-due claim branch, its endpoint column), where the generic behaviour must hold as well.
It gets the schema once per session (in the session's own database, from the ``postgres_dsn``
fixture) and empty tables before each test. Memory runs twice too (``memory-deliveries``: the
deliveries store of a ``MemoryWebhookRepository``, which takes the 410 mark).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import BigInteger, Column, MetaData, Table
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateIndex, CreateTable
from tests.support.webhook_contract import MemoryWebhooks, PostgresWebhooks, webhook_harness

from outbox_adapters.clock import FakeClock
from outbox_adapters.memory import MemoryLeaderLease, MemoryStore, MemoryWebhookRepository
from outbox_adapters.postgres import schema
from outbox_adapters.postgres.enqueue import enqueue_async
from outbox_adapters.postgres.leader import PostgresLeaderLease
from outbox_adapters.postgres.store import PostgresStore
from outbox_adapters.postgres.tables import metadata, outbox_message, queue_table
from outbox_adapters.postgres.webhooks import outbox_webhook_delivery
from outbox_core.messages import NewMessage
from outbox_core.ports import EnqueueResult

#: Where the fake clock starts; PostgreSQL starts from its own clock.
CLOCK_START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
#: ``harness.now`` is this far after the store's clock at setup: later than any row enqueued
#: during the test became due, and far enough that no test runs that long.
HEADROOM = timedelta(hours=1)

BACKENDS = [
    "memory",
    pytest.param("postgres", marks=pytest.mark.integration),
    pytest.param("other-table", marks=pytest.mark.integration),
    pytest.param("deliveries", marks=pytest.mark.integration),
    "memory-deliveries",
]

#: A second queue table, as the webhook deliveries or event outbox tables will be: the queue
#: columns from queue_table(), plus one of its own that the store never touches.
OTHER_METADATA = MetaData(naming_convention=metadata.naming_convention)
OTHER_TABLE = queue_table(
    "contract_deliveries", OTHER_METADATA, Column("endpoint_id", BigInteger, nullable=True)
)

AuditRow = tuple[int, str, int, str | None]


@pytest.fixture(scope="session")
def contract_dsn(postgres_dsn: str) -> str:
    """The session's database, with the outbox schema and the second queue table applied once."""
    schema.apply(postgres_dsn)
    dialect = postgresql.dialect()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(str(CreateTable(OTHER_TABLE, if_not_exists=True).compile(dialect=dialect)))
        for index in OTHER_TABLE.indexes:
            conn.execute(str(CreateIndex(index, if_not_exists=True).compile(dialect=dialect)))
    return postgres_dsn


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> tuple[str, Table] | str | None:
    """``None`` for the in-memory adapters (``"memory-deliveries"``: the deliveries store of a
    ``MemoryWebhookRepository``); for PostgreSQL a DSN (schema applied, tables empty) and the queue
    table under test."""
    if request.param == "memory":
        return None
    if request.param == "memory-deliveries":
        return "memory-deliveries"
    dsn: str = request.getfixturevalue("contract_dsn")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE outbox_message, contract_deliveries, outbox_webhook_delivery,"
            " outbox_requeue_audit, outbox_stale_marks, outbox_leader RESTART IDENTITY"
        )
    tables = {"other-table": OTHER_TABLE, "deliveries": outbox_webhook_delivery}
    return dsn, tables.get(request.param, outbox_message)


class MemoryHarness:
    name = "memory"
    #: Whether the store takes a mark that disables its webhook endpoint (HTTP 410).
    takes_endpoints = False

    def __init__(self, *, deliveries: bool = False) -> None:
        self.clock = FakeClock(CLOCK_START)
        self.store = MemoryStore(self.clock)
        self.now = self.clock.now() + HEADROOM
        if deliveries:  # the deliveries store of a webhook repository, as the simulator runs it
            self.name = "memory-deliveries"
            self.takes_endpoints = True
            self.repository = MemoryWebhookRepository(MemoryStore(self.clock), self.store)

    async def enqueue(self, message: NewMessage) -> EnqueueResult:
        return self.store.enqueue(message)

    async def insert_raw(self, lane: str, text: str) -> int:
        return int(self.store.insert_raw(lane, text).row_id)

    async def later(self) -> datetime:
        self.clock.advance(1)
        at = self.clock.now()
        self.clock.advance(1)
        return at

    async def audit(self) -> list[AuditRow]:
        return [
            (e.message_id, e.actor, e.previous_attempts, e.previous_error) for e in self.store.audit
        ]

    async def reasons(self) -> list[str | None]:
        return [e.reason for e in self.store.audit]

    async def store_unavailable(self) -> MemoryStore:
        store = MemoryStore(self.clock)
        store.available = False
        return store


class PostgresHarness:
    name = "postgres"

    def __init__(self, pool: AsyncConnectionPool[Any], now: datetime, table: Table) -> None:
        self.pool = pool
        self.table = table
        self.name = {
            OTHER_TABLE.name: "other-table",
            outbox_webhook_delivery.name: "deliveries",
        }.get(table.name, "postgres")
        self.store = PostgresStore(pool, table=table)
        self.takes_endpoints = "endpoint_id" in table.c
        self.now = now
        #: Pools of store_unavailable(), closed after the test.
        self.closed_pools: list[AsyncConnectionPool[Any]] = []

    async def enqueue(self, message: NewMessage) -> EnqueueResult:
        async with self.pool.connection() as conn, conn.transaction():
            return await enqueue_async(conn, message, table=self.table)

    async def insert_raw(self, lane: str, text: str) -> int:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                sql.SQL(
                    "INSERT INTO {} (lane, payload) VALUES (%s, %s::jsonb) RETURNING id"
                ).format(sql.Identifier(self.table.name)),
                (lane, text),
            )
            row = await cur.fetchone()
        assert row is not None
        return int(row[0])

    async def later(self) -> datetime:
        # clock_timestamp() is the server's time at the call (now() is the transaction's start);
        # the pauses keep it strictly apart from the stamps of the statements before and after.
        await asyncio.sleep(0.002)
        async with self.pool.connection() as conn:
            row = await (await conn.execute("SELECT clock_timestamp()")).fetchone()
        await asyncio.sleep(0.002)
        assert row is not None
        at: datetime = row[0]
        return at

    async def audit(self) -> list[AuditRow]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT message_id, actor, previous_attempts, previous_error"
                " FROM outbox_requeue_audit WHERE queue = %s ORDER BY id",
                (self.table.name,),
            )
            return [(r[0], r[1], r[2], r[3]) for r in await cur.fetchall()]

    async def reasons(self) -> list[str | None]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT reason FROM outbox_requeue_audit WHERE queue = %s ORDER BY id",
                (self.table.name,),
            )
            return [r[0] for r in await cur.fetchall()]

    async def store_unavailable(self) -> PostgresStore:
        # Nothing listens on port 1: the pool never gets a connection and times out at once.
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            "host=127.0.0.1 port=1 connect_timeout=1", min_size=1, timeout=0.2, open=False
        )
        await pool.open(wait=False)
        self.closed_pools.append(pool)
        return PostgresStore(pool, table=self.table)


Harness = MemoryHarness | PostgresHarness


def _pool(dsn: str) -> AsyncConnectionPool[Any]:
    # lock_timeout: a claim that waits on a row lock fails in 2 s instead of hanging the suite.
    return AsyncConnectionPool(
        dsn,
        min_size=1,
        max_size=4,
        kwargs={"autocommit": True, "options": "-c lock_timeout=2000"},
        open=False,
    )


@pytest.fixture
async def harness(backend: tuple[str, Table] | str | None) -> AsyncIterator[Harness]:
    if backend is None or isinstance(backend, str):
        yield MemoryHarness(deliveries=backend is not None)
        return
    dsn, table = backend
    async with _pool(dsn) as pool:
        async with pool.connection() as conn:
            row = await (await conn.execute("SELECT now()")).fetchone()
        assert row is not None
        harness = PostgresHarness(pool, row[0] + HEADROOM, table)
        try:
            yield harness
        finally:
            for unreachable in harness.closed_pools:
                await unreachable.close()


class LeaderHarness:
    """A leader lease and the fake clock whose monotonic time it trusts itself by."""

    def __init__(self, name: str, lease: MemoryLeaderLease | PostgresLeaderLease, clock: FakeClock):
        self.name = name
        self.lease = lease
        self.clock = clock


@pytest.fixture(params=BACKENDS[:2])
def leader_backend(request: pytest.FixtureRequest) -> str | None:
    """``None`` for the in-memory lease; a DSN (``outbox_leader`` empty) for PostgreSQL's."""
    if request.param == "memory":
        return None
    dsn: str = request.getfixturevalue("contract_dsn")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE outbox_leader")
    return dsn


@pytest.fixture
async def leader(leader_backend: str | None) -> AsyncIterator[LeaderHarness]:
    clock = FakeClock(CLOCK_START)
    if leader_backend is None:
        yield LeaderHarness("memory", MemoryLeaderLease(clock), clock)
        return
    async with _pool(leader_backend) as pool:
        yield LeaderHarness("postgres", PostgresLeaderLease(pool, monotonic=clock.monotonic), clock)


@pytest.fixture(params=BACKENDS[:2])
async def wh(request: pytest.FixtureRequest) -> AsyncIterator[MemoryWebhooks | PostgresWebhooks]:
    """A webhook repository and its two stores (tests/support/webhook_contract.py): the in-memory
    one, and PostgreSQL's on the session's database with every table emptied."""
    dsn = None if request.param == "memory" else request.getfixturevalue("contract_dsn")
    async with webhook_harness(dsn) as made:
        yield made
