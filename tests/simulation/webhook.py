"""The webhook deliveries' world: the retry lane POSTing deliveries already fanned out.

Each node is one webhook process's retry worker: the REAL ``runtime.Worker`` with the REAL
:class:`~outbox_adapters.lanes.webhooks.DeliveryHandler` and :func:`delivery_lane`, leader-gated
or not, over the shared store holding the delivery rows (one per (event, endpoint), as the fan-out
writes them: the unique index is the idempotency key here). The handler reads each delivery's
target (a database read, faulted like the store's calls) and POSTs through
:class:`FaultyWebhookSender`, whose answers go through the REAL ``classify_http`` as
``HttpxWebhookSender``'s do: 2xx; 4xx (a rejection, 429 with Retry-After, or 410 Gone, whose
failed mark disables the endpoint in the same step, as the deliveries table's mark does); 5xx
(500: may have been processed; 503 with Retry-After); a hang until the attempt's budget cuts it;
or the request processed and the answer lost (reset or read timeout after the request left).
Node faults as in the e-mail world.

Not simulated: the drainer's fan-out and the born-leased first attempts (``FanOutHandler``,
``runtime.born.BornRows``): the fan-out is a repository transaction on PostgreSQL with no
in-memory model yet, so every delivery here is worked by the retry lane from its first attempt.

The world (drawn from the seed): 2 to 4 nodes; batches of 1 to 5, strict, in flight or grouped;
1 to 3 endpoints; 4 to 12 events over the first minute, each with a delivery per endpoint.

Invariants, besides the e-mail world's (no delivery lost, duplicate bound, fence, terminal states
absorb, attempts never decrease, one leader acting at every POST):

- each (event, endpoint) has exactly one delivery;
- a delivery skipped for its disabled endpoint belongs to an endpoint a 410 disabled.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Final

import attrs
from tests.simulation.plan import Kind, Plan
from tests.simulation.ports import FaultyLeader, FaultyStore, SimStore, _Port
from tests.simulation.vloop import VirtualLoop
from tests.simulation.world import BACKOFF, Node, World

from outbox_adapters.lanes.webhooks import DELIVERY_LANE, DeliveryHandler, delivery_lane
from outbox_adapters.postgres.webhooks.model import DeliveryTarget
from outbox_adapters.runtime import Worker
from outbox_core.classify import HttpAttempt, HttpFailure, classify_http
from outbox_core.delivery import Status
from outbox_core.messages import Mark, NewMessage
from outbox_core.outcomes import Outcome
from outbox_core.ports import MarkResult
from outbox_core.signing import WebhookSecret
from outbox_core.webhook_timing import WebhookTiming

__all__ = ["WebhookWorld"]

_SECRET: Final = WebhookSecret(key=bytes(range(32)))
#: A receiver's Retry-After (429/503) is honoured up to this: inside the lost-row bound.
_RETRY_AFTER_CAP: Final = timedelta(seconds=30)


class SimDeliveryStore(SimStore):
    """The deliveries table: a failed mark asking for it disables the delivery's endpoint in the
    same step, as the PostgreSQL mark of ``outbox_webhook_delivery`` does (the shipped memory
    store refuses such a mark: it has no endpoints)."""

    def __init__(self, world: WebhookWorld) -> None:
        super().__init__(world)
        self.webhooks = world

    async def mark_if_pending(self, mark: Mark) -> MarkResult:
        await asyncio.sleep(0)
        self._check_available("mark_if_pending")
        with self._lock:
            return self._apply_disabling(mark)

    async def mark_many(self, marks: Sequence[Mark]) -> list[MarkResult]:
        await asyncio.sleep(0)
        self._check_available("mark_many")
        with self._lock:
            return [self._apply_disabling(mark) for mark in marks]

    def _apply_disabling(self, mark: Mark) -> MarkResult:
        result = self._apply(attrs.evolve(mark, disable_endpoint=False))
        if result is MarkResult.APPLIED and mark.disable_endpoint:
            endpoint = self.webhooks.endpoint_of(int(mark.row_id))
            self.webhooks.enabled[endpoint] = False
            self.webhooks.gone.add(endpoint)
            self.webhooks.trace("disabled", endpoint)
        return result


class FaultyTargets(_Port):
    """The repository's ``delivery_target`` for one node: a database read of the shared state."""

    def __init__(self, world: WebhookWorld, node: Node) -> None:
        super().__init__(world, node)
        self.webhooks = world

    async def delivery_target(self, delivery_id: int) -> DeliveryTarget | None:
        async def run() -> DeliveryTarget | None:
            return self.webhooks.target(delivery_id)

        return await self._call("target", run)


