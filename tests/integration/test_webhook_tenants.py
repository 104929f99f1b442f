"""Two tenants end to end, as docs/guides/webhooks.md ("Tenants") shows them: on PostgreSQL, with the
webhook lanes' real workers and two local receivers, each tenant's events reach its own receiver
only, signed with its own endpoint's secret; an event of a tenant without endpoints reaches no one
and is still drained."""

from __future__ import annotations

import pytest
from tests.integration.test_webhook_lanes import verified, workers
from tests.support.receivers import HttpReceiver
from tests.support.webhooks import GUARD, Webhooks, new_secret

from outbox_adapters.http import HttpxWebhookSender

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]


async def test_each_tenants_events_reach_its_own_receiver_only(wh: Webhooks) -> None:
    acme_secret, globex_secret = new_secret(), new_secret()
    with HttpReceiver() as acme_hook, HttpReceiver() as globex_hook:
        await wh.repo.add_endpoint(
            acme_hook.url(), ["invoice.*"], tenant="acme", secret=acme_secret
        )
        await wh.repo.add_endpoint(globex_hook.url(), ["*"], tenant="globex", secret=globex_secret)
        for n in range(6):
            await wh.enqueue("invoice.paid", tenant="acme", invoice=n)
            await wh.enqueue("invoice.paid", tenant="globex", invoice=100 + n)
        await wh.enqueue("invoice.line.added", tenant="acme", invoice=6)
        await wh.enqueue("user.created", tenant="acme", user=1)  # not under invoice.*
        await wh.enqueue("invoice.paid", tenant="initech", invoice=999)  # no endpoint
        async with HttpxWebhookSender(GUARD) as sender:
            stats = await workers(wh, sender).run(drain=True)

        acme = [verified(acme_secret, request) for request in acme_hook.requests]
        globex = [verified(globex_secret, request) for request in globex_hook.requests]
    assert sorted(e["data"]["invoice"] for e in acme) == list(range(7))
    assert sorted(e["data"]["invoice"] for e in globex) == [100 + n for n in range(6)]
    assert stats.drainer.dispatched == 15  # every event drained, those nobody receives too
    assert await wh.rows(
        "SELECT tenant, count(*) FROM outbox_webhook_event GROUP BY 1 ORDER BY 1"
    ) == [("acme", 8), ("globex", 6), ("initech", 1)]
