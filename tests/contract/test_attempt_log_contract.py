"""A webhook delivery's attempt log (outbox_core.attempt_log), for the in-memory repository and
PostgreSQL's: the delivery handler adds each attempt's entry to the log its target read, and the
delivery's fenced mark writes it with the rest of the outcome's progress.

- a delivery answered 500, 500 and then 200 holds three entries, oldest first, with their status
  codes, errors and response snippets, whatever mark each attempt took;
- an attempt whose mark was stale (the retry worker had reclaimed the delivery) is not in it;
- a deferral (the endpoint's rate cap held the delivery back) and a disabled endpoint add no
  entry; the log keeps the last ``ATTEMPT_LOG_SIZE`` attempts.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.webhooks import QUICK

from outbox_adapters.clock import FakeClock
from outbox_adapters.lanes.webhooks import NO_SCRUB, DeliveryHandler
from outbox_adapters.memory import RecordingWebhookSender, WebhookReply
from outbox_core.attempt_log import ATTEMPT_LOG_KEY, ATTEMPT_LOG_SIZE
from outbox_core.backoff import SlotSchedule
from outbox_core.decide import decide
from outbox_core.delivery import Status
from outbox_core.messages import ClaimedRow
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.ports import MarkResult

BUDGET = timedelta(seconds=5)
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
#: A schedule longer than the log: every failed attempt of the last test is retried.
LONG = SlotSchedule((timedelta(seconds=0.2),) * (ATTEMPT_LOG_SIZE + 5), jitter_ratio=0.0)


def handler_for(wh, sender: RecordingWebhookSender, clock: FakeClock) -> DeliveryHandler:
    return DeliveryHandler(wh.repo, sender, clock=clock)


async def attempt(wh, handler: DeliveryHandler, row: ClaimedRow) -> MarkResult:
    """One attempt of ``row`` and its mark, as the lane's worker makes them."""
    outcome = await handler(row, budget=BUDGET)
    mark = decide(row, outcome, backoff=QUICK, scrub=NO_SCRUB, jitter=0.5)
    result: MarkResult = await wh.deliveries.mark_if_pending(mark)
    return result


async def reclaim(wh) -> ClaimedRow:
    """The delivery again, claimed by the retry worker once it is due (a day from now)."""
    (row,) = await wh.claim_deliveries(now=(await wh.now()) + timedelta(days=1))
    assert isinstance(row, ClaimedRow)
    return row


async def stored_log(wh, row_id: Any) -> list[dict[str, Any]]:
    stored = await wh.deliveries.get(row_id)
    assert stored is not None
    payload = stored.payload if isinstance(stored.payload, dict) else json.loads(stored.payload)
    log = payload.get(ATTEMPT_LOG_KEY, [])
    assert isinstance(log, list)
    return log


async def test_a_delivery_retried_twice_then_delivered_logs_its_three_attempts(wh):
    await wh.endpoint("invoice.paid")
    clock = FakeClock(T0)
    sender = RecordingWebhookSender(clock=clock)
    sender.script(
        WebhookReply(500, body=b"upstream exploded"), WebhookReply(500, body=b"still down"), 200
    )
    handler = handler_for(wh, sender, clock)
    (row,) = (await wh.drained()).deliveries
    assert await attempt(wh, handler, row) is MarkResult.APPLIED
    clock.advance(timedelta(minutes=1))
    assert await attempt(wh, handler, await reclaim(wh)) is MarkResult.APPLIED
    clock.advance(timedelta(minutes=1))
    assert await attempt(wh, handler, await reclaim(wh)) is MarkResult.APPLIED

    stored = await wh.deliveries.get(row.id)
    assert stored.status is Status.DISPATCHED
    log = await stored_log(wh, row.id)
    assert [e["status"] for e in log] == [500, 500, 200]
    assert [e["at"] for e in log] == [(T0 + timedelta(minutes=n)).isoformat() for n in range(3)]
    assert [e["response"] for e in log] == ["upstream exploded", "still down", None]
    assert log[0]["error"] is not None
    assert "500" in log[0]["error"]
    assert log[2]["error"] is None


