"""The contract suite's harness: ONE suite, run against every store and leader lease.

Each contract test takes ``harness`` (or ``leader``), which is parametrised over the in-memory
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

PostgreSQL gets the schema once per session (in the session's own database, from the
``postgres_dsn`` fixture) and empty tables before each test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.clock import FakeClock
from outbox_adapters.memory import MemoryLeaderLease, MemoryStore
from outbox_adapters.postgres import schema
from outbox_adapters.postgres.enqueue import enqueue_async
from outbox_adapters.postgres.leader import PostgresLeaderLease
from outbox_adapters.postgres.store import PostgresStore
from outbox_core.messages import NewMessage
from outbox_core.ports import EnqueueResult

#: Where the fake clock starts; PostgreSQL starts from its own clock.
CLOCK_START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
#: ``harness.now`` is this far after the store's clock at setup: later than any row enqueued
#: during the test became due, and far enough that no test runs that long.
HEADROOM = timedelta(hours=1)

BACKENDS = ["memory", pytest.param("postgres", marks=pytest.mark.integration)]

AuditRow = tuple[int, str, int, str | None]


@pytest.fixture(scope="session")
def contract_dsn(postgres_dsn: str) -> str:
    """The session's database, with the outbox schema applied once."""
    schema.apply(postgres_dsn)
    return postgres_dsn


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str | None:
    """``None`` for the in-memory adapters; a DSN (schema applied, tables empty) for PostgreSQL."""
    if request.param == "memory":
        return None
    dsn: str = request.getfixturevalue("contract_dsn")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE outbox_message, outbox_requeue_audit, outbox_leader RESTART IDENTITY"
        )
    return dsn


class MemoryHarness:
    name = "memory"

    def __init__(self) -> None:
        self.clock = FakeClock(CLOCK_START)
        self.store = MemoryStore(self.clock)
        self.now = self.clock.now() + HEADROOM

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


class PostgresHarness:
    name = "postgres"

    def __init__(self, pool: AsyncConnectionPool[Any], now: datetime) -> None:
        self.pool = pool
        self.store = PostgresStore(pool)
        self.now = now

    async def enqueue(self, message: NewMessage) -> EnqueueResult:
        async with self.pool.connection() as conn, conn.transaction():
            return await enqueue_async(conn, message)

    async def insert_raw(self, lane: str, text: str) -> int:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "INSERT INTO outbox_message (lane, payload) VALUES (%s, %s::jsonb) RETURNING id",
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
                " FROM outbox_requeue_audit ORDER BY id"
            )
            return [(r[0], r[1], r[2], r[3]) for r in await cur.fetchall()]


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
async def harness(backend: str | None) -> AsyncIterator[Harness]:
    if backend is None:
        yield MemoryHarness()
        return
    async with _pool(backend) as pool:
        async with pool.connection() as conn:
            row = await (await conn.execute("SELECT now()")).fetchone()
        assert row is not None
        yield PostgresHarness(pool, row[0] + HEADROOM)


class LeaderHarness:
    """A leader lease and the fake clock whose monotonic time it trusts itself by."""

    def __init__(self, name: str, lease: MemoryLeaderLease | PostgresLeaderLease, clock: FakeClock):
        self.name = name
        self.lease = lease
        self.clock = clock


@pytest.fixture
async def leader(backend: str | None) -> AsyncIterator[LeaderHarness]:
    clock = FakeClock(CLOCK_START)
    if backend is None:
        yield LeaderHarness("memory", MemoryLeaderLease(clock), clock)
        return
    async with _pool(backend) as pool:
        yield LeaderHarness("postgres", PostgresLeaderLease(pool, monotonic=clock.monotonic), clock)
