"""The runtime's claim ahead (``LaneConfig.claim_ahead``, the relay's default; ADR 0023), on the
in-memory store's per-key claim and the relay's handler:

- after a full claim, the next claim runs while the batch is still being published, and names
  that batch (``ClaimRequest.ahead_of``), so it can take the rows that follow the batch's rows of
  a key;
- those rows are published only when every row of the batch before them ended terminal: when one
  was retried, the batch claimed ahead is given back unsent (due at once, attempt refunded), and
  a key's events still reach the broker in their outbox order;
- a worker that stops gives back what it claimed ahead.

``test_a_batch_claimed_ahead_of_a_retry_is_given_back_unsent`` is the matrix's test for the rule
(tests/mutations/matrix.py, ``claim-ahead-past-a-retry``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from outbox_adapters.clock import FakeClock
from outbox_adapters.lanes.relay import RelayHandler, relay_lane
from outbox_adapters.memory import MemoryStore
from outbox_adapters.memory.ordering import event_key
from outbox_adapters.postgres.events import event_message, new_event
from outbox_adapters.runtime import Worker
from outbox_core.delivery import Status
from outbox_core.event_timing import RelayTiming
from outbox_core.lease import may_work_ahead
from outbox_core.messages import ClaimedRow
from outbox_core.outcomes import Outcome
from outbox_core.ports import BrokerMessage, ClaimRequest

T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
BATCH = 4


class Recording(MemoryStore):
    """The in-memory store, remembering every claim it was asked for and when."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock, ordered_by=event_key)
        self.requests: list[ClaimRequest] = []
        self.log: list[str] = []

    async def claim_due(self, request: ClaimRequest) -> Sequence[ClaimedRow]:
        self.requests.append(request)
        self.log.append("claim ahead" if request.ahead_of is not None else "claim")
        return await super().claim_due(request)


class Broker:
    """A publisher that records what it was offered (message ids in order) and answers from a
    script: each id in ``fail_once`` is refused (transient) the first time."""

    def __init__(self, log: list[str], fail_once: set[str] | None = None) -> None:
        self.log = log
        self.fail_once = set(fail_once or ())
        self.offered: list[str] = []
        self.stored: list[str] = []

    async def publish(self, message: BrokerMessage, *, budget: timedelta) -> Outcome:
        del budget
        self.offered.append(message.message_id)
        self.log.append(f"publish {message.message_id}")
        await asyncio.sleep(0.005)  # the PubAck's round trip: the claim ahead runs meanwhile
        if message.message_id in self.fail_once:
            self.fail_once.discard(message.message_id)
            return Outcome.transient("broker unavailable")
        self.stored.append(message.message_id)
        return Outcome.sent()


def _events(store: MemoryStore, keys: Sequence[str]) -> list[str]:
    ids = []
    for n, key in enumerate(keys):
        event = new_event(key=key, type="order.placed", data={"n": n})
        store.enqueue(event_message("orders", event))
        ids.append(event.id)
    return ids


def _rows_of(store: MemoryStore, ids: Sequence[str]) -> list[Any]:
    """The store's rows of the events ``ids``."""
    return [r for r in store.rows() if isinstance(r.payload, dict) and r.payload["id"] in ids]


def _worker(store: MemoryStore, broker: Broker) -> Worker:
    config = relay_lane(poll_interval=0.001, timing=RelayTiming(batch_size=BATCH))
    assert config.claim_ahead
    return Worker(store, RelayHandler(broker), config)


def _in_key_order(stored: list[str], ids: list[str], keys: Sequence[str]) -> bool:
    """Whether every key's events were stored in their outbox order."""
    for key in set(keys):
        mine = [i for i, k in zip(ids, keys, strict=True) if k == key]
        seen = [i for i in stored if i in mine]
        if seen != mine:
            return False
    return True


async def test_the_next_claim_runs_beside_the_publishes_and_names_the_batch() -> None:
    store = Recording(FakeClock(T0))
    keys = ["a", "b"] * BATCH  # two full batches: a1 b1 a2 b2 | a3 b3 a4 b4
    ids = _events(store, keys)
    broker = Broker(store.log)
    stats = await _worker(store, broker).run(drain=True)
    assert stats.dispatched == 2 * BATCH
    first, second = store.requests[0], store.requests[1]
    assert first.ahead_of is None
    assert second.ahead_of is not None  # named the first batch, whose rows it follows
    # The second claim was made before the first batch's last publish: beside it, not after.
    assert store.log.index("claim ahead") < store.log.index(f"publish {ids[BATCH - 1]}")
    # It took the rows after the first batch's rows of each key (a3 b3 a4 b4), in order.
    assert broker.stored == ids
    assert _in_key_order(broker.stored, ids, keys)


