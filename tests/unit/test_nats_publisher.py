"""The NATS publisher's time limit, on a stand-in JetStream context: the two ways a publish can be
late (nats-py's publish call itself waits, or its PubAck does not come) end at the budget as a
timeout outcome, and a cancellation of the publishing task is never taken for one.

The PubAck that never comes is also shown against a real server in
tests/integration/test_brokers.py.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import nats.js.errors
import pytest

from outbox_adapters.brokers.nats.broker import NatsBroker, NatsPublisher
from outbox_core.outcomes import OutcomeKind
from outbox_core.ports import BrokerMessage

MESSAGE = BrokerMessage(subject="events", key="k", message_id="e-1", body=b"{}", headers={})


class StandInJetStream:
    """``publish_async`` as nats-py's: buffers the frame and hands back the PubAck's future;
    ``stall`` makes the call itself wait (a full pending buffer), ``answer`` makes the ack come."""

    def __init__(self, *, stall: bool = False, answer: bool = False, stalled: bool = False) -> None:
        self.stall = stall or stalled
        #: A cut stalled call answers nats-py's TooManyStalledMsgsError, as its wait for a
        #: pending slot does, instead of the cancellation.
        self.stalled = stalled
        self.answer = answer
        self.futures: list[asyncio.Future[Any]] = []
        self.entered = asyncio.Event()
        #: Called when the stalled call's wait is cancelled, before the task resumes.
        self.on_cut: Any = None

    async def publish_async(self, subject: str, payload: bytes, **_: Any) -> asyncio.Future[Any]:
        self.entered.set()
        if self.stall:
            stalled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if self.on_cut is not None:
                stalled.add_done_callback(lambda _: self.on_cut())
            try:
                await stalled
            except asyncio.CancelledError:
                if self.stalled:
                    raise nats.js.errors.TooManyStalledMsgsError from None
                raise
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.answer:
            asyncio.get_running_loop().call_soon(future.set_result, "puback")
        self.futures.append(future)
        return future


def publisher_on(js: StandInJetStream) -> NatsPublisher:
    broker = NatsBroker(["nats://127.0.0.1:1"])
    broker.ready = lambda: js  # type: ignore[method-assign,assignment,return-value]
    return NatsPublisher(broker)


async def test_an_answered_publish_is_sent():
    outcome = await publisher_on(StandInJetStream(answer=True)).publish(
        MESSAGE, budget=timedelta(seconds=1)
    )
    assert outcome.kind is OutcomeKind.SENT


@pytest.mark.parametrize("stall", [False, True], ids=["puback-late", "publish-call-stalled"])
async def test_a_late_publish_ends_at_its_budget_as_a_maybe_delivered_timeout(stall: bool):
    js = StandInJetStream(stall=stall)
    loop = asyncio.get_running_loop()
    started = loop.time()
    outcome = await publisher_on(js).publish(MESSAGE, budget=timedelta(seconds=0.05))
    assert 0.04 <= loop.time() - started < 1.0
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert outcome.maybe_delivered
    assert "no acknowledgement in time" in outcome.reason
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    if not stall:
        assert isinstance(js.futures[0].exception(), TimeoutError)  # the ack's future is failed


@pytest.mark.parametrize("stall", [False, True], ids=["awaiting-puback", "in-publish-call"])
async def test_cancelling_the_publishing_task_cancels_it_and_is_not_a_timeout(stall: bool):
    js = StandInJetStream(stall=stall)
    task = asyncio.ensure_future(publisher_on(js).publish(MESSAGE, budget=timedelta(seconds=30)))
    await js.entered.wait()
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancellation_that_comes_with_the_timer_stays_a_cancellation():
    """The task is cancelled from outside after the timer cut the stalled publish call and before
    the task resumed: the caller's cancellation wins (it is not swallowed as a timeout)."""
    js = StandInJetStream(stall=True)
    task = asyncio.ensure_future(publisher_on(js).publish(MESSAGE, budget=timedelta(seconds=0.05)))
    js.on_cut = task.cancel
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cut_that_nats_py_answers_with_another_error_leaves_no_cancellation_behind():
    """nats-py turns a cancelled wait for a pending slot into TooManyStalledMsgsError: the publish
    is a transient outcome, and the task carries no cancellation of the timer's (a later time
    limit in the same task works as it should)."""
    outcome = await publisher_on(StandInJetStream(stalled=True)).publish(
        MESSAGE, budget=timedelta(seconds=0.05)
    )
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await asyncio.sleep(1)
