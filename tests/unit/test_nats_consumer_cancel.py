"""A NATS consumer stops when its task is cancelled, even when nats-py answers the cancelled fetch
with an error of its own: a fetch cancelled on a closed connection raises
``ConnectionClosedError``, which the consumer otherwise takes for a failed fetch and retries (a
channel's stop then waited for ever on its consumer)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import nats.errors
import pytest

from outbox_adapters.brokers.errors import BrokerUnavailable
from outbox_adapters.brokers.nats.consumer import NatsConsumer


class _Subscription:
    """A pull subscription whose fetch waits until cancelled, then answers as nats-py does."""

    def __init__(self, answer: BaseException) -> None:
        self.answer = answer
        self.fetches = 0
        self.fetching = asyncio.Event()

    async def fetch(self, batch: int, *, timeout: float) -> list[Any]:  # noqa: ASYNC109 - nats-py's
        del batch, timeout
        self.fetches += 1
        self.fetching.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise self.answer from None
        return []

    async def unsubscribe(self) -> None:
        return None


class _JetStream:
    def __init__(self, sub: _Subscription) -> None:
        self.sub = sub

    async def add_consumer(self, stream: str, config: Any) -> None:
        del stream, config

    async def pull_subscribe_bind(self, name: str, *, stream: str) -> _Subscription:
        del name, stream
        return self.sub


class _Broker:
    ack_wait = timedelta(seconds=30)
    closed = False

    def __init__(self, js: Any) -> None:
        self.js = js

    async def jetstream(self) -> Any:
        if self.js is None:
            await asyncio.Event().wait()  # connecting; a cancelled connect is reported as an outage
        return self.js

    async def stream_of(self, subject: str) -> str:
        del subject
        return "STREAM"


async def _ended(following: asyncio.Future[Any], consumer: NatsConsumer) -> None:
    """``following`` ends as cancelled within 5 s (not awaited past that: a consumer that swallows
    its cancellation would keep the test waiting for ever; closed then, so it ends at last)."""
    done, _ = await asyncio.wait({following}, timeout=5)
    if following not in done:
        consumer.close()
    assert following in done, "the consumer went on fetching after its task was cancelled"
    assert following.cancelled()


@pytest.mark.parametrize(
    "answer",
    [nats.errors.ConnectionClosedError(), nats.errors.TimeoutError(), TimeoutError()],
    ids=["connection-closed", "nats-timeout", "asyncio-timeout"],
)
async def test_a_cancelled_fetch_ends_the_messages_whatever_nats_py_answers(
    answer: BaseException,
) -> None:
    sub = _Subscription(answer)
    consumer = NatsConsumer(_Broker(_JetStream(sub)), "group", ("subject",))
    following = asyncio.ensure_future(anext(aiter(consumer.messages())))
    await sub.fetching.wait()
    following.cancel()
    await _ended(following, consumer)
    assert sub.fetches == 1  # no fetch after the cancellation


async def test_a_cancelled_connect_reported_as_an_outage_ends_the_messages() -> None:
    class _Connecting(_Broker):
        async def jetstream(self) -> Any:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                raise BrokerUnavailable("connecting to nats: cancelled") from None

    consumer = NatsConsumer(_Connecting(None), "group", ("subject",))
    following = asyncio.ensure_future(anext(aiter(consumer.messages())))
    await asyncio.sleep(0.01)
    following.cancel()
    await _ended(following, consumer)
