"""The webhook-outbox drainer's claim on real PostgreSQL: the two locks of ADR 0004 and ADR 0006
that keep two drainers (a leader's successor, or a host running the lane ungated) from fanning one
event out twice, shown on ``outbox_webhook`` itself.

- The lease stamp: two drainers claiming at once take every row exactly once (red without the
  stamp: a claimed row stays due and the other drainer takes it again).
- ``FOR UPDATE SKIP LOCKED``: a claim passes over rows a sibling's transaction holds and takes
  them once it ends (red without SKIP LOCKED: the claim waits on the lock until ``lock_timeout``).

Each test is the named test of a mutant in tests/mutations/matrix.py.
"""

from __future__ import annotations

import asyncio
import collections

import psycopg
import pytest
from tests.support.webhooks import LEASE, Webhooks, token

from outbox_adapters.postgres import PostgresStore
from outbox_adapters.postgres.webhooks import WEBHOOK_LANE, outbox_webhook
from outbox_core.messages import Mark
from outbox_core.ports import ClaimRequest, MarkResult

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

ROUNDS = 5
EVENTS = 10


def claim(limit: int = EVENTS) -> ClaimRequest:
    return ClaimRequest(lane=WEBHOOK_LANE, limit=limit, lease=LEASE, token=token())


async def events(wh: Webhooks, count: int = EVENTS) -> list[int]:
    """``count`` webhook events written by the host's enqueue; their outbox row ids."""
    return [await wh.enqueue("invoice.paid", invoice=n) for n in range(count)]


async def test_two_drainers_claiming_at_once_take_every_webhook_outbox_row_exactly_once(
    dsn: str, wh: Webhooks
) -> None:
    async with await PostgresStore.open(dsn, table=outbox_webhook, max_size=2) as sibling:
        for _ in range(ROUNDS):
            await wh.rows("DELETE FROM outbox_webhook RETURNING id")
            ids = await events(wh)
            seen: collections.Counter[int | str] = collections.Counter()
            start = asyncio.Event()

            async def drainer(
                store: PostgresStore,
                seen: collections.Counter[int | str] = seen,
                start: asyncio.Event = start,
            ) -> None:
                await start.wait()
                for _ in range(8):
                    for row in await store.claim_due(claim(limit=3)):
                        seen[row.id] += 1
                    await asyncio.sleep(0)

            tasks = [asyncio.create_task(drainer(wh.outbox)), asyncio.create_task(drainer(sibling))]
            start.set()
            await asyncio.gather(*tasks)
            assert sorted(seen) == ids
            assert set(seen.values()) == {1}, f"webhook outbox rows claimed twice: {seen}"
            attempts = await wh.rows("SELECT DISTINCT attempts FROM outbox_webhook")
            assert attempts == [(1,)]


async def test_the_drainer_s_claim_passes_over_rows_a_sibling_holds_and_takes_them_after(
    dsn: str, wh: Webhooks
) -> None:
    ids = await events(wh)
    held, free = ids[::2], ids[1::2]
    async with await psycopg.AsyncConnection.connect(dsn) as sibling:
        await sibling.execute(
            "SELECT id FROM outbox_webhook WHERE id = ANY(%s) FOR UPDATE", (held,)
        )
        try:
            first = await asyncio.wait_for(wh.outbox.claim_due(claim()), timeout=5)
        except (psycopg.errors.LockNotAvailable, TimeoutError):
            pytest.fail("the drainer's claim waited on rows a sibling transaction holds")
        assert sorted(row.id for row in first) == free
        for row in first:  # the drainer fans them out: its mark of each outbox row
            (fan_out,) = await wh.repo.fan_out_many([row], birth_lease=LEASE, birth_token=token())
            assert fan_out.marked
        await sibling.rollback()
    second = await wh.outbox.claim_due(claim())
    assert sorted(row.id for row in second) == held
    for row in second:
        assert await wh.outbox.mark_if_pending(Mark.dispatched(row, scrub_keys=frozenset())) is (
            MarkResult.APPLIED
        )
    assert await wh.outbox.claim_due(claim()) == []
