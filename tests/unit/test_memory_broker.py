"""The in-memory broker: de-duplication on the message id, redelivery of naks, outages."""

from __future__ import annotations

from datetime import timedelta

from outbox_adapters.memory import MemoryBroker
from outbox_core.outcomes import OutcomeKind
from outbox_core.ports import BrokerMessage

BUDGET = timedelta(seconds=1)


def message(n: int) -> BrokerMessage:
    return BrokerMessage(subject="platform-events", key="t1", message_id=f"e{n}", body=b"{}")


async def test_a_replayed_publish_is_stored_once_and_every_group_reads_in_order() -> None:
    broker = MemoryBroker()
    publisher = broker.publisher()
    email, inapp = (
        broker.consumer("email", ["platform-events"]),
        broker.consumer("inapp", ["platform-events"]),
    )
    for n in (1, 2, 1, 3):
        assert (await publisher.publish(message(n), budget=BUDGET)).kind is OutcomeKind.SENT
    assert [m.message_id for m in broker.messages] == ["e1", "e2", "e3"]
    for consumer in (email, inapp):
        consumer.close()
        got = [m.message_id async for m in consumer.messages()]
        assert got == ["e1", "e2", "e3"]


async def test_a_nak_redelivers_and_counts_the_delivery() -> None:
    broker = MemoryBroker()
    consumer = broker.consumer("email", ["platform-events"])
    await broker.publisher().publish(message(1), budget=BUDGET)
    seen = []
    async for received in consumer.messages():
        seen.append(received.deliveries)
        if received.deliveries < 3:
            await received.nak()
        else:
            await received.ack()
            consumer.close()
    assert seen == [1, 2, 3]
    assert consumer.acked == ["e1"]


async def test_an_unavailable_broker_refuses_publishes_as_transient() -> None:
    broker = MemoryBroker()
    broker.available = False
    outcome = await broker.publisher().publish(message(1), budget=BUDGET)
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert broker.messages == []
    assert broker.refused == 1