class FaultyWebhookSender(_Port):
    """``WebhookSender`` for one node: the receiver's answer, planned or drawn, classified."""

    def __init__(self, world: WebhookWorld, node: Node) -> None:
        super().__init__(world, node)
        self.webhooks = world

    async def send(
        self, url: str, *, headers: Mapping[str, str], body: bytes, budget: timedelta
    ) -> Outcome:
        del headers
        attempt = await self._attempt(self.webhooks.row_of(url, body), budget)
        return classify_http(attempt, now=self.node.clock.now())

    async def _attempt(self, row: int, budget: timedelta) -> HttpAttempt:
        world, node = self.webhooks, self.node
        effects = world.step(node, "send")
        answer = world.send_answer()
        if await node.gate():  # cut off while frozen: the request never finishes
            raise asyncio.CancelledError
        await asyncio.sleep(world.latency("send") + effects.slow)
        if not node.alive:
            raise asyncio.CancelledError
        if answer is Kind.SEND_MAYBE:  # processed; then the connection drops or goes silent
            world.delivered(node, row, ambiguous=True)
            if world.coin():
                return HttpAttempt.failed(HttpFailure.RESET, request_sent=True)
        if answer in (Kind.SEND_HANG, Kind.SEND_MAYBE):  # until the attempt's deadline cuts it
            await asyncio.sleep(budget.total_seconds() + 3600)
            return HttpAttempt.failed(HttpFailure.DEADLINE, request_sent=True)
        if answer is Kind.SEND_4XX:  # rejected, rate limited, or gone
            status = world.rng.choice((400, 410, 429))
            return HttpAttempt.response(status, retry_after="20" if status == 429 else None)
        if answer is Kind.SEND_5XX:
            if world.coin():  # the receiver had it and failed somewhere: it may have acted
                world.delivered(node, row, ambiguous=True)
                return HttpAttempt.response(500)
            return HttpAttempt.response(503, retry_after="15")
        world.delivered(node, row, ambiguous=False)
        return HttpAttempt.response(200)


