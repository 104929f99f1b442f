"""Per-key order in the generic store (ADR 0020) on real PostgreSQL: a table built with
``queue_table(..., ordered_by="partition_key")`` (the event outbox) is claimed in id order, and a
row is never taken while an earlier row of its key is pending outside the claim — waiting for a
retry, leased by a claim that crashed, or held by a concurrent transaction. Keys are independent.

``test_a_key_s_later_row_waits_while_its_earlier_row_waits_for_a_retry`` is the matrix's test for
the per-key claim predicate (tests/mutations/matrix.py, ``event-claim-no-key-order``).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from outbox_adapters.postgres import claim_forms, statements
from outbox_adapters.postgres.events import outbox_event, publish_async
from outbox_adapters.postgres.store import PostgresStore
from outbox_adapters.postgres.tables import outbox_message
from outbox_adapters.postgres.webhooks import outbox_webhook, outbox_webhook_delivery
from outbox_core.delivery import Status
from outbox_core.messages import ClaimToken, Mark
from outbox_core.ports import ClaimRequest, MarkResult

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

LANE = "events"
LEASE = timedelta(minutes=10)


def claim(limit: int = 10, *, now: datetime | None = None) -> ClaimRequest:
    token = ClaimToken.from_entropy(secrets.token_bytes(16))
    return ClaimRequest(lane=LANE, limit=limit, lease=LEASE, token=token, now=now)


@pytest.fixture
async def events(dsn: str) -> AsyncIterator[PostgresStore]:
    async with await PostgresStore.open(
        dsn, table=outbox_event, max_size=3, connect_kwargs={"options": "-c lock_timeout=2000"}
    ) as opened:
        yield opened


async def publish_keys(dsn: str, *keys: str) -> list[int]:
    """One event per key in ``keys``, in that order, in ONE host transaction; their row ids."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
        return [
            int(
                (
                    await publish_async(
                        conn, topic="platform-events", key=key, type="t.happened", data={"n": n}
                    )
                ).row_id
            )
            for n, key in enumerate(keys)
        ]


async def db_now(dsn: str) -> datetime:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        row = await (await conn.execute("SELECT now()")).fetchone()
    assert row is not None
    now: datetime = row[0]
    return now.astimezone(UTC)


async def retry(store: PostgresStore, row_id: int, token: ClaimToken, wait: timedelta) -> None:
    mark = Mark(row_id, token, Status.PENDING, reason="broker down", retry_delay=wait)
    assert await store.mark_if_pending(mark) is MarkResult.APPLIED


async def test_a_key_s_later_row_waits_while_its_earlier_row_waits_for_a_retry(
    dsn: str, events: PostgresStore
) -> None:
    first, second, other = await publish_keys(dsn, "tenant-1", "tenant-1", "tenant-2")
    taken = await events.claim_due(claim(limit=1))
    assert [r.id for r in taken] == [first]
    await retry(events, first, taken[0].token, timedelta(hours=1))

    # tenant-1's first event waits an hour for its retry: its second must wait with it, while
    # tenant-2 goes on.
    going_on = await events.claim_due(claim())
    assert [r.id for r in going_on] == [other]
    assert await events.claim_due(claim()) == []
    sent = Mark(other, going_on[0].token, Status.DISPATCHED)
    assert await events.mark_if_pending(sent) is MarkResult.APPLIED

    # When the first is due again, both come back, the first first.
    later = await db_now(dsn) + timedelta(hours=2)
    assert [r.id for r in await events.claim_due(claim(now=later))] == [first, second]


async def test_a_key_s_later_row_waits_while_a_crashed_claim_holds_its_earlier_row(
    dsn: str, events: PostgresStore
) -> None:
    first, second = await publish_keys(dsn, "tenant-1", "tenant-1")
    # A relay claimed the first row only, then died: no mark, the lease holds the row.
    assert [r.id for r in await events.claim_due(claim(limit=1))] == [first]
    assert await events.claim_due(claim()) == []
    # After the lease, the first is taken again, before the second, in the same claim.
    after_lease = await db_now(dsn) + LEASE + timedelta(seconds=1)
    again = await events.claim_due(claim(now=after_lease))
    assert [(r.id, r.attempts) for r in again] == [(first, 2), (second, 1)]


