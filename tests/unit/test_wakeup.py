"""Wake-ups (B3) over the in-memory fakes: a worker with a 30 s poll sends at once when woken.

The PostgreSQL side (NOTIFY in the enqueue transaction, the LISTEN connection) is tested in
tests/integration/test_notify.py; here: the worker's use of the signal, which is the same there.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from outbox_adapters.clock import FakeClock
from outbox_adapters.lanes.email import email_lane
from outbox_adapters.memory import MemoryLeaderLease, MemoryStore, RecordingHandler
from outbox_adapters.runtime import Worker
from outbox_adapters.wakeup import LaneWakeup, Wakeup, WakeupHub
from outbox_core.messages import ClaimedRow, NewMessage
from outbox_core.outcomes import Outcome
from outbox_core.ports import ClaimRequest, LeaderTerm

T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
#: Long enough that a test which passes cannot have been served by the poll.
SLOW_POLL = email_lane(poll_interval=30.0)


class Notifying(RecordingHandler):
    """Records calls and sets an event on each."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = asyncio.Event()

    async def __call__(self, row: ClaimedRow, *, budget: timedelta) -> Outcome:
        self.sent.set()
        return await super().__call__(row, budget=budget)


async def run_until_sent(worker: Worker, handler: Notifying, produce: object) -> None:
    """Start ``worker``, let it go idle, call ``produce()``, and wait (1 s at most) for a send."""
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0.05)  # it claimed nothing and sleeps for 30 s
        assert handler.calls == []
        produce()  # type: ignore[operator]
        async with asyncio.timeout(1):
            await handler.sent.wait()
    finally:
        worker.request_stop()
        await asyncio.wait_for(running, timeout=5)


async def test_an_enqueue_wakes_an_idle_worker_at_once() -> None:
    store = MemoryStore(clock=FakeClock(T0))
    handler = Notifying()
    worker = Worker(store, handler, SLOW_POLL, clock=FakeClock(T0), wakeup=store.wakeup("email"))
    await run_until_sent(worker, handler, lambda: store.enqueue(NewMessage("email", {"n": 1})))
    assert len(handler.calls) == 1


async def test_an_enqueue_from_another_thread_wakes_it_too() -> None:
    store = MemoryStore(clock=FakeClock(T0))
    handler = Notifying()
    worker = Worker(store, handler, SLOW_POLL, clock=FakeClock(T0), wakeup=store.wakeup("email"))

    def from_a_thread() -> None:
        producer = threading.Thread(target=store.enqueue, args=(NewMessage("email", {"n": 1}),))
        producer.start()
        producer.join()

    await run_until_sent(worker, handler, from_a_thread)


async def test_another_lanes_enqueue_does_not_wake_it() -> None:
    store = MemoryStore(clock=FakeClock(T0))
    signal = store.wakeup("email")
    store.enqueue(NewMessage("sms", {"n": 1}))
    assert not signal.is_set()
    store.enqueue(NewMessage("email", {"n": 1}))
    assert signal.is_set()


class EnqueueDuringClaim(MemoryStore):
    """A commit that lands while the worker's first claim is running (after it chose its rows)."""

    async def claim_due(self, request: ClaimRequest) -> Sequence[ClaimedRow]:
        rows = await super().claim_due(request)
        if self.stats.claimed_rows == 0 and not self.rows():
            self.enqueue(NewMessage("email", {"late": True}))
        return rows


async def test_a_wakeup_during_a_claim_is_not_lost() -> None:
    # The worker clears its signal BEFORE claiming; clearing after would erase this wake-up and
    # leave the row to the 30 s poll.
    store = EnqueueDuringClaim(clock=FakeClock(T0))
    handler = Notifying()
    worker = Worker(store, handler, SLOW_POLL, clock=FakeClock(T0), wakeup=store.wakeup("email"))
    running = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(1):
            await handler.sent.wait()
    finally:
        worker.request_stop()
        await asyncio.wait_for(running, timeout=5)


class AlwaysSet:
    """A signal that never clears: a worker must not spin on it where it does not claim."""

    def clear(self) -> None:
        pass

    async def wait(self) -> None:
        return None


class Broken:
    def clear(self) -> None:
        pass

    async def wait(self) -> None:
        raise ConnectionError("listener gone")


class CountingLease(MemoryLeaderLease):
    attempts = 0

    async def try_acquire(
        self, lane: str, holder: str, *, ttl: timedelta, now: datetime | None = None
    ) -> LeaderTerm | None:
        self.attempts += 1
        return await super().try_acquire(lane, holder, ttl=ttl, now=now)


async def test_a_follower_polls_for_leadership_and_ignores_wakeups() -> None:
    clock = FakeClock(T0)
    lease = CountingLease(clock=clock)
    assert await lease.try_acquire("email", "other", ttl=timedelta(seconds=30)) is not None
    lease.attempts = 0
    worker = Worker(
        MemoryStore(clock=clock),
        RecordingHandler(),
        email_lane(poll_interval=0.05),
        clock=clock,
        leader=lease,
        holder="me",
        wakeup=AlwaysSet(),
    )
    running = asyncio.create_task(worker.run())
    await asyncio.sleep(0.3)
    worker.request_stop()
    await asyncio.wait_for(running, timeout=5)
    assert 1 <= lease.attempts <= 10  # one try per poll interval, not a busy loop


async def test_a_broken_wakeup_degrades_to_polling() -> None:
    store = MemoryStore(clock=FakeClock(T0))
    worker = Worker(store, RecordingHandler(), email_lane(poll_interval=0.05), wakeup=Broken())
    running = asyncio.create_task(worker.run())
    await asyncio.sleep(0.3)
    worker.request_stop()
    await asyncio.wait_for(running, timeout=5)
    assert 1 <= worker.stats.batches <= 10  # claims once per poll interval, doesn't spin


def test_the_shipped_signal_satisfies_the_worker_protocol() -> None:
    assert isinstance(LaneWakeup("email"), Wakeup)
    assert isinstance(AlwaysSet(), Wakeup)


async def test_the_hub_wakes_every_live_subscriber_and_forgets_dropped_ones() -> None:
    hub = WakeupHub()
    first, second, other = hub.subscribe("email"), hub.subscribe("email"), hub.subscribe("sms")
    hub.wake("email")
    assert first.is_set()
    assert second.is_set()
    assert not other.is_set()
    hub.wake_all()
    assert other.is_set()
    gone = weakref.ref(first)
    del first
    gc.collect()
    assert gone() is None  # held weakly: a worker that is gone takes its signal with it
    hub.wake("email")
    assert second.is_set()
