"""The batched fan-out on real PostgreSQL (ADR 0017, 0018): a claimed batch of webhook-outbox rows
fans out in ONE transaction, and every promise of the one-row fan-out still holds per row: each
row fenced by its own claim token, a stale row dropped without touching the others, one event per
outbox row, born-leased deliveries, nothing written when a statement of the batch fails.

The deliveries and the webhook outbox are claimed and marked through the one ``PostgresStore``;
reads go around it (plain SQL), so each test checks what PostgreSQL holds.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from tests.support.receivers import HttpReceiver, Reply
from tests.support.webhooks import BIRTH, Webhooks, new_secret, token

from outbox_adapters.http import DestinationGuard, HttpxWebhookSender
from outbox_adapters.lanes.webhook_workers import WebhookWorkers
from outbox_adapters.lanes.webhooks import delivery_lane, drain_lane
from outbox_adapters.postgres.webhooks import WEBHOOK_LANE
from outbox_adapters.postgres.webhooks import statements as webhook_statements
from outbox_adapters.postgres.webhooks.targets import TargetReads
from outbox_core.webhook_timing import FanOutTiming

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

GUARD = DestinationGuard(allow=("127.0.0.0/8",), require_https=False)


async def test_a_stale_row_in_a_batch_is_dropped_and_the_others_fan_out_in_the_same_transaction(
    wh: Webhooks,
) -> None:
    """Three rows, the middle one presented under a claim token a sibling has since replaced:
    rows 1 and 3 get their event and born deliveries, row 2 gets nothing and stays pending under
    the sibling's claim (its stale mark counted); fanned out later, it gets its one event."""
    first = await wh.endpoint("invoice.paid")
    every = await wh.endpoint("*")
    for n in range(3):
        await wh.enqueue("invoice.paid", invoice=n)
    ours = await wh.claim_outbox()
    # Our lease ran out and a sibling re-claimed all three; we still hold row 2's old claim.
    sibling = await wh.claim_outbox(now=max(r.lease_expires_at for r in ours) + BIRTH)
    assert [r.id for r in ours] == [r.id for r in sibling]
    batch = [sibling[0], ours[1], sibling[2]]
    birth = token()

    fanned = await wh.repo.fan_out_many(batch, birth_lease=BIRTH, birth_token=birth)

    assert [f.marked for f in fanned] == [True, False, True]
    assert fanned[1].event_id is None
    assert fanned[1].deliveries == ()
    for row, fan in zip(batch[::2], fanned[::2], strict=True):
        payloads = [d.payload for d in fan.deliveries if isinstance(d.payload, dict)]
        assert len(payloads) == len(fan.deliveries)
        assert sorted(p["endpoint_id"] for p in payloads) == [first, every]
        assert all(d.token == birth and d.attempts == 1 for d in fan.deliveries)
        assert all(p["event_id"] == fan.event_id for p in payloads)
        assert await wh.rows(
            "SELECT id, msg_id FROM outbox_webhook_event WHERE source_outbox_id = %s", row.id
        ) == [(fan.event_id, fan.msg_id)]
    assert len({f.msg_id for f in fanned[::2]}) == 2
    assert await wh.rows("SELECT id, status, claim_token FROM outbox_webhook ORDER BY id") == [
        (batch[0].id, "dispatched", sibling[0].token.value),
        (batch[1].id, "pending", sibling[1].token.value),
        (batch[2].id, "dispatched", sibling[2].token.value),
    ]
    assert await wh.rows("SELECT count(*) FROM outbox_webhook_delivery") == [(4,)]
    assert (await wh.outbox.lane_stats())[WEBHOOK_LANE].stale_marks == 1

    (late,) = await wh.repo.fan_out_many([sibling[1]], birth_lease=BIRTH, birth_token=token())
    assert late.marked
    assert len(late.deliveries) == 2
    assert await wh.rows(
        "SELECT source_outbox_id, count(*) FROM outbox_webhook_event GROUP BY 1 ORDER BY 1"
    ) == [(row.id, 1) for row in batch]


async def test_a_failure_inside_a_batch_s_transaction_writes_nothing_for_any_row(
    wh: Webhooks, monkeypatch: pytest.MonkeyPatch
) -> None:
    await wh.endpoint("invoice.paid")
    for n in range(4):
        await wh.enqueue("invoice.paid", invoice=n)
    rows = await wh.claim_outbox()
    with monkeypatch.context() as patch:
        patch.setattr(webhook_statements, "BORN_DELIVERIES", "SELECT simulated_failure()")
        with pytest.raises(psycopg.errors.UndefinedFunction):
            await wh.repo.fan_out_many(rows, birth_lease=BIRTH, birth_token=token())
    assert await wh.rows("SELECT count(*) FROM outbox_webhook_event") == [(0,)]
    assert await wh.rows("SELECT status, count(*) FROM outbox_webhook GROUP BY 1") == [
        ("pending", 4)
    ]
    fanned = await wh.repo.fan_out_many(rows, birth_lease=BIRTH, birth_token=token())
    assert all(f.marked and len(f.deliveries) == 1 for f in fanned)
    assert await wh.rows(
        "SELECT count(*), count(DISTINCT source_outbox_id) FROM outbox_webhook_event"
    ) == [(4, 4)]