async def test_an_attempt_whose_mark_was_stale_is_not_in_the_log(wh):
    await wh.endpoint("invoice.paid")
    clock = FakeClock(T0)
    sender = RecordingWebhookSender(clock=clock)
    sender.script(503, 200)
    handler = handler_for(wh, sender, clock)
    (born,) = (await wh.drained()).deliveries
    # The birth lease ran out before the first attempt's mark: the retry worker reclaimed it.
    (retry,) = await wh.claim_deliveries(now=born.lease_expires_at + timedelta(microseconds=1))
    assert await attempt(wh, handler, born) is MarkResult.STALE
    clock.advance(timedelta(minutes=1))
    assert await attempt(wh, handler, retry) is MarkResult.APPLIED
    log = await stored_log(wh, born.id)
    assert [(e["status"], e["at"]) for e in log] == [(200, (T0 + timedelta(minutes=1)).isoformat())]


async def test_a_deferred_delivery_and_a_disabled_endpoint_add_no_entry(wh):
    capped = await wh.endpoint("invoice.paid", max_per_second=1)
    clock = FakeClock(T0)
    sender = RecordingWebhookSender(clock=clock)
    handler = handler_for(wh, sender, clock)
    first, second = [(await wh.drained(invoice=n)).deliveries[0] for n in range(2)]
    assert await attempt(wh, handler, first) is MarkResult.APPLIED
    # The same instant: the cap's next start (1 s away) is past half of this attempt's budget.
    outcome = await handler(second, budget=timedelta(seconds=1))
    assert outcome.kind is OutcomeKind.DEFERRED
    assert ATTEMPT_LOG_KEY not in (outcome.progress or {})
    mark = decide(second, outcome, backoff=QUICK, scrub=NO_SCRUB, jitter=0.5)
    assert await wh.deliveries.mark_if_pending(mark) is MarkResult.APPLIED
    assert await stored_log(wh, second.id) == []
    assert [e["status"] for e in await stored_log(wh, first.id)] == [200]

    await wh.repo.disable_endpoint(capped, reason="paused by its owner")
    again = await reclaim(wh)
    assert again.id == second.id
    assert await attempt(wh, handler, again) is MarkResult.APPLIED
    stored = await wh.deliveries.get(second.id)
    assert stored.status is Status.SKIPPED
    assert await stored_log(wh, second.id) == []
    assert len(sender.requests) == 1


async def test_the_log_keeps_the_last_attempts(wh):
    await wh.endpoint("invoice.paid")
    clock = FakeClock(T0)
    total = ATTEMPT_LOG_SIZE + 2
    sender = RecordingWebhookSender(default=500, clock=clock)
    handler = handler_for(wh, sender, clock)
    (row,) = (await wh.drained()).deliveries
    for n in range(total):
        current = row if n == 0 else await reclaim(wh)
        # The marks here retry every time: the schedule's length is not what is tested.
        outcome = await handler(current, budget=BUDGET)
        mark = decide(current, outcome, backoff=LONG, scrub=NO_SCRUB, jitter=0.5)
        assert await wh.deliveries.mark_if_pending(mark) is MarkResult.APPLIED
        clock.advance(timedelta(minutes=1))
    log = await stored_log(wh, row.id)
    assert len(log) == ATTEMPT_LOG_SIZE
    assert [e["at"] for e in log] == [
        (T0 + timedelta(minutes=n)).isoformat() for n in range(total - ATTEMPT_LOG_SIZE, total)
    ]


class DeferringSender:
    """A sender (a host's own) that held the request back itself: nothing was sent."""

    async def send(self, url: str, **_kw: Any) -> Outcome:
        return Outcome.deferred(f"held back before {url}", retry_after=timedelta(seconds=1))


async def test_a_sender_s_own_deferral_adds_no_entry(wh):
    await wh.endpoint("invoice.paid")
    (row,) = (await wh.drained()).deliveries
    outcome = await DeliveryHandler(wh.repo, DeferringSender(), clock=FakeClock(T0))(
        row, budget=BUDGET
    )
    assert outcome.kind is OutcomeKind.DEFERRED
    assert outcome.progress is None