async def test_a_batch_claimed_ahead_of_a_retry_is_given_back_unsent() -> None:
    clock = FakeClock(T0)
    store = Recording(clock)
    keys = ["a", "b"] * BATCH
    ids = _events(store, keys)
    broker = Broker(store.log, fail_once={ids[0]})  # a1 is refused the first time
    worker = _worker(store, broker)
    first = await worker.run_once()
    assert (first.claimed, first.dispatched, first.retried) == (BATCH, BATCH - 2, 2)  # a1, a2
    # The claim ahead (a3 b3 a4 b4) was made, and given back unsent: a3 must not go before a1.
    assert store.log.count("claim ahead") == 1
    assert worker.stats.released == BATCH
    assert not set(broker.offered) & set(ids[BATCH:])
    given_back = _rows_of(store, ids[BATCH:])
    assert {(r.status, r.attempts, r.next_attempt_at) for r in given_back} == {
        (Status.PENDING, 0, T0)
    }
    clock.advance(timedelta(minutes=1))  # a1's retry is due
    stats = await worker.run(drain=True)
    assert stats.dispatched == 2 * BATCH  # the worker's totals: every row, once
    assert _in_key_order(broker.stored, ids, keys)
    assert {r.status for r in store.rows()} == {Status.DISPATCHED}


async def test_a_worker_that_stops_gives_back_what_it_claimed_ahead() -> None:
    store = Recording(FakeClock(T0))
    ids = _events(store, ["a", "b"] * BATCH)
    broker = Broker(store.log)
    worker = _worker(store, broker)
    await worker.run_once()
    worker.request_stop()
    await worker.run()  # stops at once: the batch claimed ahead goes back unsent
    assert store.log.count("claim ahead") == 1
    assert not set(broker.offered) & set(ids[BATCH:])
    rest = _rows_of(store, ids[BATCH:])
    assert {(r.status, r.attempts, r.claim_token) for r in rest} == {(Status.PENDING, 0, None)}


async def test_a_short_claim_claims_nothing_ahead() -> None:
    store = Recording(FakeClock(T0))
    _events(store, ["a", "b", "a"])
    await _worker(store, Broker(store.log)).run(drain=True)
    assert store.log == ["claim", *[e for e in store.log if e.startswith("publish")], "claim"]


def test_may_work_ahead_only_after_a_batch_that_ended_terminal() -> None:
    assert may_work_ahead(claimed=4, terminal=4, timed_out=False)
    assert not may_work_ahead(claimed=4, terminal=3, timed_out=False)
    assert not may_work_ahead(claimed=4, terminal=4, timed_out=True)
    with pytest.raises(ValueError, match="counts"):
        may_work_ahead(claimed=-1, terminal=0, timed_out=False)


class SlowAhead(Recording):
    """A store whose claim ahead takes a while to answer."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.asked_ahead = asyncio.Event()

    async def claim_due(self, request: ClaimRequest) -> Sequence[ClaimedRow]:
        rows = await super().claim_due(request)
        if request.ahead_of is not None:
            self.asked_ahead.set()
            await asyncio.sleep(0.3)
        return rows


async def test_a_worker_cancelled_while_it_gives_back_a_claim_ahead_is_cancelled() -> None:
    """A cancellation that arrives while the worker waits for its claim ahead (to give it back)
    is the worker's: it ends the worker, and is not taken for the claim's."""
    store = SlowAhead(FakeClock(T0))
    ids = _events(store, ["a", "b"] * BATCH)
    worker = _worker(store, Broker(store.log, fail_once={ids[0]}))
    running = asyncio.ensure_future(worker.run())
    await store.asked_ahead.wait()
    await asyncio.sleep(0.1)  # the batch (a1 refused, b1, b2) is over; the claim ahead unanswered
    assert sum(entry.startswith("publish") for entry in store.log) == 3
    running.cancel()
    done, _ = await asyncio.wait({running}, timeout=2)
    assert running in done
    assert running.cancelled()