async def test_a_blocked_key_does_not_freeze_the_other_keys(
    dsn: str, events: PostgresStore
) -> None:
    blocked = await publish_keys(dsn, *["stuck"] * 30)
    others = await publish_keys(dsn, "a", "b", "a", "c")
    head = await events.claim_due(claim(limit=1))
    assert [r.id for r in head] == blocked[:1]
    await retry(events, blocked[0], head[0].token, timedelta(hours=1))
    # 29 rows of "stuck" wait behind its head; none of them takes a slot of a batch of 4.
    assert [r.id for r in await events.claim_due(claim(limit=4))] == others


async def test_an_earlier_row_held_by_a_concurrent_transaction_keeps_its_later_rows(
    dsn: str, events: PostgresStore
) -> None:
    first, second, other = await publish_keys(dsn, "tenant-1", "tenant-1", "tenant-2")
    async with await psycopg.AsyncConnection.connect(dsn) as sibling, sibling.transaction():
        # Another claim of the first row, not committed yet: locked, and still due.
        await sibling.execute("SELECT id FROM outbox_event WHERE id = %s FOR UPDATE", (first,))
        assert [r.id for r in await events.claim_due(claim())] == [other]
    assert [r.id for r in await events.claim_due(claim())] == [first, second]


async def test_rows_come_back_in_id_order_even_when_an_earlier_one_was_due_later(
    dsn: str, events: PostgresStore
) -> None:
    first, second = await publish_keys(dsn, "tenant-1", "tenant-1")
    taken = await events.claim_due(claim(limit=1))
    await retry(events, first, taken[0].token, timedelta(seconds=30))
    # The first is now due 30 s after the second; the claim still hands them out by id.
    later = await db_now(dsn) + timedelta(minutes=1)
    assert [r.id for r in await events.claim_due(claim(now=later))] == [first, second]


async def test_a_failed_row_does_not_block_its_key(dsn: str, events: PostgresStore) -> None:
    first, second = await publish_keys(dsn, "tenant-1", "tenant-1")
    taken = await events.claim_due(claim(limit=1))
    failed = Mark(first, taken[0].token, Status.FAILED, reason="undeliverable: not an event")
    assert await events.mark_if_pending(failed) is MarkResult.APPLIED
    assert [r.id for r in await events.claim_due(claim())] == [second]


def test_only_the_ordered_table_gets_the_per_key_claim() -> None:
    claim_sql = statements.CLAIM
    ordered = claim_forms.per_key_order(claim_sql, "partition_key")
    assert 'earlier."partition_key"' in ordered
    assert "ORDER BY next_attempt_at" not in ordered
    # Every other table's claim is the template as it was (the deliveries keep their legacy branch).
    assert statements.render(claim_sql, outbox_message) == statements.render(
        statements.CLAIM, outbox_message
    )
    for table in (outbox_message, outbox_webhook):
        assert "earlier" not in statements.render(claim_sql, table)
    assert "earlier" not in claim_forms.legacy_null_due(claim_sql)
    assert outbox_webhook_delivery.info.get("leased_outbox.ordered_by") is None
    assert outbox_event.info["leased_outbox.ordered_by"] == "partition_key"


async def test_other_tables_claim_in_due_order_without_a_key(dsn: str) -> None:
    # outbox_message has no key: a row retried later does not hold the next one back.
    async with await PostgresStore.open(dsn, table=outbox_message, max_size=2) as plain:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            for n in range(2):
                await conn.execute(
                    "INSERT INTO outbox_message (lane, payload) VALUES ('events', %s::jsonb)",
                    (f'{{"n": {n}}}',),
                )
        taken = await plain.claim_due(claim(limit=1))
        await retry(plain, int(taken[0].id), taken[0].token, timedelta(hours=1))
        assert len(await plain.claim_due(claim())) == 1


def _plan_params() -> dict[str, Any]:
    """The parameters of a claim of 500 that is explained, not run."""
    return {
        "lane": LANE,
        "limit": 500,
        "lease": LEASE,
        "token": "plan-check-token",
        "now": None,
        "floor": None,
        "ahead_of": None,
    }


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)


