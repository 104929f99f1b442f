"""The relay's world: the event relay publishing the event outbox to the broker.

Each node is one relay process: the REAL ``runtime.Worker`` with the REAL
:class:`~outbox_adapters.lanes.relay.RelayHandler` and :func:`~outbox_adapters.lanes.relay.relay_lane`,
leader-gated by the in-memory leader lease, over the shared store holding event rows (written as
``publish()`` writes them: :func:`~outbox_adapters.postgres.events.event_message`), publishing to
the shipped :class:`~outbox_adapters.memory.MemoryBroker` (which drops a message id it already
holds) through :class:`FaultyBrokerPublisher`: a publish may hang until the row's budget cuts it,
be stored with its acknowledgement lost (reported transient), or find the broker unavailable.
Node faults as in the e-mail world.

The store claims in per-key order, as ``PostgresStore`` does for ``outbox_event``: the shipped
``MemoryStore(ordered_by=event_key)`` (its model of ``claim_forms.per_key_order``).

The world (drawn from the seed): 2 to 4 nodes; batches of 3 to 8 rows, one window (the default)
or the strict relay; 8 to 24 events over the first minute on 1 to 3 partition keys, often in
bursts, so that one batch holds several events of a key.

Invariants, besides the e-mail world's (no row lost, duplicate bound, fence, one leader acting at
every publish, attempts never decrease):

- every dispatched event is on the broker;
- per key, the first appearance of each event on the broker follows the enqueue order, with no
  gap (a later event never goes out while an earlier one of its key has not).
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Final

from tests.simulation.plan import Kind, Plan
from tests.simulation.ports import FaultyLeader, FaultyStore, SimStore, _Port
from tests.simulation.vloop import EPOCH, VirtualLoop
from tests.simulation.world import Node, World

from outbox_adapters.lanes.relay import RELAY_LANE, RelayHandler, relay_lane
from outbox_adapters.memory import MemoryBroker
from outbox_adapters.memory.ordering import event_key
from outbox_adapters.postgres.events import event_message, new_event
from outbox_core.delivery import Status
from outbox_core.event_timing import RelayTiming
from outbox_core.outcomes import Outcome
from outbox_core.ports import BrokerMessage

__all__ = ["RelayWorld"]

TOPIC: Final = "orders"


class FaultyBrokerPublisher(_Port):
    """``Publisher`` for one relay node over the shared broker: the planned or drawn answer."""

    def __init__(self, world: RelayWorld, node: Node, broker: MemoryBroker) -> None:
        super().__init__(world, node)
        self.relay = world
        self.inner = broker.publisher()

    async def publish(self, message: BrokerMessage, *, budget: timedelta) -> Outcome:
        world, node = self.relay, self.node
        effects = world.step(node, "publish")
        answer = world.send_answer()
        if await node.gate():  # cut off while frozen: the publish never finishes
            raise asyncio.CancelledError
        latency = world.publish_latency() + effects.slow
        if answer is Kind.SEND_HANG:  # no acknowledgement until the row's budget cuts it
            await asyncio.sleep(budget.total_seconds() + 3600)
            return Outcome.transient("simulated: no acknowledgement")
        await asyncio.sleep(latency)
        if answer in (Kind.SEND_4XX, Kind.SEND_5XX):
            return Outcome.transient("simulated: broker unavailable")
        if not node.alive:
            raise asyncio.CancelledError
        outcome = await self.inner.publish(message, budget=budget)
        world.delivered(
            node, world.row_ids[message.message_id], ambiguous=answer is Kind.SEND_MAYBE
        )
        if answer is Kind.SEND_MAYBE:  # stored, the acknowledgement lost
            return Outcome.transient("simulated: acknowledgement lost", maybe_delivered=True)
        return outcome


class RelayWorld(World):
    """The relay's nodes on the shared event store and the broker (module docstring)."""

    def __init__(self, plan: Plan, loop: VirtualLoop) -> None:
        super().__init__(plan, loop)
        # A reorder shuffles wake-ups, not the start of the rows' tasks, which asyncio runs in
        # creation order: the handler's per-key lock relies on it (docs/testing.md, findings).
        loop.ordered_starts = True
        self.store = SimStore(self, ordered_by=event_key)
        self.broker = MemoryBroker()
        #: event id -> its row; partition key -> its events in enqueue order.
        self.row_ids: dict[str, int] = {}
        self.order: dict[str, list[str]] = {}

    def _draw_shape(self) -> None:
        rng = self.rng
        self.slot_count = rng.randint(2, 4)
        batch = rng.randint(3, 8)
        window = rng.choice((1, batch))
        self.gated = True
        self.timing = RelayTiming(  # type: ignore[assignment]
            publish=timedelta(seconds=2), mark=timedelta(seconds=2), batch_size=batch,
            window=window, lease_grace=timedelta(seconds=10),
        )  # fmt: skip
        self.config = relay_lane(timing=self.timing, poll_interval=10.0)
        self.lease = self.timing.claim_lease().total_seconds()
        self.messages = rng.randint(8, 24)
        self.keys = rng.randint(1, 3)
        self.result.shape = (
            f"relay slots={self.slot_count} batch={batch} window={window}"
            f" keys={self.keys} events={self.messages}"
        )

    def publish_latency(self) -> float:
        if self.rng.random() < 0.95:
            return self.rng.uniform(0.001, 0.05)
        return self.rng.uniform(0.5, 3.0)

    def start(self, slot: int) -> None:
        node = self.new_node(slot)
        if node is None:
            return
        node.worker = self.worker(
            node, FaultyStore(self, node, self.store),
            RelayHandler(FaultyBrokerPublisher(self, node, self.broker)), self.config,
            wakeup=self.store.wakeup(RELAY_LANE), leader=FaultyLeader(self, node, self.leader),
        )  # fmt: skip
        self.run_node(node, node.worker.run())

    async def _produce(self) -> None:
        at = 0.0
        for n in range(self.messages):
            if self.rng.random() < 0.6:  # a burst: several events in one batch
                at += self.rng.uniform(0, 60 / self.messages)
            else:
                at += self.rng.uniform(0, 120 / self.messages)
            await asyncio.sleep(max(0.0, at - self.loop.time()))
            key = f"k{self.rng.randrange(self.keys)}"
            event = new_event(
                key=key, type="order.placed", data={"n": n}, event_id=f"evt-{n:03d}", time=EPOCH
            )
            result = self.store.enqueue(event_message(TOPIC, event))
            self.row_ids[event.id] = int(result.row_id)
            self.order.setdefault(key, []).append(event.id)

    def check_relay_end(self) -> None:
        on_broker = [m.message_id for m in self.broker.on(TOPIC)]
        seen = set(on_broker)
        for row in self.store.all_rows():
            event = str(json.loads(row.payload)["id"])
            if row.status is Status.DISPATCHED and event not in seen:
                self.violation(f"{event} (row {row.id}) is dispatched but not on the broker")
        for key, events in self.order.items():
            first = [m for m in on_broker if m in set(events)]
            if first != events[: len(first)]:
                self.violation(f"key {key}: published {first}, enqueued {events}")
