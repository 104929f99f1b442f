"""The claim's scan floor on real PostgreSQL (``outbox_core.scan_floor``, docs/benchmarks.md "Claim
after churn"): a claim after a full batch starts its scan at the oldest due time that batch
returned, and a row that turns up below it is taken by a full scan within ``FULL_SCAN_EVERY``
claims, never left behind.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

import psycopg
import pytest

from outbox_adapters.postgres import claim_forms, statements
from outbox_adapters.postgres.store import PostgresStore
from outbox_adapters.postgres.tables import outbox_message
from outbox_core.messages import ClaimToken, Mark
from outbox_core.ports import ClaimRequest
from outbox_core.scan_floor import FULL_SCAN_EVERY

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

LANE = "email"
LIMIT = 10


def claim() -> ClaimRequest:
    token = ClaimToken.from_entropy(secrets.token_bytes(16))
    return ClaimRequest(lane=LANE, limit=LIMIT, lease=timedelta(minutes=5), token=token)


def insert(dsn: str, count: int, *, ago: timedelta) -> list[int]:
    """``count`` due rows, due ``ago`` before the database's now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [
            conn.execute(
                "INSERT INTO outbox_message (lane, payload, next_attempt_at)"
                " VALUES (%s, '{}'::jsonb, now() - %s) RETURNING id",
                (LANE, ago),
            ).fetchone()[0]  # type: ignore[index]
            for _ in range(count)
        ]


async def test_a_row_below_the_floor_is_claimed_within_a_full_scan_while_a_backlog_lasts(
    dsn: str, store: PostgresStore
) -> None:
    backlog = insert(dsn, 30 * LIMIT, ago=timedelta(minutes=1))
    first = await store.claim_due(claim())
    assert len(first) == LIMIT  # a full batch: the next claim starts at its oldest due time
    # Written now with a due time older than every row the floor lets through (a producer
    # transaction that began earlier, a row given back with its old time).
    (late,) = insert(dsn, 1, ago=timedelta(hours=1))
    batches: list[list[int]] = []
    for _ in range(FULL_SCAN_EVERY):
        rows = await store.claim_due(claim())
        assert len(rows) == LIMIT  # the backlog keeps every claim full
        batches.append([int(row.id) for row in rows])
        if late in batches[-1]:
            break
        for row in rows:
            await store.mark_if_pending(Mark.dispatched(row, scrub_keys=frozenset()))
    # The floor is in force: the next claim started past the late row (a claim without a floor
    # takes the oldest due row first) ...
    assert late not in batches[0]
    # ... and a full scan took it within FULL_SCAN_EVERY claims.
    assert late in batches[-1], f"a row below the floor was left behind for {len(batches)} claims"
    assert {i for batch in batches for i in batch} - {late} <= set(backlog)


async def test_claims_that_come_back_short_scan_from_the_start(dsn: str, store: PostgresStore):
    insert(dsn, LIMIT, ago=timedelta(minutes=1))
    assert len(await store.claim_due(claim())) == LIMIT
    assert await store.claim_due(claim()) == []  # short (nothing left above the floor or below)
    (late,) = insert(dsn, 1, ago=timedelta(hours=1))
    assert [int(row.id) for row in await store.claim_due(claim())] == [late]


def test_only_the_plain_claim_has_a_floor() -> None:
    plain = statements.render(statements.CLAIM, outbox_message)
    assert "%(floor)s" in plain
    assert claim_forms.FLOOR_TEST not in claim_forms.legacy_null_due(statements.CLAIM)
    assert claim_forms.FLOOR_TEST not in claim_forms.per_key_order(
        statements.CLAIM, "partition_key"
    )
