"""The webhook lanes end to end (ADR 0018) on real PostgreSQL and real local HTTP receivers: the
drainer's atomic fan-out, the first attempts in-process, the retry lane, 410 and 429 etiquette,
signatures checked by the ``standardwebhooks`` package, the stored snippet with no secret in it,
each attempt of a retried delivery in its attempt log."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import pytest
import standardwebhooks
from tests.support.receivers import HttpReceiver, Reply
from tests.support.webhooks import GUARD, QUICK, TIMING, Webhooks, new_secret

from outbox_adapters.http import HttpxWebhookSender
from outbox_adapters.lanes.webhook_workers import WebhookWorkers
from outbox_adapters.lanes.webhooks import delivery_lane, drain_lane
from outbox_adapters.postgres.webhooks import AsyncTenantWebhooks
from outbox_core.signing import WebhookSecret

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]


def workers(wh: Webhooks, sender: HttpxWebhookSender, **delivery: Any) -> WebhookWorkers:
    settings: dict[str, Any] = {"timing": TIMING, "backoff": QUICK, "poll_interval": 0.05}
    settings.update(delivery)
    return WebhookWorkers(
        wh.pool,
        sender,
        drain_config=drain_lane(poll_interval=0.05),
        delivery_config=delivery_lane(**settings),
    )


async def until(check: Any) -> None:
    """Wait (15 s at most) until ``await check()`` holds."""
    deadline = time.monotonic() + 15.0
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not hold within 15 s")
        await asyncio.sleep(0.05)


def verified(secret: str, request: Any) -> dict[str, Any]:
    key = base64.b64encode(WebhookSecret.parse(secret).key).decode()
    payload: dict[str, Any] = standardwebhooks.Webhook(key).verify(request.body, request.headers)
    return payload


async def test_every_event_reaches_every_subscribed_endpoint_once_signed_and_recorded(
    wh: Webhooks,
) -> None:
    secret = new_secret()
    with HttpReceiver() as hook, HttpReceiver() as other:
        first = await wh.repo.add_endpoint(
            hook.url(), ["invoice.paid"], secret=secret, tenant="acme"
        )
        await wh.repo.add_endpoint(
            other.url(), ["invoice.paid"], secret=new_secret(), tenant="acme"
        )
        await wh.repo.add_endpoint(
            other.url("/never"), ["user.created"], secret=new_secret(), tenant="acme"
        )
        for n in range(12):
            await wh.enqueue("invoice.paid", invoice=n)
        async with HttpxWebhookSender(GUARD) as sender:
            stats = await workers(wh, sender).run(drain=True)

        assert len(hook.requests) == 12
        assert len(other.requests) == 12  # and none to the endpoint of another event type
        events = [verified(secret, request) for request in hook.requests]
        assert sorted(e["data"]["invoice"] for e in events) == list(range(12))
        assert {e["type"] for e in events} == {"invoice.paid"}
        ids = {request.headers["webhook-id"] for request in hook.requests}
        assert len(ids) == 12
    assert stats.drainer.dispatched == 12
    assert stats.drainer.stale_marks == 0  # handler-owns-mark: no second, stale, mark
    assert stats.first_attempts.dispatched == 24
    assert await wh.rows("SELECT status, count(*) FROM outbox_webhook GROUP BY 1") == [
        ("dispatched", 12)
    ]
    delivered = await wh.rows(
        "SELECT status, attempts, count(*) FROM outbox_webhook_delivery WHERE endpoint_id = %s"
        " GROUP BY 1, 2",
        first.id,
    )
    assert delivered == [("dispatched", 1, 12)]
    assert await wh.rows("SELECT count(*) FROM outbox_stale_marks") == [(0,)]


async def test_a_410_fails_the_delivery_disables_the_endpoint_tells_its_owner_once_and_later_events_skip_it(
    wh: Webhooks,
) -> None:
    with HttpReceiver(then=Reply.status(410)) as gone:
        endpoint = await wh.repo.add_endpoint(
            gone.url(),
            ["invoice.paid"],
            secret=new_secret(),
            owner_email="owner@example.org",
            tenant="acme",
        )
        await wh.enqueue("invoice.paid", invoice=1)
        await wh.enqueue("invoice.paid", invoice=2)
        async with HttpxWebhookSender(GUARD) as sender:
            await workers(wh, sender).run(drain=True)
            after = await wh.repo.endpoint(endpoint.id)
            assert after is not None
            assert not after.enabled
            assert after.disabled_reason == "endpoint gone (status 410)"
            await wh.enqueue("invoice.paid", invoice=3)
            await workers(wh, sender).run(drain=True)
        posted = len(gone.requests)
    # The two first attempts may both have been sent; one sent after the disable is skipped.
    delivered = await wh.rows("SELECT status, last_error FROM outbox_webhook_delivery ORDER BY 1")
    assert (
        delivered
        == [("dispatched", None)] * (2 - posted)
        + [("failed", "endpoint gone (status 410)")] * posted
    )
    assert await wh.rows("SELECT count(*) FROM outbox_webhook_event") == [(3,)]
    # The owner is told once, through the e-mail outbox, by the lane's own notice.
    ((payload, key),) = await wh.rows("SELECT payload, idempotency_key FROM outbox_message")
    assert payload["to"] == "owner@example.org"
    assert payload["reason"] == "endpoint gone (status 410)"
    assert key.startswith(f"webhook-endpoint-{endpoint.id}-disabled-")


async def test_a_500_is_retried_by_the_retry_lane_on_the_schedule_and_then_delivered(
    wh: Webhooks,
) -> None:
    secret = new_secret()
    with HttpReceiver(Reply.status(500), Reply.status(500)) as hook:
        await wh.repo.add_endpoint(hook.url(), ["invoice.paid"], secret=secret, tenant="acme")
        await wh.enqueue("invoice.paid", invoice=1)
        async with HttpxWebhookSender(GUARD) as sender:
            pipeline = workers(wh, sender)
            task = asyncio.create_task(pipeline.run())
            try:
                await until(lambda: _statuses(wh, "dispatched"))
            finally:
                pipeline.request_stop()
                stats = await task
        assert len(hook.requests) == 3
        assert len({r.headers["webhook-id"] for r in hook.requests}) == 1  # one id, every try
        for request in hook.requests:  # each attempt signed, each signature verifies
            verified(secret, request)
    assert stats.first_attempts.retried == 1
    assert stats.retries.retried == 1
    assert stats.retries.dispatched == 1
    assert await wh.rows("SELECT attempts FROM outbox_webhook_delivery") == [(3,)]
    # Each attempt is in the delivery's attempt log, oldest first, as the host API lists it.
    async with wh.pool.connection() as conn:
        (endpoint,) = await wh.repo.list_endpoints()
        [delivery] = await AsyncTenantWebhooks("acme", guard=GUARD).deliveries(conn, endpoint.id)
    log = delivery.attempts_log
    assert [a.status for a in log] == [500, 500, 200]
    assert [a.error is None for a in log] == [False, False, True]
    assert log[0].at <= log[1].at <= log[2].at


async def test_retry_after_on_a_429_delays_the_next_attempt_capped_at_an_hour(
    wh: Webhooks,
) -> None:
    with HttpReceiver(Reply.rate_limited("120"), Reply.rate_limited("86400")) as hook:
        await wh.repo.add_endpoint(hook.url(), ["invoice.paid"], secret=new_secret(), tenant="acme")
        await wh.enqueue("invoice.paid", invoice=1)
        async with HttpxWebhookSender(GUARD) as sender:
            await workers(wh, sender).run(drain=True)
            [(wait,)] = await wh.rows(
                "SELECT extract(epoch FROM next_attempt_at - updated_at)"
                " FROM outbox_webhook_delivery"
            )
            assert 119 <= float(wait) <= 121  # the receiver's 120 s, not the schedule's 0.2 s
            await wh.rows("UPDATE outbox_webhook_delivery SET next_attempt_at = now() RETURNING id")
            await workers(wh, sender).run(drain=True)
        [(wait,)] = await wh.rows(
            "SELECT extract(epoch FROM next_attempt_at - updated_at) FROM outbox_webhook_delivery"
        )
        assert 3599 <= float(wait) <= 3601  # a day asked, an hour honoured
        assert len(hook.requests) == 2


async def test_the_stored_snippet_keeps_the_status_and_never_a_secret_or_signature(
    wh: Webhooks,
) -> None:
    secret = new_secret()
    leaked = secret.removeprefix("whsec_")  # a receiver echoing the bare base64 of its key
    with HttpReceiver(Reply.status(400, body=f"bad request; key={leaked}".encode())) as hook:
        await wh.repo.add_endpoint(hook.url(), ["invoice.paid"], secret=secret, tenant="acme")
        await wh.enqueue("invoice.paid", invoice=1)
        async with HttpxWebhookSender(GUARD) as sender:
            await workers(wh, sender).run(drain=True)
    [(status, payload)] = await wh.rows("SELECT status, payload FROM outbox_webhook_delivery")
    assert status == "failed"  # 400: the receiver refused it; retrying cannot help
    assert payload["last_status"] == 400
    assert payload["response"] == "bad request; key=[redacted]"


async def _statuses(wh: Webhooks, status: str) -> bool:
    rows = await wh.rows("SELECT status FROM outbox_webhook_delivery")
    return bool(rows) and all(row[0] == status for row in rows)


async def test_a_delivery_whose_endpoint_was_disabled_is_skipped_and_listed_as_missed(
    wh: Webhooks,
) -> None:
    with HttpReceiver() as hook:
        endpoint = await wh.repo.add_endpoint(
            hook.url(), ["invoice.paid"], secret=new_secret(), tenant="acme"
        )
        fan = await wh.drained("invoice.paid", invoice=5)
        await wh.repo.disable_endpoint(endpoint.id, "maintenance")
        async with HttpxWebhookSender(GUARD) as sender:
            pipeline = workers(wh, sender)
            pipeline.first_attempts.start(fan.deliveries, born_at=time.monotonic())
            await pipeline.first_attempts.wait()
        assert hook.requests == []  # nothing is sent to a disabled endpoint
    assert await wh.rows("SELECT status, last_error FROM outbox_webhook_delivery") == [
        ("skipped", "endpoint disabled; re-enable it and replay what it missed")
    ]
    missed = await wh.repo.enable_endpoint(endpoint.id)
    assert missed.event_ids == (fan.event_id,)
