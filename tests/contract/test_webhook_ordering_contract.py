"""Per-(endpoint, key) delivery order (ADR 0018), for the in-memory webhook repository and
PostgreSQL's: one suite (the ``wh`` fixture runs each case on both).

An event enqueued with an ordering key has its deliveries attempted in event order with the other
events of its key, per endpoint: a delivery is neither born leased to a first attempt nor claimed
while an earlier delivery of its (endpoint, key) is pending (claimed, waiting for a retry, or
waiting its turn). A delivered or terminally failed one lets the next go; a keyless delivery,
another key, and the same key to another endpoint wait for nothing. A replay is a new, latest
event of its key.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from tests.support.webhooks import BIRTH, token

from outbox_core.errors import InvalidMessage
from outbox_core.messages import ClaimedRow, Mark

RETRY = timedelta(seconds=5)
LATER = timedelta(seconds=30)


async def fan_out(wh: Any, *keys: str | None) -> list[Any]:
    """Enqueue one event per key (``None``: keyless), claim them all and fan them out in one
    batch: the ``FanOut`` of each, in order."""
    for n, key in enumerate(keys):
        await wh.enqueue("invoice.paid", ordering_key=key, invoice=n)
    rows = await wh.claim_outbox()
    assert len(rows) == len(keys)
    return list(await wh.repo.fan_out_many(rows, birth_lease=BIRTH, birth_token=token()))


def event_of(delivery: ClaimedRow) -> int:
    payload = delivery.payload
    assert isinstance(payload, dict)
    return int(payload["event_id"])


async def test_a_later_delivery_of_a_key_waits_until_the_earlier_one_is_delivered_or_terminal(wh):
    await wh.endpoint("invoice.paid")
    first, second, third = await fan_out(wh, "customer-1", "customer-1", "customer-1")
    # Only the head is born leased to a first attempt; the others are born waiting (not attempted).
    (head,) = first.deliveries
    assert second.deliveries == third.deliveries == ()
    assert await wh.delivery_count() == 3
    now = await wh.now()
    assert await wh.claim_deliveries(now=now + LATER) == []  # the head is leased: nothing behind

    # The first attempt fails with a retry: the head waits out its backoff, and so do the others.
    await wh.deliveries.mark_if_pending(Mark.retry(head, "HTTP 503", delay=RETRY))
    assert await wh.claim_deliveries(now=now) == []
    (retried,) = await wh.claim_deliveries(now=now + LATER)
    assert retried.id == head.id  # the retry, and nothing of the later events
    assert await wh.claim_deliveries(now=now + LATER) == []

    # Delivered: the second goes, and only it.
    await wh.deliveries.mark_if_pending(Mark.dispatched(retried, scrub_keys=frozenset()))
    (two,) = await wh.claim_deliveries(now=now + LATER)
    assert event_of(two) == second.event_id

    # Failed for good: the third goes (a dead-lettered delivery does not hold its key for ever).
    await wh.deliveries.mark_if_pending(Mark.failed(two, "HTTP 400"))
    (three,) = await wh.claim_deliveries(now=now + LATER)
    assert event_of(three) == third.event_id


async def test_other_keys_other_endpoints_and_keyless_deliveries_are_not_blocked(wh):
    one = await wh.endpoint("invoice.paid")
    two = await wh.endpoint("*")
    fans = await fan_out(wh, "a", "a", "b", None, None)
    # Born leased: both endpoints' first "a", the "b" and both keyless, at once; the second "a"
    # waits behind the first on each endpoint.
    born = sorted((event_of(d), d.payload["endpoint_id"]) for f in fans for d in f.deliveries)
    assert born == sorted(
        (f.event_id, endpoint) for f in (fans[0], *fans[2:]) for endpoint in (one, two)
    )
    held = {(event_of(d), d.payload["endpoint_id"]): d for f in fans for d in f.deliveries}
    now = await wh.now()
    # The first "a" to endpoint one fails with a retry; every other born delivery is delivered.
    for (event, endpoint), delivery in held.items():
        mark = (
            Mark.retry(delivery, "HTTP 503", delay=timedelta(hours=1))
            if (event, endpoint) == (fans[0].event_id, one)
            else Mark.dispatched(delivery, scrub_keys=frozenset())
        )
        await wh.deliveries.mark_if_pending(mark)
    # The second "a" goes to endpoint two (its key's head there is delivered), not to endpoint one.
    (claimed,) = await wh.claim_deliveries(now=now + LATER)
    assert (event_of(claimed), claimed.payload["endpoint_id"]) == (fans[1].event_id, two)
    # A new keyless event and a new "b" are born leased while "a" is stuck on endpoint one.
    later = await fan_out(wh, None, "b")
    assert all(len(f.deliveries) == 2 for f in later)


async def test_a_delivery_is_born_waiting_behind_a_pending_one_of_an_earlier_fan_out(wh):
    await wh.endpoint("invoice.paid")
    (first,) = await fan_out(wh, "k")
    (second,) = await fan_out(wh, "k")
    assert len(first.deliveries) == 1
    assert second.deliveries == ()  # not leased: no first attempt while the first is pending
    await wh.deliveries.mark_if_pending(
        Mark.dispatched(first.deliveries[0], scrub_keys=frozenset())
    )
    (claimed,) = await wh.claim_deliveries()  # born waiting = due now: the retry lane takes it
    assert event_of(claimed) == second.event_id
    assert claimed.attempts == 1  # its first attempt


async def test_two_concurrent_claimers_never_hold_two_deliveries_of_one_key_and_order_is_kept(wh):
    await wh.endpoint("invoice.paid")
    keys = [f"k{n}" for n in range(3)]  # 9 events: one claim of the outbox (10) takes them
    fans = await fan_out(wh, *(key for _ in range(3) for key in keys))
    # Hand the born heads back (a retry due at once), so every delivery is up for a claim.
    for fan in fans:
        for delivery in fan.deliveries:
            await wh.deliveries.mark_if_pending(Mark.retry(delivery, "HTTP 503", delay=timedelta()))
    key_of = {fan.event_id: keys[n % len(keys)] for n, fan in enumerate(fans)}
    attempted: dict[str, list[int]] = {key: [] for key in keys}
    while any(len(events) < 3 for events in attempted.values()):
        claims = await asyncio.gather(wh.claim_deliveries(), wh.claim_deliveries())
        held = [event_of(d) for claim in claims for d in claim]
        assert held, "nothing claimable while deliveries are pending"
        held_keys = [key_of[event] for event in held]
        assert len(held_keys) == len(set(held_keys)), f"two deliveries of one key held: {held}"
        for claim in claims:
            for delivery in claim:
                attempted[key_of[event_of(delivery)]].append(event_of(delivery))
                await wh.deliveries.mark_if_pending(
                    Mark.dispatched(delivery, scrub_keys=frozenset())
                )
    for key in keys:
        assert attempted[key] == sorted(f.event_id for f in fans if key_of[f.event_id] == key)


async def test_a_replay_is_the_latest_event_of_its_key(wh):
    await wh.endpoint("invoice.paid")
    old, pending = await fan_out(wh, "k", "k")
    await wh.deliveries.mark_if_pending(Mark.dispatched(old.deliveries[0], scrub_keys=frozenset()))
    (waiting,) = await wh.claim_deliveries()
    assert event_of(waiting) == pending.event_id
    # The old event replayed while the later one is in flight: born waiting, behind it.
    replay = await wh.repo.replay(old.event_id, birth_lease=BIRTH, birth_token=token())
    assert replay.deliveries == ()
    assert await wh.claim_deliveries() == []
    await wh.deliveries.mark_if_pending(Mark.dispatched(waiting, scrub_keys=frozenset()))
    (replayed,) = await wh.claim_deliveries()
    assert event_of(replayed) == replay.event_id
    # A replay with nothing of its key pending is born leased like any first attempt.
    await wh.deliveries.mark_if_pending(Mark.dispatched(replayed, scrub_keys=frozenset()))
    again = await wh.repo.replay(pending.event_id, birth_lease=BIRTH, birth_token=token())
    assert len(again.deliveries) == 1


@pytest.mark.parametrize("bad", ["", "x" * 201, "a\nb", "nul\x00", "c1\x85", 42, b"bytes"])
async def test_a_bad_ordering_key_is_refused_at_enqueue_and_nothing_is_written(wh, bad):
    with pytest.raises(InvalidMessage, match="ordering key"):
        await wh.enqueue("invoice.paid", ordering_key=bad)
    assert await wh.claim_outbox() == []
    await wh.enqueue("invoice.paid", ordering_key="é" * 200)  # 200 characters of text: fine
    assert len(await wh.claim_outbox()) == 1