async def test_the_claim_checks_each_candidate_s_earlier_rows_in_the_key_index(dsn: str) -> None:
    # With a backlog of 20,000 pending events over 50 keys, the second guard (every earlier
    # pending row of the key is in this claim) must probe the key-order index once per candidate,
    # not hash-join the whole pending backlog (what PostgreSQL plans for the plain NOT EXISTS at
    # this size: a claim that grows with the backlog, ~70 ms here instead of ~17).
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO outbox_event (lane, payload)"
            " SELECT 'events', jsonb_build_object('topic', 'platform-events', 'specversion', '1.0',"
            " 'id', 'e-' || n, 'source', 'test', 'type', 't.happened', 'subject',"
            " 'tenant-' || (n % 50), 'time', now(), 'datacontenttype', 'application/json',"
            " 'data', '{}'::jsonb)"
            " FROM generate_series(1, 20000) AS n"
        )
        await conn.execute("ANALYZE outbox_event")
        claim_sql = statements.render(
            claim_forms.per_key_order(statements.CLAIM, "partition_key"), outbox_event
        )
        params = _plan_params()
        row = await (await conn.execute("EXPLAIN (FORMAT JSON) " + claim_sql, params)).fetchone()
    assert row is not None
    nodes = list(_plan_nodes(row[0][0]["Plan"]))
    update = next(n for n in nodes if n["Node Type"] == "ModifyTable")
    under_update = list(_plan_nodes(update))
    scans = {
        (n["Node Type"], n.get("Index Name")) for n in under_update if "Scan" in n["Node Type"]
    }
    assert ("Seq Scan", None) not in scans, scans
    assert not [n for n in under_update if n["Node Type"] == "Hash Join"], scans
    assert any(
        n.get("Index Name") == "ix_outbox_event_key_order"
        and n.get("Parent Relationship") == "SubPlan"
        for n in under_update
    ), scans


async def test_the_claim_reads_the_blocked_keys_once_not_once_a_candidate(
    dsn: str, events: PostgresStore
) -> None:
    # 300 keys whose first event waits an hour for its retry (a topic with no stream), 10 events
    # each, then 20 keys that can go: the claim takes the 200 that can go, and the work of the
    # due scan does not grow with the blocked keys' rows it passes (each of its plan nodes runs
    # once a claim; a probe per candidate ran 3,000 times). A key whose row in the middle waits
    # keeps the rows before that row claimable and the rows after it back.
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        insert = (
            "INSERT INTO outbox_event (lane, payload)"
            " SELECT 'events', jsonb_build_object('topic', 'platform-events', 'specversion',"
            " '1.0', 'id', %(prefix)s || n, 'source', 'test', 'type', 't.happened', 'subject',"
            " %(prefix)s || (n %% %(keys)s), 'time', now(), 'datacontenttype',"
            " 'application/json', 'data', '{}'::jsonb)"
            " FROM generate_series(1, %(rows)s) AS n"
        )
        await conn.execute(insert, {"prefix": "stuck-", "keys": 300, "rows": 3000})
        await conn.execute(
            "UPDATE outbox_event SET next_attempt_at = now() + interval '1 hour', attempts = 1"
            " WHERE id IN (SELECT min(id) FROM outbox_event GROUP BY partition_key)"
        )
        await conn.execute(insert, {"prefix": "go-", "keys": 20, "rows": 200})
        await conn.execute("ANALYZE outbox_event")
    before, waits, after = await publish_keys(dsn, "mixed", "mixed", "mixed")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(
            "UPDATE outbox_event SET next_attempt_at = now() + interval '1 hour' WHERE id = %s",
            (waits,),
        )
        claim_sql = statements.render(
            claim_forms.per_key_order(statements.CLAIM, "partition_key"), outbox_event
        )
        params = _plan_params()
        async with conn.transaction(force_rollback=True):
            row = await (
                await conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + claim_sql, params)
            ).fetchone()
        go = await (
            await conn.execute(
                "SELECT id FROM outbox_event WHERE partition_key LIKE 'go-%' ORDER BY id"
            )
        ).fetchall()
    assert row is not None
    due = next(n for n in _plan_nodes(row[0][0]["Plan"]) if n.get("Subplan Name") == "CTE due")
    repeated = [
        (n["Node Type"], n.get("Index Name"), n["Actual Loops"])
        for n in _plan_nodes(due)
        if n["Actual Loops"] > 1
    ]
    assert repeated == []
    taken = await events.claim_due(claim(limit=500))
    assert [r.id for r in taken] == sorted([before, *(r[0] for r in go)])
    assert after not in {r.id for r in taken}


