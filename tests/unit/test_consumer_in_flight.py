"""The consumer handles several deliveries at once, those of one event key one after the other, in
the order they arrived (ADR 0021); a stop settles what is in progress. On the in-memory broker."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import attrs
import pytest

from outbox_adapters.lanes.consumer import ChannelConsumer, Settlement
from outbox_adapters.lanes.in_flight import InFlight
from outbox_adapters.memory import MemoryBroker
from outbox_core.errors import ConfigurationError
from outbox_core.events import EventEnvelope
from outbox_core.ports import BrokerMessage, ReceivedMessage

TOPIC = "platform-events"
KEYS = ("k-a", "k-b", "k-c")
PER_KEY = 4


@attrs.define
class Ledger:
    async def parked(self, channel: str, event_id: str) -> frozenset[str]:
        del channel, event_id
        return frozenset()

    async def record(
        self, channel: str, event_id: str, kind: str, *, reason: str, attempts: int
    ) -> None:
        del channel, event_id, kind, reason, attempts


@attrs.define
class Timed:
    """Takes ``hold`` per event and records what ran at the same time."""

    hold: float = 0.02
    name: str = "timed"
    #: Set once ``want`` deliveries run at the same time.
    want: int = 0
    reached: asyncio.Event = attrs.Factory(asyncio.Event)
    running: set[str] = attrs.Factory(set)
    most: int = 0
    #: (event id, key, "start" | "end") in the order they happened.
    steps: list[tuple[str, str, str]] = attrs.Factory(list)

    async def deliver(self, event: EventEnvelope, message: ReceivedMessage) -> Settlement:
        del message
        self.running.add(event.id)
        self.most = max(self.most, len(self.running))
        if self.want and len(self.running) >= self.want:
            self.reached.set()
        self.steps.append((event.id, event.key, "start"))
        await asyncio.sleep(self.hold)
        self.steps.append((event.id, event.key, "end"))
        self.running.discard(event.id)
        return Settlement.done()


def envelope(key: str, n: int) -> EventEnvelope:
    return EventEnvelope(
        id=f"{key}-{n}",
        type="tenant.updated",
        source="auth",
        key=key,
        time=datetime(2026, 12, 1, tzinfo=UTC),
        data={"n": n},
    )


async def published(broker: MemoryBroker) -> list[str]:
    """``PER_KEY`` events of each key, the keys interleaved; their ids in publish order."""
    ids = []
    for n in range(PER_KEY):
        for key in KEYS:
            event = envelope(key, n)
            message = BrokerMessage(
                subject=TOPIC, key=key, message_id=event.id, body=event.encode()
            )
            await broker.publisher().publish(message, budget=timedelta(seconds=1))
            ids.append(event.id)
    return ids


def machinery(broker: MemoryBroker, channel: Timed, in_flight: int) -> ChannelConsumer:
    return ChannelConsumer(
        broker.consumer(channel.name, [TOPIC]),
        channel,
        dlq=broker.publisher(),
        parks=Ledger(),
        drain_idle=timedelta(milliseconds=100),
        in_flight=in_flight,
    )


@pytest.mark.parametrize("in_flight", [1, 2, 4, 8])
async def test_at_most_in_flight_at_once_and_one_key_s_events_one_after_the_other_in_order(
    in_flight: int,
) -> None:
    broker = MemoryBroker()
    ids = await published(broker)
    channel = Timed()
    stats = await machinery(broker, channel, in_flight).run(drain=True)
    assert stats.acked == len(ids)
    # As many at once as allowed (three keys: never more than three can run together).
    assert channel.most == min(in_flight, len(KEYS))
    for key in KEYS:
        mine = [(event_id, step) for event_id, k, step in channel.steps if k == key]
        expected = [(f"{key}-{n}", step) for n in range(PER_KEY) for step in ("start", "end")]
        assert mine == expected, f"key {key} handled out of order or overlapping: {mine}"


async def test_a_stop_settles_every_delivery_in_progress_and_takes_no_new_one() -> None:
    broker = MemoryBroker()
    ids = await published(broker)
    channel = Timed(hold=0.2, want=3)
    consumer = machinery(broker, channel, 3)
    running = asyncio.create_task(consumer.run())
    await asyncio.wait_for(channel.reached.wait(), timeout=5)
    consumer.request_stop()
    stats = await asyncio.wait_for(running, timeout=5)
    assert stats.acked == 3  # the three in progress, settled; nothing new taken
    assert channel.running == set()
    assert len({event_id for event_id, _, _ in channel.steps}) == 3 < len(ids)


async def test_cancelling_the_consumer_cancels_the_deliveries_in_progress() -> None:
    broker = MemoryBroker()
    await published(broker)
    channel = Timed(hold=30.0, want=2)
    consumer = machinery(broker, channel, 2)
    running = asyncio.create_task(consumer.run())
    await asyncio.wait_for(channel.reached.wait(), timeout=5)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(running, timeout=5)
    assert consumer.stats.acked == 0


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "8"])
def test_in_flight_must_be_a_positive_count(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="in_flight"):
        InFlight(bad)  # type: ignore[arg-type]
