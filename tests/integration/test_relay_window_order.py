"""Per-key order inside a relay window, on real PostgreSQL and a real NATS JetStream (ADR 0023).

The relay publishes a window's rows at once (rows of different keys on the wire together, nats-py's
asynchronous publish, each row's PubAck awaited), and a key's rows one after the other. Each test
makes one event of key ``t-1`` misbehave and reads the stream back, message by message, as
JetStream stores it:

- its PubAck comes late: the key's later event is not published before it;
- it is not acknowledged (transient): the key's later events in the window are held back
  ("an earlier event of this key is unpublished") and go out after it on the retry;
- it is stored but its send is cut off by the row's deadline: the same, and the retry's copy is
  dropped by JetStream's duplicate window (same ``Nats-Msg-Id``): stored once.

Each runs twice: with the relay as ``relay_lane()`` makes it (``chained``: the runtime sends a
key's rows of a window one after another, ``LaneConfig.key_of``) and without ``key_of``
(``handler-turns``: every row of the window started at once, the handler's own turn per key alone
keeping the order). They are the matrix's tests for ``relay-key-not-awaited`` (``handler-turns``)
and ``relay-past-a-failed-event`` (tests/mutations/matrix.py).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import attrs
import psycopg
import pytest
from tests.faults.events_proc import stream_messages

from outbox_adapters.brokers import NatsBroker
from outbox_adapters.lanes.relay import EARLIER_UNPUBLISHED, RelayHandler, event_key, relay_lane
from outbox_adapters.postgres.events import outbox_event, publish_async
from outbox_adapters.postgres.store import PostgresStore
from outbox_adapters.runtime import BatchReport, Worker
from outbox_core.backoff import SlotSchedule
from outbox_core.brokers import StreamSpec
from outbox_core.messages import ClaimedRow
from outbox_core.outcomes import Outcome
from outbox_core.ports import BrokerMessage, Publisher
from outbox_core.timing import RelayTiming

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

#: One window of the whole batch (the relay's default shape, smaller): publish 0.5 s + mark 0.5 s.
TIMING = RelayTiming(
    publish=timedelta(seconds=0.5), mark=timedelta(seconds=0.5), batch_size=20, window=20,
    lease_grace=timedelta(seconds=2),
)  # fmt: skip
QUICK = SlotSchedule((timedelta(seconds=0.1),) * 50, jitter_ratio=0.0)
#: The outbox order: three keys interleaved, t-1's first event is the one that misbehaves.
KEYS = ("t-1", "t-2", "t-1", "t-3", "t-1", "t-2", "t-1")


@pytest.fixture
async def topic(nats_url: str) -> AsyncIterator[tuple[str, NatsBroker]]:
    name = f"window-order-{secrets.token_hex(4)}"
    broker = NatsBroker(
        [nats_url], streams=[StreamSpec(name=name.upper().replace("-", "_"), subjects=(name,))]
    )
    try:
        await broker.jetstream()
        yield name, broker
    finally:
        await broker.aclose()


class Misbehaving:
    """The NATS publisher, with one message made to misbehave: ``late`` (its publish reaches the
    broker a moment later), ``unacknowledged`` (answered transient once, never sent), ``cut_off``
    (stored, then the answer never comes within the row's deadline, once)."""

    def __init__(self, inner: Publisher, target: str, how: str) -> None:
        self.inner, self.target, self.how = inner, target, how
        self.done = False
        #: Every message id offered to the publisher, in order.
        self.asked: list[str] = []

    async def publish(self, message: BrokerMessage, *, budget: timedelta) -> Outcome:
        self.asked.append(message.message_id)
        if message.message_id != self.target or self.done:
            return await self.inner.publish(message, budget=budget)
        if self.how == "late":
            await asyncio.sleep(0.1)  # long beside a PubAck; short beside the 0.5 s budget
            return await self.inner.publish(message, budget=budget)
        self.done = True
        if self.how == "unacknowledged":
            return Outcome.transient("no acknowledgement (the test's broker)")
        outcome = await self.inner.publish(message, budget=budget)
        await asyncio.sleep(budget.total_seconds() + 1)  # the row's deadline cuts this off
        return outcome


async def _write(dsn: str, topic: str) -> list[tuple[str, str]]:
    async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
        return [
            (
                key,
                (
                    await publish_async(
                        conn, topic=topic, key=key, type="tenant.provisioned", data={"n": n}
                    )
                ).event.id,
            )
            for n, key in enumerate(KEYS)
        ]


async def _stored_order(url: str, topic: str) -> list[str]:
    return [m["headers"]["Nats-Msg-Id"] for m in await stream_messages(url, topic)]


def _per_key(written: list[tuple[str, str]], order: list[str]) -> dict[str, list[str]]:
    key_of = {event_id: key for key, event_id in written}
    found: dict[str, list[str]] = {}
    for event_id in order:
        found.setdefault(key_of[event_id], []).append(event_id)
    return found


def _outbox_order(written: list[tuple[str, str]]) -> dict[str, list[str]]:
    expected: dict[str, list[str]] = {}
    for key, event_id in written:
        expected.setdefault(key, []).append(event_id)
    return expected


@pytest.fixture(params=["chained", "handler-turns"])
def key_of(request: pytest.FixtureRequest) -> Callable[[ClaimedRow], str | None] | None:
    """The relay as ``relay_lane()`` makes it (a key's rows sent one after another by the runtime),
    and without ``key_of``: every row of the window started at once, ordered by the handler's own
    turn per key alone."""
    return event_key if request.param == "chained" else None


async def _relay(
    dsn: str,
    broker: NatsBroker,
    written: list[tuple[str, str]],
    how: str,
    key_of: Callable[[ClaimedRow], str | None] | None,
) -> tuple[Worker, Misbehaving, PostgresStore]:
    store = await PostgresStore.open(dsn, table=outbox_event, max_size=4)
    publisher = Misbehaving(broker.publisher(), written[0][1], how)
    config = relay_lane(timing=TIMING, backoff=QUICK, poll_interval=0.05, key_of=key_of)
    return Worker(store, RelayHandler(publisher), config), publisher, store


async def test_a_key_s_later_event_is_not_published_before_the_earlier_one_s_late_puback(
    dsn: str,
    nats_url: str,
    topic: tuple[str, NatsBroker],
    key_of: Callable[[ClaimedRow], str | None] | None,
) -> None:
    name, broker = topic
    written = await _write(dsn, name)
    worker, _, store = await _relay(dsn, broker, written, "late", key_of)
    async with store:
        report = await worker.run_once()
    assert report.claimed == len(KEYS) == report.dispatched
    order = await _stored_order(nats_url, name)
    assert len(order) == len(KEYS)
    # The other keys' events went out while t-1's first waited for its answer...
    assert order[0] != written[0][1]
    # ...and none of t-1's later events overtook it.
    assert _per_key(written, order) == _outbox_order(written)


@attrs.frozen
class Retried:
    """A relay whose t-1's first event misbehaved once: its first pass, then its drain."""

    written: list[tuple[str, str]]
    first: BatchReport
    #: Offered to the publisher, and stored by JetStream, in the first pass; each row's error then.
    asked: list[str]
    stored_first: list[str]
    errors_first: list[str | None]
    #: Stored by JetStream once the retries drained the outbox.
    stored: list[str]

    def others(self) -> list[str]:
        """The event ids of the keys that did not misbehave, in outbox order."""
        return [event_id for key, event_id in self.written if key != "t-1"]


async def _misbehaving_once_then_retried(
    dsn: str,
    nats_url: str,
    topic: tuple[str, NatsBroker],
    how: str,
    key_of: Callable[[ClaimedRow], str | None] | None,
) -> Retried:
    name, broker = topic
    written = await _write(dsn, name)
    worker, publisher, store = await _relay(dsn, broker, written, how, key_of)
    async with store:
        first = await worker.run_once()
        asked = list(publisher.asked)
        stored_first = await _stored_order(nats_url, name)
        async with store.pool.connection() as conn:
            cursor = await conn.execute("SELECT last_error FROM outbox_event ORDER BY id")
            errors = [error for (error,) in await cursor.fetchall()]
        await asyncio.sleep(0.15)  # the retry wait
        await worker.run(drain=True)
    return Retried(written, first, asked, stored_first, errors, await _stored_order(nats_url, name))


async def test_an_unacknowledged_event_holds_its_key_s_later_events_back_for_the_retry(
    dsn: str,
    nats_url: str,
    topic: tuple[str, NatsBroker],
    key_of: Callable[[ClaimedRow], str | None] | None,
) -> None:
    run = await _misbehaving_once_then_retried(dsn, nats_url, topic, "unacknowledged", key_of)
    # The window: t-1's first failed, its three later events were never offered; the others
    # went out.
    assert (run.first.dispatched, run.first.retried) == (3, 4)
    assert run.stored_first == run.others()
    assert sorted(run.asked) == sorted([run.written[0][1], *run.others()])
    assert run.errors_first[::2] == [
        "no acknowledgement (the test's broker)",
        *[EARLIER_UNPUBLISHED] * 3,
    ]
    assert sorted(run.stored) == sorted(event_id for _, event_id in run.written)
    assert _per_key(run.written, run.stored) == _outbox_order(run.written)


async def test_a_publish_cut_off_after_it_was_stored_is_stored_once_and_keeps_its_key_s_order(
    dsn: str,
    nats_url: str,
    topic: tuple[str, NatsBroker],
    key_of: Callable[[ClaimedRow], str | None] | None,
) -> None:
    run = await _misbehaving_once_then_retried(dsn, nats_url, topic, "cut_off", key_of)
    assert (run.first.dispatched, run.first.retried) == (3, 4)
    # t-1's first was cut off mid-send. Its later events were never offered: the relay sends a
    # key's rows one after another (its lane's key_of), so each later one started after the
    # first had used up the window's time and found none left, or was held back; a relay whose
    # rows wait for their turn inside the handler instead sees them cut off while they wait.
    cut_off = "ran out mid-send"
    no_time = "no time left"
    assert cut_off in str(run.errors_first[0])
    assert all(
        error == EARLIER_UNPUBLISHED or cut_off in str(error) or no_time in str(error)
        for error in run.errors_first[2::2]
    )
    assert 1 <= run.first.budget_overruns <= 4
    assert sorted(run.asked) == sorted([run.written[0][1], *run.others()])
    # Stored once: the retry's publish of t-1's first event had the same Nats-Msg-Id.
    assert len(run.stored) == len(KEYS)
    assert _per_key(run.written, run.stored) == _outbox_order(run.written)
