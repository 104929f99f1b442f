"""A channel's stop ends even when its broker consumer ignores the cancellation of its fetch or
never finishes closing: it waits at most ``stop_grace`` for each, says so in a warning naming the
channel, and still settles the deliveries in progress first (``lanes.wind_down``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import timedelta

import attrs
import pytest
from tests.unit.test_consumer_in_flight import TOPIC, Ledger, Timed, envelope

from outbox_adapters.lanes.channel_workers import ChannelTiming
from outbox_adapters.lanes.consumer import ChannelConsumer
from outbox_adapters.lanes.wind_down import STOP_GRACE
from outbox_adapters.memory import MemoryBroker
from outbox_core.ports import BrokerMessage, ReceivedMessage

GRACE = timedelta(milliseconds=200)
#: What the test allows a stop to take before it calls it hung (far above the grace).
HUNG = 5.0


@attrs.define
class Stubborn:
    """A broker consumer that hands out what ``source`` has, then fetches until ``released``:
    it takes the cancellation of a fetch for a failed fetch and fetches again (``stubborn_fetch``),
    or its close waits for ``released`` whatever cancels it (``stubborn_close``)."""

    source: AsyncIterator[ReceivedMessage]
    handed: int
    stubborn_fetch: bool
    stubborn_close: bool
    released: asyncio.Event = attrs.Factory(asyncio.Event)
    fetching: asyncio.Event = attrs.Factory(asyncio.Event)
    cancels: int = 0

    def messages(self) -> AsyncIterator[ReceivedMessage]:
        return _Messages(self)


@attrs.define
class _Messages:
    consumer: Stubborn

    def __aiter__(self) -> _Messages:
        return self

    async def __anext__(self) -> ReceivedMessage:
        me = self.consumer
        if me.handed:
            me.handed -= 1
            return await anext(me.source)
        me.fetching.set()
        while True:
            try:
                await me.released.wait()
            except asyncio.CancelledError:
                me.cancels += 1
                if me.stubborn_fetch:
                    continue  # taken for a failed fetch: fetch again
                raise
            raise StopAsyncIteration

    async def aclose(self) -> None:
        me = self.consumer
        while me.stubborn_close and not me.released.is_set():
            try:
                await me.released.wait()
            except asyncio.CancelledError:
                me.cancels += 1


async def one_delivered(broker: MemoryBroker) -> AsyncIterator[ReceivedMessage]:
    event = envelope("k-a", 0)
    message = BrokerMessage(subject=TOPIC, key="k-a", message_id=event.id, body=event.encode())
    await broker.publisher().publish(message, budget=timedelta(seconds=1))
    return aiter(broker.consumer("timed", [TOPIC]).messages())


@pytest.mark.parametrize(
    ("stubborn_fetch", "stubborn_close"),
    [(True, False), (False, True), (True, True)],
    ids=["fetch-ignores-cancel", "close-never-ends", "both"],
)
async def test_a_stop_ends_within_the_grace_when_the_broker_consumer_ignores_it(
    stubborn_fetch: bool, stubborn_close: bool, caplog: pytest.LogCaptureFixture
) -> None:
    broker = MemoryBroker()
    stubborn = Stubborn(await one_delivered(broker), 1, stubborn_fetch, stubborn_close)
    channel = Timed(hold=0.3, want=1)
    consumer = ChannelConsumer(
        stubborn, channel, dlq=broker.publisher(), parks=Ledger(), stop_grace=GRACE
    )
    running = asyncio.create_task(consumer.run())
    try:
        await asyncio.wait_for(channel.reached.wait(), timeout=HUNG)
        await asyncio.wait_for(stubborn.fetching.wait(), timeout=HUNG)
        consumer.request_stop()  # the delivery in progress holds for a while yet
        with caplog.at_level(logging.WARNING, logger="outbox_adapters.lanes.consumer"):
            # Not wait_for: it would cancel a hung stop and wait for that too.
            await asyncio.wait({running}, timeout=HUNG)
        assert running.done(), f"the stop still waits after {HUNG}s (grace {GRACE})"
        stats = running.result()
        # The delivery in progress was settled before the stop returned.
        assert stats.acked == 1
        assert channel.running == set()
        assert stubborn.cancels >= 1
        said = [r.getMessage() for r in caplog.records]
        expected = [
            what
            for what, stubborn_part in (
                ("fetch did not end within 0.2s", stubborn_fetch),
                ("did not close within 0.2s", stubborn_close),
            )
            if stubborn_part
        ]
        for what in expected:
            assert any(what in line and "channel timed" in line for line in said), said
    finally:
        stubborn.released.set()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await asyncio.sleep(0)  # the fetch left behind ends once released


async def test_a_consumer_that_honours_the_cancel_is_not_reported() -> None:
    broker = MemoryBroker()
    stubborn = Stubborn(await one_delivered(broker), 1, stubborn_fetch=False, stubborn_close=False)
    channel = Timed(hold=0.01)
    consumer = ChannelConsumer(
        stubborn, channel, dlq=broker.publisher(), parks=Ledger(), stop_grace=timedelta(seconds=30)
    )
    running = asyncio.create_task(consumer.run())
    await asyncio.wait_for(stubborn.fetching.wait(), timeout=HUNG)
    consumer.request_stop()
    # Far sooner than the grace: a fetch that ends when cancelled is not waited for.
    stats = await asyncio.wait_for(running, timeout=HUNG)
    assert stats.acked == 1
    assert stubborn.cancels == 1


def test_the_channel_timing_passes_its_grace_to_the_consumer() -> None:
    broker = MemoryBroker()
    made = ChannelTiming(stop_grace=GRACE).consumer(
        broker.consumer("timed", [TOPIC]), Timed(), dlq=broker.publisher(), parks=Ledger()
    )
    assert made.stop_grace == GRACE
    assert ChannelTiming().stop_grace == STOP_GRACE == timedelta(seconds=5)