def test_ordered_by_must_name_a_not_null_extra_column() -> None:
    from sqlalchemy import Column, MetaData, Text  # noqa: PLC0415 - this test's own

    from outbox_adapters.postgres.tables import key_order_column, queue_table  # noqa: PLC0415
    from outbox_core.errors import ConfigurationError  # noqa: PLC0415

    with pytest.raises(ConfigurationError, match="ordered_by must name one of its extra columns"):
        queue_table("q_order_a", MetaData(), Column("k", Text, nullable=False), ordered_by="lane")
    with pytest.raises(ConfigurationError, match="must be NOT NULL"):
        queue_table("q_order_b", MetaData(), Column("k", Text), ordered_by="k")
    with pytest.raises(ConfigurationError, match="not a plain lower-case SQL identifier"):
        queue_table("q_order_c", MetaData(), Column("K", Text, nullable=False), ordered_by="K")
    table = queue_table("q_order_d", MetaData(), Column("k", Text, nullable=False), ordered_by="k")
    assert key_order_column(table) == "k"
    assert key_order_column(outbox_message) is None
    with pytest.raises(LookupError, match="per_key_order can't extend it"):
        claim_forms.per_key_order("SELECT 1", "k")


def claim_ahead_of(token: ClaimToken, limit: int = 10) -> ClaimRequest:
    return ClaimRequest(
        lane=LANE,
        limit=limit,
        lease=LEASE,
        token=ClaimToken.from_entropy(secrets.token_bytes(16)),
        ahead_of=token,
    )


async def test_a_claim_ahead_takes_the_rows_that_follow_its_own_batch_and_no_one_elses(
    dsn: str, events: PostgresStore
) -> None:
    """The relay's claim ahead (ADR 0023): the rows still leased by the batch it names do not hold
    their keys back, so it takes the rows after them; a row leased by any other claim, or waiting
    for a retry, still holds its key back. (The matrix's ``event-claim-ahead-of-anyone`` mutant
    drops the token test.)"""
    a1, b1, a2, b2, c1, c2 = await publish_keys(dsn, "a", "b", "a", "b", "c", "c")
    mine = claim(limit=2)
    assert [r.id for r in await events.claim_due(mine)] == [a1, b1]
    # c1 leased by another claim (not the one the claim ahead names).
    assert [r.id for r in await events.claim_due(claim(limit=1))] == [c1]
    # Without ahead_of, every leased row holds its key back: nothing is free (c2 waits for c1).
    assert [r.id for r in await events.claim_due(claim())] == []
    ahead = await events.claim_due(claim_ahead_of(mine.token))
    assert [r.id for r in ahead] == [a2, b2]  # c2 still waits behind the other claim's c1
    assert c2 not in {r.id for r in ahead}


async def test_a_claim_ahead_still_waits_behind_a_retry_of_its_own_batch(
    dsn: str, events: PostgresStore
) -> None:
    """A row of the named batch that was marked for a retry (its lease ended by the mark) holds
    its key back from a claim ahead as from any claim."""
    a1, a2, b1, b2 = await publish_keys(dsn, "a", "a", "b", "b")
    mine = claim(limit=1)
    [first] = await events.claim_due(mine)
    assert first.id == a1
    await retry(events, a1, mine.token, timedelta(minutes=5))
    assert [r.id for r in await events.claim_due(claim_ahead_of(mine.token))] == [b1, b2]
    assert a2 not in {r.id for r in await events.claim_due(claim_ahead_of(mine.token))}
