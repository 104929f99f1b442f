"""PostgresLeaderLease against a real PostgreSQL (catalogue A2): one leader per lane at a time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.lanes.email import email_lane
from outbox_adapters.memory import MemoryStore
from outbox_adapters.postgres.leader import PostgresLeaderLease
from outbox_adapters.runtime import Worker
from outbox_core.messages import ClaimedRow, NewMessage
from outbox_core.outcomes import Outcome
from outbox_core.ports import LeaderLease, LeaderTerm
from outbox_core.timing import EmailTiming

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

LANE = "email"
TTL = timedelta(seconds=30)
T0 = datetime(2031, 5, 4, 12, 0, tzinfo=UTC)


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with AsyncConnectionPool(
        dsn, min_size=2, max_size=4, kwargs={"autocommit": True}, open=False
    ) as opened:
        yield opened


@pytest.fixture
def lease(pool: AsyncConnectionPool[Any]) -> PostgresLeaderLease:
    return PostgresLeaderLease(pool)


def stored(dsn: str) -> tuple[Any, ...] | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT holder, term, elected_at, expires_at FROM outbox_leader WHERE lane = %s",
            (LANE,),
        ).fetchone()


def test_it_satisfies_the_port(lease: PostgresLeaderLease) -> None:
    port: LeaderLease = lease
    assert port is lease


async def test_the_first_candidate_wins_term_1_and_others_wait_for_the_lease(
    dsn: str, lease: PostgresLeaderLease
):
    won = await lease.try_acquire(LANE, "replica-a", ttl=TTL, now=T0)
    assert won is not None
    assert (won.lane, won.holder, won.term) == (LANE, "replica-a", 1)
    assert stored(dsn) == ("replica-a", 1, T0, T0 + TTL)
    assert await lease.try_acquire(LANE, "replica-b", ttl=TTL, now=T0 + TTL / 2) is None
    assert await lease.try_acquire(LANE, "replica-b", ttl=TTL, now=T0 + TTL / 2) is None
    # Another lane is another lease.
    other = await lease.try_acquire("webhook", "replica-b", ttl=TTL, now=T0)
    assert other is not None
    assert other.term == 1


async def test_the_holder_renews_its_lease_in_the_same_term(dsn: str, lease: PostgresLeaderLease):
    await lease.try_acquire(LANE, "replica-a", ttl=TTL, now=T0)
    renewed = await lease.try_acquire(LANE, "replica-a", ttl=TTL, now=T0 + TTL / 2)
    assert renewed is not None
    assert renewed.term == 1
    # Renewal extends the expiry and keeps when the term began.
    assert stored(dsn) == ("replica-a", 1, T0, T0 + TTL / 2 + TTL)
    assert await lease.try_acquire(LANE, "replica-b", ttl=TTL, now=T0 + TTL) is None


async def test_after_expiry_another_holder_wins_the_next_term(dsn: str, lease: PostgresLeaderLease):
    await lease.try_acquire(LANE, "replica-a", ttl=TTL, now=T0)
    won = await lease.try_acquire(LANE, "replica-b", ttl=TTL, now=T0 + TTL)
    assert won is not None
    assert (won.holder, won.term) == ("replica-b", 2)
    assert stored(dsn) == ("replica-b", 2, T0 + TTL, T0 + 2 * TTL)
    # The old holder, back from a pause, is a candidate like any other and loses.
    assert await lease.try_acquire(LANE, "replica-a", ttl=TTL, now=T0 + TTL + TTL / 2) is None


async def test_a_holder_that_let_its_lease_expire_starts_a_new_term(
    dsn: str, lease: PostgresLeaderLease
):
    # It stopped trusting itself at expiry: whatever it does next belongs to a new term.
    await lease.try_acquire(LANE, "replica-a", ttl=TTL, now=T0)
    again = await lease.try_acquire(LANE, "replica-a", ttl=TTL, now=T0 + 2 * TTL)
    assert again is not None
    assert again.term == 2


async def test_the_database_clock_is_the_default(dsn: str, lease: PostgresLeaderLease):
    won = await lease.try_acquire(LANE, "replica-a", ttl=TTL)
    assert won is not None
    row = stored(dsn)
    assert row is not None
    assert row[3] - row[2] == TTL
    assert abs(row[2] - datetime.now(UTC)) < timedelta(seconds=5)


async def test_release_lets_a_sibling_in_at_once_and_terms_never_repeat(
    dsn: str, lease: PostgresLeaderLease
):
    won = await lease.try_acquire(LANE, "replica-a", ttl=TTL)
    assert won is not None
    await lease.release(won)
    successor = await lease.try_acquire(LANE, "replica-b", ttl=TTL)
    assert successor is not None
    assert successor.term == 2
    # A release of a term that is no longer the holder's changes nothing.
    await lease.release(won)
    assert await lease.try_acquire(LANE, "replica-a", ttl=TTL) is None
    assert stored(dsn)[:2] == ("replica-b", 2)  # type: ignore[index]


async def test_two_candidates_racing_never_both_win_a_live_lease(
    dsn: str, pool: AsyncConnectionPool[Any]
):
    candidates = [PostgresLeaderLease(pool), PostgresLeaderLease(pool)]
    holders = ["replica-a", "replica-b"]
    for round_ in range(50):
        if round_:
            # The current lease runs out: the lane is up for grabs again.
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("UPDATE outbox_leader SET expires_at = now() - interval '1 second'")
        results = await asyncio.gather(
            *(c.try_acquire(LANE, h, ttl=TTL) for c, h in zip(candidates, holders, strict=True))
        )
        winners = [r for r in results if r is not None]
        assert len(winners) == 1, f"round {round_}: {results}"
        [winner] = winners
        assert winner.term == round_ + 1
        assert stored(dsn)[:2] == (winner.holder, winner.term)  # type: ignore[index]


async def test_trust_is_measured_from_the_start_of_the_attempt(
    dsn: str, lease: PostgresLeaderLease
):
    # A sibling transaction holds the lease row, so the attempt's statement waits 0.5 s before the
    # database grants the lease. The grant began no earlier than the attempt, so the holder must
    # count its TTL from the attempt's start, not from the (later) reply.
    first = await lease.try_acquire(LANE, "replica-a", ttl=timedelta(milliseconds=1))
    assert first is not None
    await asyncio.sleep(0.01)
    async with await psycopg.AsyncConnection.connect(dsn) as sibling:
        await sibling.execute("SELECT * FROM outbox_leader WHERE lane = %s FOR UPDATE", (LANE,))
        started = time.monotonic()
        attempt = asyncio.create_task(lease.try_acquire(LANE, "replica-b", ttl=TTL))
        await asyncio.sleep(0.5)
        assert not attempt.done()
        await sibling.rollback()
        won: LeaderTerm | None = await attempt
    assert won is not None
    assert started <= won.trusted_until - TTL.total_seconds() < started + 0.25


async def test_trusted_until_comes_from_the_injected_monotonic_clock(
    pool: AsyncConnectionPool[Any],
):
    ticks = iter([100.0, 900.0, 900.0])
    lease = PostgresLeaderLease(pool, monotonic=lambda: next(ticks))
    won = await lease.try_acquire(LANE, "replica-a", ttl=TTL)
    assert won is not None
    assert won.trusted_until == 100.0 + TTL.total_seconds()


async def test_a_non_positive_ttl_is_refused(lease: PostgresLeaderLease):
    with pytest.raises(ValueError, match="positive ttl"):
        await lease.try_acquire(LANE, "replica-a", ttl=timedelta(0))


# --- the worker on a leader-gated lane -----------------------------------------------------------


async def test_a_worker_keeps_its_lane_through_a_batch_longer_than_the_ttl(
    dsn: str, pool: AsyncConnectionPool[Any]
):
    """The term is renewed while the batch runs (every ttl/3, by a task beside it): a batch twice
    as long as the TTL keeps its leadership, under the same term, and the lease row's expiry moves
    on while it runs. Without that renewal the row-start gate finds the term too short part-way
    through and gives the rest of the batch back (the matrix's ``leader-no-renewal-in-batch``)."""
    timing = EmailTiming.with_overrides(
        {"suppression": 0.02, "branding": 0.02, "dial": 0.1, "smtp_exchange": 0.1,
         "bounce_report": 0.02, "mark": 0.04},
        batch_size=18,
    )  # fmt: skip
    per_row = timing.per_row.total_seconds()
    # 0.9 s, renewed every 0.3 s: just before a renewal 0.6 s are left, a whole row (0.3 s) and
    # 0.3 s to spare for a renewal that a loaded machine runs late. The batch takes 18 x 0.1 s.
    ttl = timedelta(seconds=3 * per_row)
    store = MemoryStore()
    for n in range(18):
        store.enqueue(NewMessage(LANE, {"n": n}))
    expiries: list[datetime] = []

    async def send(row: ClaimedRow, *, budget: timedelta) -> Outcome:
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT expires_at FROM outbox_leader WHERE lane = %s", (LANE,)
            )
            found = await cur.fetchone()
        assert found is not None
        expiries.append(found[0])
        await asyncio.sleep(0.1)
        return Outcome.sent()

    config = email_lane(timing=timing, leader_ttl=ttl, poll_interval=0.05)
    worker = Worker(store, send, config, leader=PostgresLeaderLease(pool), holder="replica-a")
    assert await worker.leadership.lead()
    started = time.monotonic()

    report = await worker.run_once()

    took = time.monotonic() - started
    assert took > 1.5 * ttl.total_seconds(), f"the batch took {took:.2f}s only"
    assert (report.claimed, report.dispatched, report.released, report.leadership_lost) == (
        18,
        18,
        0,
        0,
    ), report
    assert len(set(expiries)) >= 3, expiries  # renewed during the batch, several times
    assert expiries[-1] - expiries[0] >= ttl
    assert stored(dsn)[:2] == ("replica-a", 1)  # type: ignore[index]
    await worker.leadership.step_down()
