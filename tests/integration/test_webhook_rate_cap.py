"""An endpoint's rate cap end to end (ADR 0018) on real PostgreSQL and real local HTTP receivers:
an endpoint capped at N a second receives at most N requests in any second, first attempts and
retries together, while an uncapped endpoint of the same run is delivered at once; the deliveries
the cap held back were deferred unattempted (attempts refunded), so none of them ends ``failed``
even on a schedule of three attempts, and none of them is in a delivery's attempt log.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from tests.support.receivers import HttpReceiver
from tests.support.webhooks import GUARD, QUICK, TIMING, Webhooks, new_secret

from outbox_adapters.http import HttpxWebhookSender
from outbox_adapters.lanes.webhook_workers import WebhookWorkers
from outbox_adapters.lanes.webhooks import delivery_lane, drain_lane
from outbox_adapters.postgres.webhooks import AsyncTenantWebhooks

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

CAP = 2
EVENTS = 8
#: The receiver reads a request a little after the sender starts it; starts spaced exactly 1/CAP
#: apart may be read up to this much closer together. The window counted is 1 s less this.
JITTER = 0.1


def most_in_a_window(times: list[float], window: float) -> int:
    """The most of ``times`` any half-open window of ``window`` seconds holds."""
    return max(sum(1 for t in times if s <= t < s + window) for s in times)


async def until(check: Any) -> None:
    """Wait (30 s at most) until ``await check()`` holds."""
    deadline = time.monotonic() + 30.0
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not hold within 30 s")
        await asyncio.sleep(0.05)


async def test_a_capped_endpoint_gets_at_most_its_cap_a_second_and_an_uncapped_one_is_not_slowed(
    wh: Webhooks,
) -> None:
    with HttpReceiver() as capped_hook, HttpReceiver() as free_hook:
        capped = await wh.repo.add_endpoint(
            capped_hook.url(),
            ["invoice.paid"],
            secret=new_secret(),
            max_per_second=CAP,
            tenant="acme",
        )
        free = await wh.repo.add_endpoint(
            free_hook.url(), ["invoice.paid"], secret=new_secret(), tenant="acme"
        )
        for n in range(EVENTS):
            await wh.enqueue("invoice.paid", invoice=n)
        async with HttpxWebhookSender(GUARD) as sender:
            pipeline = WebhookWorkers(
                wh.pool,
                sender,
                drain_config=drain_lane(poll_interval=0.05),
                # Three attempts: a deferral that spent one would fail most capped deliveries.
                delivery_config=delivery_lane(timing=TIMING, backoff=QUICK, poll_interval=0.05),
            )
            task = asyncio.create_task(pipeline.run())
            try:
                await until(lambda: _all_dispatched(wh))
            finally:
                pipeline.request_stop()
                stats = await task
        capped_at = sorted(r.at for r in capped_hook.requests)
        free_at = sorted(r.at for r in free_hook.requests)

    assert len(capped_at) == EVENTS
    assert len(free_at) == EVENTS
    assert most_in_a_window(capped_at, 1.0 - JITTER) <= CAP
    # Not slowed: every uncapped delivery was its first attempt, and all of them arrived before
    # the capped endpoint had been sent a second second's worth.
    assert free_at[-1] < capped_at[CAP]
    by_endpoint = await wh.rows(
        "SELECT endpoint_id, status, attempts, count(*), count(last_error)"
        " FROM outbox_webhook_delivery GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
    )
    assert (free.id, "dispatched", 1, EVENTS, 0) in by_endpoint
    # The capped deliveries: all dispatched, each on the one attempt that was made (the
    # deferrals refunded theirs), none failed, no error recorded against the endpoint.
    assert [row for row in by_endpoint if row[0] == capped.id] == [
        (capped.id, "dispatched", 1, EVENTS, 0)
    ]
    assert stats.first_attempts.failed == stats.retries.failed == 0
    assert stats.first_attempts.released + stats.retries.released > 0  # the cap deferred some
    health = await wh.repo.endpoint_health(capped.id)
    assert health.failure_streak == 0
    assert health.last_failure_at is None
    # A deferral sent nothing and logged nothing: each capped delivery's log holds its one send.
    async with wh.pool.connection() as conn:
        listed = await AsyncTenantWebhooks("acme", guard=GUARD).deliveries(conn, capped.id)
    assert len(listed) == EVENTS
    assert [[a.status for a in d.attempts_log] for d in listed] == [[200]] * EVENTS


async def _all_dispatched(wh: Webhooks) -> bool:
    rows = await wh.rows("SELECT status, count(*) FROM outbox_webhook_delivery GROUP BY 1")
    return rows == [("dispatched", 2 * EVENTS)]
