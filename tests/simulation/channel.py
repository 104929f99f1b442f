"""The consumer channel's world: the e-mail channel consuming events from the broker.

Each node is one ``outbox consume --channel email`` process, built as
:class:`~outbox_adapters.lanes.channel_workers.EmailChannelWorkers` builds it: the REAL
``ChannelConsumer`` running the REAL e-mail channel (``RowChannel``) over the shipped
:class:`~outbox_adapters.memory.MemoryRecipientRows` and :class:`~outbox_adapters.memory.MemoryParkLedger`,
beside the REAL ``runtime.Worker`` with the ``EmailHandler`` that sends the rows, both on the
shared store. Every port call is a step, faulted as in the e-mail world.

The world (drawn from the seed): 2 to 4 nodes; 4 to 10 events, each with two recipient kinds
(``welcome`` to the event's admin, ``notify`` to the platform owner), one admin address in ten
invalid (refused: parked, no row); now and then an event published twice (the broker keeps one).
A crashed or frozen node's deliveries come back after the ack wait.

Invariants, besides the e-mail world's (every row: not lost, duplicate bound, fence, secrets):

- no event acknowledged before every one of its recipients is terminal (checked at each ack);
- one row, so one e-mail plus the crash bound, per (event, kind); a refused kind parked once, with
  one dead letter; every event acknowledged by the end.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, Final

from tests.simulation.channel_ports import (
    FaultyLedger,
    FaultyPublisher,
    FaultyRows,
    NodeConsumer,
    SimBroker,
)
from tests.simulation.plan import Plan
from tests.simulation.vloop import EPOCH, VirtualLoop
from tests.simulation.world import BACKOFF, Node, World

from outbox_adapters.lanes.channel_workers import ChannelTiming
from outbox_adapters.lanes.email_channel import (
    EMAIL_CHANNEL_GROUP,
    EmailDraft,
    EmailRecipes,
    email_channel,
    email_channel_lane,
)
from outbox_adapters.memory import MemoryParkLedger, MemoryRecipientRows
from outbox_adapters.runtime import Worker
from outbox_core.brokers import dlq_subject
from outbox_core.delivery import Status
from outbox_core.events import EventEnvelope
from outbox_core.ports import BrokerMessage

__all__ = ["ChannelWorld"]

TOPIC: Final = "platform.events"
KINDS: Final = ("welcome", "notify")
OWNER: Final = "owner@example.org"
TIMING: Final = ChannelTiming(
    event_deadline=timedelta(seconds=30), retry_delay=timedelta(seconds=5),
    overrun_delay=timedelta(seconds=10), publish_budget=timedelta(seconds=5),
)  # fmt: skip


def _recipes() -> EmailRecipes:
    def welcome(event: EventEnvelope) -> EmailDraft:
        return EmailDraft(
            to=str(event.data["admin_email"]), subject=f"welcome {event.id}",
            text="Hello, set your password: $setup_url",
            fields={"setup_url": f"https://example.org/setup/{event.id}"},
        )  # fmt: skip

    def notify(event: EventEnvelope) -> EmailDraft:
        return EmailDraft(to=OWNER, subject=f"notify {event.id}", text="A new tenant.")

    return {"tenant.provisioned": (("welcome", welcome), ("notify", notify))}


class ChannelWorld(World):
    """The e-mail channel's nodes on the broker and the shared store (module docstring)."""

    def __init__(self, plan: Plan, loop: VirtualLoop) -> None:
        super().__init__(plan, loop)
        self.broker = SimBroker()
        self.group = self.broker.group(EMAIL_CHANNEL_GROUP, [TOPIC])
        self.parks = MemoryParkLedger(self.store)
        self.rows = MemoryRecipientRows(self.store, lane=self.config.lane, ledger=self.parks)
        self.recipes = _recipes()
        #: event id -> its kinds that must be parked (refused before any row).
        self.refused: dict[str, set[str]] = {}

    def _draw_shape(self) -> None:
        super()._draw_shape()
        self.gated = False  # a channel's lane runs without a leader (EmailChannelWorkers)
        self.config = email_channel_lane(
            timing=self.timing, backoff=BACKOFF, poll_interval=10.0,
            rows_in_flight=self.config.rows_in_flight, group_marks=self.config.group_marks,
        )  # fmt: skip
        self.events = self.rng.randint(4, 10)
        self.invalid = [self.rng.random() < 0.1 for _ in range(self.events)]
        # The rows the channel must write: one per kind, but none for a refused welcome.
        self.messages = 2 * self.events - sum(self.invalid)
        self.result.shape = f"channel slots={self.slot_count} events={self.events} " + " ".join(
            part for part in self.result.shape.split() if part.startswith(("batch", "rows_in"))
        )

    def start(self, slot: int) -> None:
        node = self.new_node(slot)
        if node is None:
            return
        node.worker = self.email_worker(node, gated=False)
        channel = email_channel(
            FaultyRows(self, node, self.rows), self.recipes,
            recheck=TIMING.recheck, recheck_cap=TIMING.recheck_cap,
        )  # fmt: skip
        consumer = TIMING.consumer(
            NodeConsumer(self, node, self.group), channel,
            dlq=FaultyPublisher(self, node, self.broker), parks=FaultyLedger(self, node, self.parks),
        )  # fmt: skip
        node.stoppers.append(consumer.request_stop)
        self.run_node(node, _both(node.worker, consumer.run()))

    # --- the producer: the relay's side of the broker ----------------------------------------------

    async def _produce(self) -> None:
        arrivals = sorted(self.rng.uniform(0, 60) for _ in range(self.events))
        publisher = self.broker.publisher()
        for n, at in enumerate(arrivals):
            await asyncio.sleep(at - self.loop.time())
            event = EventEnvelope(
                id=event_id(n), type="tenant.provisioned", source="auth", key=f"t-{n}",
                time=EPOCH, data={"admin_email": "not an address" if self.invalid[n]
                                  else f"admin{n}@example.org"},
            )  # fmt: skip
            if self.invalid[n]:
                self.refused[event.id] = {"welcome"}
            message = BrokerMessage(subject=TOPIC, key=event.key, message_id=event.id,
                                    body=event.encode(), headers={})  # fmt: skip
            for _ in range(2 if self.rng.random() < 0.1 else 1):  # a relay's duplicate publish
                await publisher.publish(message, budget=timedelta(seconds=5))

    def _finished(self, producer: asyncio.Task[None]) -> bool:
        acked = set(self.group.acked)
        return super()._finished(producer) and all(event_id(n) in acked for n in range(self.events))

    # --- what the ports ask ------------------------------------------------------------------------

    def kind_rows(self) -> dict[tuple[str, str], list[int]]:
        """(event id, kind) -> the rows written for it, told by the subject the recipe gave."""
        found: dict[tuple[str, str], list[int]] = {}
        for row in self.store.all_rows():
            kind, event_id = str(json.loads(row.payload)["subject"]).split(" ", 1)
            found.setdefault((event_id, kind), []).append(row.id)
        return found

    def acknowledging(self, node: Node, event_id: str) -> None:
        """An ack is about to reach the broker: every recipient of the event must be terminal."""
        self.trace("ack", node.name, event_id)
        rows = self.kind_rows()
        parked = self.parks.entries.get((EMAIL_CHANNEL_GROUP, event_id), {})
        for kind in KINDS:
            if kind in self.refused.get(event_id, ()):
                if kind not in parked:
                    self.violation(f"{event_id} acknowledged, its {kind} refused but not parked")
                continue
            ids = rows.get((event_id, kind), [])
            pending = [i for i in ids if self.store.row(i).status is Status.PENDING]
            if not ids or pending:
                self.violation(
                    f"{event_id} acknowledged by {node.name} before its {kind} recipient is"
                    f" terminal (rows {ids}, pending {pending})"
                )

    def check_channel_end(self) -> None:
        acked = set(self.group.acked)
        rows = self.kind_rows()
        dead = [m.message_id for m in self.broker.on(dlq_subject(TOPIC))]
        for n in range(self.events):
            event = event_id(n)
            terminal, failed = True, set()
            for kind in KINDS:
                written = rows.get((event, kind), [])
                refused = kind in self.refused.get(event, ())
                if len(written) != (0 if refused else 1):
                    self.violation(f"{event}/{kind}: {len(written)} rows (want one per kind)")
                states = {self.store.row(i).status for i in written}
                terminal &= Status.PENDING not in states
                if Status.FAILED in states:
                    failed.add(kind)
            parked = set(self.parks.entries.get((EMAIL_CHANNEL_GROUP, event), {}))
            want = self.refused.get(event, set()) | failed
            if event in acked and parked != want:
                self.violation(f"{event} parked {sorted(parked)}, want {sorted(want)}")
            if len([d for d in dead if event in d]) != len(parked):
                self.violation(f"{event}: {len(parked)} kinds parked, dead letters differ")
            if event not in acked and terminal:
                self.violation(f"{event} never acknowledged, its recipients all terminal")


def event_id(n: int) -> str:
    return f"evt-{n:03d}"


async def _both(worker: Worker, consuming: Coroutine[Any, Any, object]) -> None:
    """One process: the lane's worker and the consumer, as ``EmailChannelWorkers.run`` has them."""
    async with asyncio.TaskGroup() as group:
        sending = group.create_task(worker.run())
        try:
            await consuming
        finally:
            worker.request_stop()
        await sending