class WebhookWorld(World):
    """The retry lane's nodes on the shared deliveries and endpoints (module docstring)."""

    def __init__(self, plan: Plan, loop: VirtualLoop) -> None:
        super().__init__(plan, loop)
        self.store = SimDeliveryStore(self)
        #: endpoint -> enabled; the endpoints a 410 disabled; delivery row -> (event, endpoint).
        self.enabled = dict.fromkeys(range(self.endpoints), True)
        self.gone: set[int] = set()
        self.pairs: dict[int, tuple[int, int]] = {}

    def _draw_shape(self) -> None:
        rng = self.rng
        self.slot_count = rng.randint(2, 4)
        batch = rng.choice((1, 3, 5))
        in_flight = rng.randint(1, batch)
        grouped = in_flight > 1 and rng.random() < 0.5
        self.gated = rng.random() < 0.5
        self.timing = WebhookTiming(  # type: ignore[assignment]
            http_attempt=timedelta(seconds=8), mark=timedelta(seconds=2),
            retry_claim_batch=batch, lease_grace=timedelta(seconds=10),
            birth_lease=timedelta(seconds=20),
        )  # fmt: skip
        self.config = delivery_lane(
            timing=self.timing, backoff=BACKOFF, retry_after_cap=_RETRY_AFTER_CAP,
            poll_interval=10.0, rows_in_flight=in_flight, group_marks=grouped,
        )  # fmt: skip
        self.lease = self.timing.claim_lease().total_seconds()
        self.endpoints = rng.randint(1, 3)
        self.events = rng.randint(4, 12)
        self.messages = self.events * self.endpoints
        mode = "grouped" if grouped else ("strict" if in_flight == 1 else "in-flight")
        self.result.shape = (
            f"webhook slots={self.slot_count} batch={batch} rows_in_flight={in_flight} {mode}"
            f" gated={'yes' if self.gated else 'no'} endpoints={self.endpoints}"
            f" events={self.events}"
        )

    # --- the repository's side ------------------------------------------------------------------

    def endpoint_of(self, delivery: int) -> int:
        return self.pairs[delivery][1]

    def target(self, delivery: int) -> DeliveryTarget | None:
        pair = self.pairs.get(delivery)
        if pair is None:
            return None
        event, endpoint = pair
        return DeliveryTarget(
            delivery_id=delivery, event_id=event, endpoint_id=endpoint,
            url=f"https://hooks.example.org/{endpoint}", enabled=self.enabled[endpoint],
            secrets=(_SECRET,), msg_id=f"msg_{event}", event_type="order.placed",
            body=json.dumps({"event": event, "delivery": delivery}).encode(),
        )  # fmt: skip

    def row_of(self, url: str, body: bytes) -> int:
        del url
        return int(json.loads(body)["delivery"])

    # --- the run ----------------------------------------------------------------------------------

    def start(self, slot: int) -> None:
        if self.closing:
            return
        generation = 0
        if slot < len(self.slots):
            old = self.slots[slot]
            self.retired.append(old)
            generation = int(old.name.split(".")[1]) + 1
        node = Node(self, slot, generation)
        handler = DeliveryHandler(
            FaultyTargets(self, node), FaultyWebhookSender(self, node), clock=node.clock
        )
        node.worker = Worker(
            FaultyStore(self, node, self.store), handler, self.config, clock=node.clock,
            leader=FaultyLeader(self, node, self.leader) if self.gated else None,
            holder=node.name, entropy=self.rng.randbytes, jitter=self.rng.random,
            wakeup=self.store.wakeup(DELIVERY_LANE),
        )  # fmt: skip
        node.task = self.loop.create_task(node.worker.run())
        if slot < len(self.slots):
            self.slots[slot] = node
        else:
            self.slots.append(node)

    async def _produce(self) -> None:
        arrivals = sorted(self.rng.uniform(0, 60) for _ in range(self.events))
        for event, at in enumerate(arrivals):
            await asyncio.sleep(at - self.loop.time())
            for endpoint in range(self.endpoints):
                message = NewMessage(
                    lane=DELIVERY_LANE, payload={"event": event, "endpoint": endpoint},
                    idempotency_key=f"delivery-{event}-{endpoint}",
                )  # fmt: skip
                result = self.store.enqueue(message)
                self.pairs[int(result.row_id)] = (event, endpoint)
                if self.rng.random() < 0.1:  # a fan-out run twice: the unique index holds
                    again = self.store.enqueue(message)
                    self.pairs[int(again.row_id)] = (event, endpoint)

    def check_webhook_end(self) -> None:
        seen: dict[tuple[int, int], int] = {}
        for row in self.store.all_rows():
            payload = json.loads(row.payload)
            pair = (int(payload["event"]), int(payload["endpoint"]))
            if pair in seen:
                self.violation(f"event {pair[0]} has deliveries {seen[pair]} and {row.id}")
            seen[pair] = row.id
            if row.status is Status.SKIPPED and pair[1] not in self.gone:
                self.violation(f"delivery {row.id} skipped, its endpoint {pair[1]} never gone")
        missing = self.events * self.endpoints - len(seen)
        if missing:
            self.violation(f"{missing} (event, endpoint) pairs have no delivery")
