"""The consumer channel's ports in the simulated world: the broker, its consumer group, the rows.

- :class:`SimBroker` is :class:`~outbox_adapters.memory.MemoryBroker` whose consumer group
  (:class:`SimGroup`) hands each message to whichever node asks first (competing consumers of one
  group), waits on its queue without polling, and redelivers a delivery nobody settled within
  :data:`ACK_WAIT` (JetStream's ack wait: a crashed or frozen consumer's event comes back). An
  acknowledged event is never delivered again.
- :class:`NodeConsumer` is one node's ``Consumer`` of the group; each delivery it hands out is a
  :class:`FaultyDelivery`, whose ``ack`` / ``nak`` are port calls of the run (steps), and whose
  ``ack`` first checks that every recipient of the event is terminal.
- :class:`FaultyRows`, :class:`FaultyLedger` and :class:`FaultyPublisher` put the shipped
  :class:`~outbox_adapters.memory.MemoryRecipientRows`, :class:`~outbox_adapters.memory.MemoryParkLedger`
  and the broker's publisher (the dead-letter destination) behind the same faults as the store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Final

from tests.simulation.ports import _Port

from outbox_adapters.memory import MemoryBroker, MemoryConsumer, MemoryParkLedger
from outbox_adapters.memory.broker import MemoryMessage
from outbox_adapters.memory.channels import MemoryRecipientRows
from outbox_adapters.store_rules import RecipientRow
from outbox_core.messages import NewMessage
from outbox_core.outcomes import Outcome
from outbox_core.ports import BrokerMessage, ReceivedMessage

if TYPE_CHECKING:
    from tests.simulation.channel import ChannelWorld
    from tests.simulation.world import Node

__all__ = ["ACK_WAIT", "FaultyLedger", "FaultyPublisher", "FaultyRows", "NodeConsumer", "SimBroker"]

#: A delivery not settled within this long is delivered again (longer than the event deadline).
ACK_WAIT: Final = 45.0


class SimGroup(MemoryConsumer):
    """One consumer group, shared by the nodes (see the module docstring)."""

    def redeliver(self, message: MemoryMessage, delay: timedelta | None) -> None:
        if message.message_id not in self.acked:
            super().redeliver(message, delay)

    async def next_delivery(self) -> MemoryMessage:
        while True:
            stored, count = await self._queue.get()
            if stored.message_id not in self.acked:
                self.in_flight += 1
                return MemoryMessage(stored, count, self)


class SimBroker(MemoryBroker):
    def group(self, name: str, subjects: Sequence[str]) -> SimGroup:
        group = SimGroup(self, name, tuple(subjects))
        self._consumers.append(group)
        return group


class FaultyDelivery(_Port):
    """``ReceivedMessage``: one delivery to one node; settling it is a step of the run."""

    world: ChannelWorld

    def __init__(self, world: ChannelWorld, node: Node, inner: MemoryMessage) -> None:
        super().__init__(world, node)
        self.inner = inner
        world.loop.call_later(ACK_WAIT, self._ack_wait)

    def _ack_wait(self) -> None:
        if not self.inner._settled:
            self.world.trace("ack_wait", self.node.name, self.message_id)
            self.inner._consumer.redeliver(self.inner, None)

    @property
    def message_id(self) -> str:
        return self.inner.message_id

    @property
    def body(self) -> bytes:
        return self.inner.body

    @property
    def subject(self) -> str:
        return self.inner.subject

    @property
    def headers(self) -> Mapping[str, str]:
        return self.inner.headers

    @property
    def deliveries(self) -> int:
        return self.inner.deliveries

    async def ack(self) -> None:
        async def run() -> None:
            self.world.acknowledging(self.node, self.message_id)
            await self.inner.ack()

        await self._call("ack", run, database=False)

    async def nak(self, *, delay: timedelta | None = None) -> None:
        await self._call("nak", lambda: self.inner.nak(delay=delay), database=False)


class NodeConsumer:
    """``ports.Consumer``: one node's share of the group."""

    def __init__(self, world: ChannelWorld, node: Node, group: SimGroup) -> None:
        self.world, self.node, self.group = world, node, group

    async def messages(self) -> AsyncIterator[ReceivedMessage]:
        while True:
            inner = await self.group.next_delivery()
            self.world.trace("delivery", self.node.name, inner.message_id, inner.deliveries)
            yield FaultyDelivery(self.world, self.node, inner)


class FaultyRows(_Port):
    """``RecipientRowStore`` for one node over the shared :class:`MemoryRecipientRows`."""

    def __init__(self, world: ChannelWorld, node: Node, inner: MemoryRecipientRows) -> None:
        super().__init__(world, node)
        self.inner = inner

    @property
    def lane(self) -> str:
        return self.inner.lane

    async def ensure(
        self, messages: Sequence[NewMessage], *, new: bool = False
    ) -> dict[str, RecipientRow]:
        return await self._call("ensure", lambda: self.inner.ensure(messages, new=new))

    async def rearm(self, channel: str, event_id: str) -> frozenset[str]:
        return await self._call("rearm", lambda: self.inner.rearm(channel, event_id), write=True)


class FaultyLedger(_Port):
    """``ParkLedger`` for one node over the shared :class:`MemoryParkLedger`."""

    def __init__(self, world: ChannelWorld, node: Node, inner: MemoryParkLedger) -> None:
        super().__init__(world, node)
        self.inner = inner

    async def parked(self, channel: str, event_id: str) -> frozenset[str]:
        return await self._call("parked", lambda: self.inner.parked(channel, event_id))

    async def record(
        self, channel: str, event_id: str, kind: str, *, reason: str, attempts: int
    ) -> None:
        await self._call(
            "park",
            lambda: self.inner.record(channel, event_id, kind, reason=reason, attempts=attempts),
        )


class FaultyPublisher(_Port):
    """``Publisher`` of the dead-letter destination for one node."""

    def __init__(self, world: ChannelWorld, node: Node, broker: MemoryBroker) -> None:
        super().__init__(world, node)
        self.inner = broker.publisher()

    async def publish(self, message: BrokerMessage, *, budget: timedelta) -> Outcome:
        return await self._call(
            "dlq", lambda: self.inner.publish(message, budget=budget), database=False
        )
