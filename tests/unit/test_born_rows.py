"""First attempts of born-leased rows (runtime/born.py) over the in-memory store: the same batch
runner as a claimed batch, its lease being the birth lease."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from outbox_adapters.clock import FakeClock
from outbox_adapters.memory import MemoryStore, RecordingHandler
from outbox_adapters.runtime import LaneConfig
from outbox_adapters.runtime.born import BornRows
from outbox_core.backoff import WEBHOOK_BACKOFF
from outbox_core.delivery import Status
from outbox_core.errors import ConfigurationError
from outbox_core.messages import ClaimedRow, ClaimToken, NewMessage
from outbox_core.outcomes import Outcome
from outbox_core.ports import ClaimRequest
from outbox_core.timing import WebhookTiming

T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
LANE = "webhook_deliveries"
TIMING = WebhookTiming()
BIRTH = TIMING.birth_lease


def config() -> LaneConfig:
    return LaneConfig(lane=LANE, timing=TIMING, backoff=WEBHOOK_BACKOFF)


async def born(store: MemoryStore, count: int) -> list[ClaimedRow]:
    """``count`` rows written and claimed at once under the birth lease (what a fan-out writes)."""
    for n in range(count):
        store.enqueue(NewMessage(LANE, {"n": n}))
    token = ClaimToken("birth" + "0" * 27)
    return list(await store.claim_due(ClaimRequest(LANE, count, BIRTH, token)))


async def test_each_first_attempt_is_sent_once_and_marked_under_its_birth_token() -> None:
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    rows = await born(store, 5)
    handler = RecordingHandler(default=Outcome.sent())
    first = BornRows(store, handler, config(), lease=BIRTH, clock=clock, jitter=lambda: 0.5)
    first.start(rows, born_at=clock.monotonic())
    assert first.running == 5
    await first.wait()

    assert sorted(call.row.id for call in handler.calls) == sorted(r.id for r in rows)
    assert {row.status for row in store.rows()} == {Status.DISPATCHED}
    assert first.stats.dispatched == 5
    assert first.running == 0


async def test_a_failed_first_attempt_is_left_to_the_retry_lane_on_the_webhook_schedule() -> None:
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    [row] = await born(store, 1)
    handler = RecordingHandler(default=Outcome.transient("receiver error: 500"))
    first = BornRows(store, handler, config(), lease=BIRTH, clock=clock, jitter=lambda: 0.5)
    first.start([row], born_at=clock.monotonic())
    await first.wait()

    stored = await store.get(row.id)
    assert stored is not None
    assert (stored.status, stored.attempts) == (Status.PENDING, 1)
    assert stored.next_attempt_at == T0 + timedelta(seconds=5)  # WEBHOOK_BACKOFF's first wait


async def test_a_row_that_can_no_longer_end_inside_its_birth_lease_is_given_back_unsent() -> None:
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    [row] = await born(store, 1)
    handler = RecordingHandler(default=Outcome.sent())
    first = BornRows(store, handler, config(), lease=BIRTH, clock=clock, jitter=lambda: 0.5)
    born_at = clock.monotonic()
    # The process stalled: less than one attempt's budget is left of the birth lease.
    clock.advance(BIRTH - TIMING.per_attempt + timedelta(seconds=1))
    first.start([row], born_at=born_at)
    await first.wait()

    assert handler.calls == []
    stored = await store.get(row.id)
    assert stored is not None
    assert (stored.status, stored.attempts) == (Status.PENDING, 0)  # due now, attempt refunded
    assert first.stats.released == 1


async def test_first_attempts_run_at_most_in_flight_at_once() -> None:
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    rows = await born(store, 6)
    running = 0
    most = 0

    async def send(row: ClaimedRow, *, budget: timedelta) -> Outcome:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1
        return Outcome.sent()

    first = BornRows(store, send, config(), lease=BIRTH, clock=clock, in_flight=2)
    first.start(rows, born_at=clock.monotonic())
    await first.wait()
    assert most == 2
    assert first.stats.dispatched == 6


def test_a_birth_lease_shorter_than_one_attempt_is_refused() -> None:
    store = MemoryStore()
    with pytest.raises(ConfigurationError, match="cannot hold one attempt"):
        BornRows(store, RecordingHandler(), config(), lease=timedelta(seconds=5))
    with pytest.raises(ConfigurationError, match="in_flight"):
        BornRows(store, RecordingHandler(), config(), lease=BIRTH, in_flight=0)
