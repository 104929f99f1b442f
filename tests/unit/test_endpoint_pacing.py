"""Each endpoint's rate cap (outbox_adapters.lanes.endpoint_pacing, ADR 0018) on a fake clock.

The schedule is exact here: the fake clock moves only by the waits the registry asks for (and
by the tests' own ``advance``), so "at most N starts in any second" is checked on the starts'
recorded instants, not timed.
"""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta

from outbox_adapters.clock import FakeClock
from outbox_adapters.lanes.endpoint_pacing import EndpointPacers
from outbox_adapters.lanes.webhooks import DeliveryHandler
from outbox_adapters.memory import RecordingWebhookSender
from outbox_adapters.webhook_model import DeliveryTarget
from outbox_core.messages import ClaimedRow, ClaimToken
from outbox_core.outcomes import OutcomeKind
from outbox_core.signing import WebhookSecret

CAPPED, OTHER = 1, 2


def most_in_one_second(starts: list[float]) -> int:
    """The most starts any half-open one-second window holds."""
    return max(sum(1 for t in starts if s <= t < s + 1.0) for s in starts)


async def starts_of(
    pacers: EndpointPacers, endpoint_id: int, cap: int | None, n: int
) -> list[float]:
    starts = []
    for _ in range(n):
        assert await pacers.admit(endpoint_id, cap, math.inf) is None
        starts.append(pacers.clock.monotonic())
    return starts


async def test_a_capped_endpoint_starts_at_most_its_cap_in_any_second() -> None:
    clock = FakeClock()
    pacers = EndpointPacers(clock)
    starts = await starts_of(pacers, CAPPED, 4, 12)
    assert most_in_one_second(starts) == 4
    assert [round(b - a, 6) for a, b in itertools.pairwise(starts)] == [0.25] * 11


async def test_an_uncapped_endpoint_never_waits_and_holds_no_bucket() -> None:
    clock = FakeClock()
    pacers = EndpointPacers(clock)
    starts = await starts_of(pacers, OTHER, None, 50)
    assert set(starts) == {starts[0]}
    assert clock.sleeps == []
    assert pacers.tracked() == frozenset()


async def test_one_endpoints_backlog_does_not_slow_another() -> None:
    clock = FakeClock()
    pacers = EndpointPacers(clock)
    # The capped endpoint's next start is reserved well ahead ...
    for _ in range(3):
        assert await pacers.admit(CAPPED, 1, math.inf) is None
    at = clock.monotonic()
    # ... and another capped endpoint starts at once: each endpoint has its own bucket.
    assert await pacers.admit(OTHER, 1, math.inf) is None
    assert clock.monotonic() == at


async def test_a_delivery_whose_start_would_miss_its_deadline_is_deferred_not_failed() -> None:
    clock = FakeClock()
    pacers = EndpointPacers(clock)
    assert await pacers.admit(CAPPED, 2, math.inf) is None
    now = clock.monotonic()
    deferred = await pacers.admit(CAPPED, 2, deadline=now + 0.1)
    assert deferred is not None
    assert deferred.kind is OutcomeKind.DEFERRED
    assert deferred.retry_after == timedelta(seconds=0.5)
    assert "rate cap (2/s)" in deferred.reason
    assert "not attempted" in deferred.reason
    assert clock.monotonic() == now  # it did not wait
    # Nothing was reserved: the next delivery gets the slot the deferred one was refused.
    assert await pacers.admit(CAPPED, 2, deadline=now + 0.5) is None
    assert clock.monotonic() == now + 0.5


async def test_a_changed_cap_takes_effect_on_the_next_delivery() -> None:
    clock = FakeClock()
    pacers = EndpointPacers(clock)
    await starts_of(pacers, CAPPED, 1, 2)
    starts = await starts_of(pacers, CAPPED, 10, 5)
    assert most_in_one_second(starts) == 5  # 0.1 s apart, no longer 1 s


async def test_buckets_of_idle_endpoints_do_not_accumulate() -> None:
    clock = FakeClock()
    pacers = EndpointPacers(clock)
    for endpoint_id in range(1, 1001):
        assert await pacers.admit(endpoint_id, 1, math.inf) is None
        clock.advance(1.0)  # its one reservation has passed: it is idle from here on
        assert len(pacers.tracked()) <= 64
    assert 1000 in pacers.tracked()
    assert 1 not in pacers.tracked()


async def test_busy_endpoints_keep_their_buckets_through_a_sweep() -> None:
    clock = FakeClock()
    pacers = EndpointPacers(clock)
    for endpoint_id in range(1, 201):  # all reserved ahead, none idle
        assert await pacers.admit(endpoint_id, 1, math.inf) is None
    assert len(pacers.tracked()) == 200
    # The reservations made earliest are still ahead: the 1 s spacing of endpoint 1 holds.
    at = clock.monotonic()
    assert await pacers.admit(1, 1, at + 0.5) is not None


# --- the delivery handler defers, it never sends over the cap --------------------------------------


class _Targets:
    def __init__(self, cap: int | None) -> None:
        self.cap = cap

    async def delivery_target(self, delivery_id: int) -> DeliveryTarget:
        return DeliveryTarget(
            delivery_id=delivery_id, event_id=1, endpoint_id=CAPPED, url="https://h.example/in",
            enabled=True, secrets=(WebhookSecret.generate_from(b"k" * 32),), msg_id="msg_1",
            event_type="invoice.paid", body=b"{}", max_per_second=self.cap,
        )  # fmt: skip


def _row(row_id: int) -> ClaimedRow:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return ClaimedRow(
        id=row_id, lane="webhook_deliveries", payload={}, attempts=1,
        token=ClaimToken("tok_" + "b" * 28), lease_expires_at=now, created_at=now,
    )  # fmt: skip


async def test_the_handler_sends_what_the_cap_admits_and_defers_the_rest_unsent() -> None:
    clock = FakeClock()
    sender = RecordingWebhookSender(clock=clock)
    handler = DeliveryHandler(_Targets(cap=1), sender, clock=clock)
    budget = timedelta(seconds=1)  # it waits at most half of it: 0.5 s
    outcomes = [await handler(_row(i), budget=budget) for i in range(3)]
    assert [o.kind for o in outcomes] == [
        OutcomeKind.SENT,
        OutcomeKind.DEFERRED,
        OutcomeKind.DEFERRED,
    ]
    assert len(sender.requests) == 1
    clock.advance(1.0)
    assert (await handler(_row(9), budget=budget)).kind is OutcomeKind.SENT
    assert len(sender.requests) == 2


async def test_first_attempts_and_retries_sharing_a_registry_share_the_cap() -> None:
    clock = FakeClock()
    pacers = EndpointPacers(clock)
    sender = RecordingWebhookSender(clock=clock)
    first = DeliveryHandler(_Targets(cap=1), sender, clock=clock, pacers=pacers)
    retry = DeliveryHandler(_Targets(cap=1), sender, clock=clock, pacers=pacers)
    budget = timedelta(seconds=1)
    assert (await first(_row(1), budget=budget)).kind is OutcomeKind.SENT
    assert (await retry(_row(2), budget=budget)).kind is OutcomeKind.DEFERRED