async def test_the_drainer_fans_a_claimed_batch_out_in_one_round_and_every_delivery_goes_once(
    wh: Webhooks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default drainer: 45 events, batches of 20, so three claims and three fan-out rounds
    (20, 20, 5 rows), each round one transaction and one read of its deliveries' targets, which
    the first attempts use instead of a query each; every event reaches its endpoint once."""
    reads: list[str] = []
    one, many = TargetReads.delivery_target, TargetReads.delivery_targets

    async def read_one(self: TargetReads, delivery_id: int, **kw: Any) -> Any:
        reads.append("one")
        return await one(self, delivery_id, **kw)

    async def read_many(self: TargetReads, ids: Any, **kw: Any) -> Any:
        reads.append(f"many:{len(ids)}")
        return await many(self, ids, **kw)

    monkeypatch.setattr(TargetReads, "delivery_target", read_one)
    monkeypatch.setattr(TargetReads, "delivery_targets", read_many)
    with HttpReceiver() as hook:
        await wh.repo.add_endpoint(hook.url(), ["invoice.paid"], secret=new_secret(), tenant="acme")
        for n in range(45):
            await wh.enqueue("invoice.paid", invoice=n)
        async with HttpxWebhookSender(GUARD) as sender:
            workers = WebhookWorkers(
                wh.pool, sender, drain_config=drain_lane(poll_interval=0.05),
                delivery_config=delivery_lane(poll_interval=0.05),
            )  # fmt: skip
            stats = await workers.run(drain=True)
        assert len(hook.requests) == 45
        assert len({r.headers["webhook-id"] for r in hook.requests}) == 45
    assert (workers.fan_out.rounds, workers.fan_out.rows) == (3, 45)
    assert reads == ["many:20", "many:20", "many:5"]
    assert workers.targets.held == 0
    assert stats.drainer.dispatched == 45
    assert stats.drainer.stale_marks == 0
    assert stats.first_attempts.dispatched == 45
    assert await wh.rows("SELECT status, count(*) FROM outbox_webhook GROUP BY 1") == [
        ("dispatched", 45)
    ]
    assert await wh.rows(
        "SELECT status, attempts, count(*) FROM outbox_webhook_delivery GROUP BY 1, 2"
    ) == [("dispatched", 1, 45)]


async def test_a_drainer_configured_one_row_at_a_time_makes_a_round_per_row(wh: Webhooks) -> None:
    with HttpReceiver() as hook:
        await wh.repo.add_endpoint(hook.url(), ["invoice.paid"], secret=new_secret(), tenant="acme")
        for n in range(5):
            await wh.enqueue("invoice.paid", invoice=n)
        async with HttpxWebhookSender(GUARD) as sender:
            config = drain_lane(timing=FanOutTiming(batch_size=5), rows_in_flight=1)
            assert not config.group_marks
            workers = WebhookWorkers(
                wh.pool, sender, drain_config=config,
                delivery_config=delivery_lane(poll_interval=0.05),
            )  # fmt: skip
            await workers.run(drain=True)
        assert len(hook.requests) == 5
    assert (workers.fan_out.rounds, workers.fan_out.rows) == (5, 5)


async def test_after_a_410_the_first_attempts_still_to_come_skip_the_endpoint_not_post_on_an_old_read(
    wh: Webhooks,
) -> None:
    """Ten events in one round, their targets read by the round; the endpoint answers 410 to the
    first attempt. With first attempts one at a time, the nine after it must see the endpoint
    disabled (the 410 dropped the round's reads of it) and be skipped: one request, not ten."""
    with HttpReceiver(then=Reply.status(410)) as gone:
        endpoint = await wh.repo.add_endpoint(
            gone.url(), ["invoice.paid"], secret=new_secret(), tenant="acme"
        )
        for n in range(10):
            await wh.enqueue("invoice.paid", invoice=n)
        async with HttpxWebhookSender(GUARD) as sender:
            workers = WebhookWorkers(
                wh.pool, sender, drain_config=drain_lane(poll_interval=0.05),
                delivery_config=delivery_lane(poll_interval=0.05),
                first_attempts=1,
            )  # fmt: skip
            await workers.run(drain=True)
        assert len(gone.requests) == 1
    assert workers.fan_out.rounds == 1
    assert await wh.rows(
        "SELECT enabled FROM outbox_webhook_endpoint WHERE id = %s", endpoint.id
    ) == [(False,)]
    assert await wh.rows(
        "SELECT status, count(*) FROM outbox_webhook_delivery GROUP BY 1 ORDER BY 1"
    ) == [("failed", 1), ("skipped", 9)]
