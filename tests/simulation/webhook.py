"""The webhook lanes' world: the drainer's fan-out, the born-leased first attempts, the retries.

Each node is one webhook process wired as ``WebhookWorkers`` wires it (which needs a PostgreSQL
pool): the REAL drainer (``runtime.Worker`` + :class:`~outbox_adapters.lanes.webhooks.FanOutHandler`,
:func:`drain_lane`) over the webhook outbox; the REAL first attempts
(:class:`~outbox_adapters.runtime.born.BornRows`) of the deliveries each fan-out wrote born
leased; the REAL retry worker (``Worker`` + :class:`~outbox_adapters.lanes.webhooks.DeliveryHandler`,
:func:`delivery_lane`); drainer and retries leader-gated or not, first attempts never. The
repository is the REAL shipped one, :class:`~outbox_adapters.memory.MemoryWebhookRepository`, over
the world's :class:`SimStore` s (the webhook outbox and the deliveries), which is contract-tested
against PostgreSQL's: its fan-out (one step, as its one transaction: the outbox row's fenced
dispatched mark through the store's one compare-and-set, then a delivery per enabled endpoint,
born leased; a refused fence writes nothing) and the deliveries store's 410 mark (the failed mark
and the endpoint's disable in one step). Each repository call (``fan_out``, ``fan_out_many``,
``delivery_target``) is one faulted database call (:class:`FaultyRepository`); the sender's answers go through the REAL ``classify_http`` as ``HttpxWebhookSender``'s do: 2xx; 4xx
(a rejection, 429 with Retry-After, or 410 Gone); 5xx (500: may have been processed; 503 with
Retry-After); a hang until the attempt's budget cuts it; or the request processed and the answer
lost (reset, or silence until the deadline). Node faults as in the e-mail world.

The world (drawn from the seed): 2 to 4 processes; retry batches of 1 to 5, strict, in flight or
grouped; 1 to 4 first attempts at once; a birth lease of 10, 20 or 40 s (at 10 s, one attempt's
whole budget, the rows waiting for a slot are given back to the retry lane); 1 to 3 endpoints,
each of tenant ``acme`` or ``globex`` and subscribed to ``order.*``; 4 to 12 ``order.placed``
events over the first minute, each of ``acme``, ``globex`` or ``initech`` (which has no endpoint).

Invariants, besides the e-mail world's over the deliveries (no delivery lost, duplicate bound,
fence, terminal states absorb, attempts never decrease, one leader acting at every retry POST):

- each outbox row is fanned out at most once, and a dispatched one exactly once (the
  repository's events by source row); none is lost;
- each (event, endpoint) has at most one delivery, and every delivery row is one the repository
  wrote for an (event, endpoint) of the same tenant (no event reaches another tenant's endpoint);
- a delivery skipped for its disabled endpoint belongs to an endpoint a 410 disabled (the
  repository's endpoint, disabled with the 410's reason).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Final

from tests.simulation.plan import Kind, Plan
from tests.simulation.ports import FaultyLeader, FaultyStore, SimStore, _Port
from tests.simulation.vloop import VirtualLoop
from tests.simulation.world import BACKOFF, Node, World

from outbox_adapters.lanes.webhooks import (
    DELIVERY_LANE,
    WEBHOOK_LANE,
    DeliveryHandler,
    FanOutHandler,
    delivery_lane,
    drain_lane,
)
from outbox_adapters.memory import MemoryWebhookRepository
from outbox_adapters.runtime import Worker
from outbox_adapters.runtime.born import BornRows
from outbox_adapters.webhook_model import DeliveryTarget, Endpoint, FanOut, webhook_message
from outbox_core.classify import HttpAttempt, HttpFailure, classify_http
from outbox_core.delivery import TERMINAL, Status
from outbox_core.messages import ClaimedRow, ClaimToken
from outbox_core.outcomes import Outcome
from outbox_core.signing import HEADER_ID, WebhookSecret
from outbox_core.webhook_timing import FanOutTiming, WebhookTiming

__all__ = ["WebhookWorld"]

_SECRET: Final = WebhookSecret(key=bytes(range(32)))
#: The tenants the events belong to; endpoints are drawn from the first two (the third has none).
_TENANTS: Final = ("acme", "globex", "initech")
#: A receiver's Retry-After (429/503) is honoured up to this: inside the lost-row bound.
_RETRY_AFTER_CAP: Final = timedelta(seconds=30)
_OUTBOX_IDS: Final = 100_001
_FAN_OUT: Final = FanOutTiming(
    fan_out=timedelta(seconds=3), mark=timedelta(seconds=2), batch_size=5,
    batch_timeout=timedelta(seconds=30), lease_grace=timedelta(seconds=10),
)  # fmt: skip


class SimOutbox(SimStore):
    """The webhook outbox table; its row ids start far above the deliveries', so that what the
    world counts per delivery (requests, excuses) never mixes with an outbox row."""

    def __init__(self, world: World) -> None:
        super().__init__(world)
        self._next_id = _OUTBOX_IDS


class FaultyRepository(_Port):
    """The shared :class:`MemoryWebhookRepository` for one node: ``fan_out``, ``fan_out_many``
    (each one transaction) and ``delivery_target`` (one read), each a faulted database call."""

    def __init__(self, world: WebhookWorld, node: Node) -> None:
        super().__init__(world, node)
        self.inner = world.repository

    async def fan_out(
        self, row: ClaimedRow, *, birth_lease: timedelta, birth_token: ClaimToken
    ) -> FanOut:
        (fan_out,) = await self.fan_out_many(
            [row], birth_lease=birth_lease, birth_token=birth_token
        )
        return fan_out

    async def fan_out_many(
        self, rows: Sequence[ClaimedRow], *, birth_lease: timedelta, birth_token: ClaimToken
    ) -> tuple[FanOut, ...]:
        async def run() -> tuple[FanOut, ...]:
            self.node.tokens.add(birth_token.value)
            made = await self.inner.fan_out_many(
                rows, birth_lease=birth_lease, birth_token=birth_token
            )
            for row, fan_out in zip(rows, made, strict=True):
                self.world.trace("fanned out", row.id, *(d.id for d in fan_out.deliveries))
            return made

        return await self._call("fan_out", run, rows=[row.id for row in rows], write=True)

    async def delivery_target(self, delivery_id: int) -> DeliveryTarget | None:
        return await self._call("target", lambda: self.inner.delivery_target(delivery_id))


class FaultyWebhookSender(_Port):
    """``WebhookSender`` for one node: the receiver's answer, planned or drawn, classified."""

    def __init__(self, world: WebhookWorld, node: Node, *, born: bool) -> None:
        super().__init__(world, node)
        self.webhooks = world
        #: A first attempt's sender: not leader-gated (the row is this process's by its birth).
        self.born = born

    async def send(
        self, url: str, *, headers: Mapping[str, str], body: bytes, budget: timedelta
    ) -> Outcome:
        del body
        attempt = await self._attempt(self.webhooks.row_of(url, headers), budget)
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
            world.delivered(node, row, ambiguous=True, gated=not self.born)
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
                world.delivered(node, row, ambiguous=True, gated=not self.born)
                return HttpAttempt.response(500)
            return HttpAttempt.response(503, retry_after="15")
        world.delivered(node, row, ambiguous=False, gated=not self.born)
        return HttpAttempt.response(200)


class WebhookWorld(World):
    """The webhook processes on the shared outbox, deliveries and endpoints (module docstring)."""

    #: Deliveries have no idempotency key (as on PostgreSQL): one per (event, endpoint) instead.
    keyed_rows = False

    def __init__(self, plan: Plan, loop: VirtualLoop) -> None:
        super().__init__(plan, loop)
        self.outbox = SimOutbox(self)
        #: The shipped repository over the two tables; the endpoints are added as the run starts.
        self.repository = MemoryWebhookRepository(self.outbox, self.store)

    def _draw_shape(self) -> None:
        rng = self.rng
        self.slot_count = rng.randint(2, 4)
        batch = rng.choice((1, 3, 5))
        in_flight = rng.randint(1, batch)
        grouped = in_flight > 1 and rng.random() < 0.5
        self.gated = rng.random() < 0.5
        self.first_attempts = rng.randint(1, 4)
        self.timing = self.webhook_timing = WebhookTiming(  # type: ignore[assignment]
            http_attempt=timedelta(seconds=8), mark=timedelta(seconds=2),
            retry_claim_batch=batch, lease_grace=timedelta(seconds=10),
            birth_lease=timedelta(seconds=rng.choice((10, 20, 40))),
        )  # fmt: skip
        self.config = delivery_lane(
            timing=self.timing, backoff=BACKOFF, retry_after_cap=_RETRY_AFTER_CAP,
            poll_interval=10.0, rows_in_flight=in_flight, group_marks=grouped,
        )  # fmt: skip
        self.drain_config = drain_lane(timing=_FAN_OUT, backoff=BACKOFF, poll_interval=10.0)
        self.lease = max(
            self.timing.claim_lease().total_seconds(), _FAN_OUT.claim_lease().total_seconds()
        )
        self.endpoints = rng.randint(1, 3)
        #: Each endpoint's tenant, and each event's (a tenant may have no endpoint at all).
        self.endpoint_tenants = [rng.choice(_TENANTS[:2]) for _ in range(self.endpoints)]
        self.events = rng.randint(4, 12)
        self.messages = 0  # the deliveries the fan-outs promised: known at the end
        mode = "grouped" if grouped else ("strict" if in_flight == 1 else "in-flight")
        self.result.shape = (
            f"webhook slots={self.slot_count} batch={batch} rows_in_flight={in_flight} {mode}"
            f" first_attempts={self.first_attempts} birth={self.webhook_timing.birth_lease.seconds}s"
            f" gated={'yes' if self.gated else 'no'}"
            f" endpoints={','.join(self.endpoint_tenants)}"
            f" events={self.events}"
        )

    # --- what the receiver sees ------------------------------------------------------------------

    def row_of(self, url: str, headers: Mapping[str, str]) -> int:
        """The delivery a request is for: its endpoint (the URL's last part) and its event (the
        ``webhook-id``), as the repository recorded them."""
        endpoint = int(url.rsplit("/", 1)[1])
        (event,) = [e.id for e in self.repository.events() if e.msg_id == headers[HEADER_ID]]
        by_pair = {pair: row for row, pair in self.repository.delivery_refs().items()}
        return by_pair[event, endpoint]

    def delivered(self, node: Node, row: int, *, ambiguous: bool, gated: bool = True) -> None:
        if gated:
            super().delivered(node, row, ambiguous=ambiguous)
            return
        self.deliveries[row] += 1
        self.trace("delivered first", node.name, row)
        if ambiguous:
            self.excuse([row], "the peer got it, the worker could not know")

    # --- the run ----------------------------------------------------------------------------------

    def start(self, slot: int) -> None:
        """One webhook process, wired as ``WebhookWorkers`` wires it (which needs a pool)."""
        node = self.new_node(slot)
        if node is None:
            return
        repository = FaultyRepository(self, node)
        deliveries = FaultyStore(self, node, self.store)
        leader = FaultyLeader(self, node, self.leader) if self.gated else None

        def attempt(*, born: bool) -> DeliveryHandler:
            sender = FaultyWebhookSender(self, node, born=born)
            return DeliveryHandler(repository, sender, clock=node.clock)

        first = BornRows(
            deliveries, attempt(born=True), self.config, lease=self.webhook_timing.birth_lease,
            clock=node.clock, jitter=self.rng.random, in_flight=self.first_attempts,
        )  # fmt: skip
        fan_out = FanOutHandler(repository, first, clock=node.clock, entropy=self.rng.randbytes)
        drainer = self.worker(
            node, FaultyStore(self, node, self.outbox), fan_out, self.drain_config,
            wakeup=self.outbox.wakeup(WEBHOOK_LANE), leader=leader,
        )  # fmt: skip
        node.worker = self.worker(
            node, deliveries, attempt(born=False), self.config,
            wakeup=self.store.wakeup(DELIVERY_LANE), leader=leader,
        )  # fmt: skip
        node.stoppers += [drainer.request_stop, first.request_stop]
        self.run_node(node, _process(drainer, node.worker, fan_out, first))

    async def _produce(self) -> None:
        arrivals = sorted(self.rng.uniform(0, 60) for _ in range(self.events))
        for event, at in enumerate(arrivals):
            await asyncio.sleep(at - self.loop.time())
            message = webhook_message(
                "order.placed", {"n": event}, tenant=self.rng.choice(_TENANTS),
                idempotency_key=f"event-{event}",
            )  # fmt: skip
            self.outbox.enqueue(message)

    def _finished(self, producer: asyncio.Task[None]) -> bool:
        outbox = all(row.status in TERMINAL for row in self.outbox.all_rows())
        return outbox and super()._finished(producer)

    async def main(self) -> None:
        for n, tenant in enumerate(self.endpoint_tenants):
            await self.repository.add_endpoint(
                f"https://hooks.example.org/{n + 1}",
                ["order.*"],
                secret=_SECRET.to_text(),
                tenant=tenant,
            )
        await super().main()
        self.messages = len(self.repository.delivery_refs())

    def check_webhook_end(self) -> None:
        refs = self.repository.delivery_refs()
        endpoints = {e.id: e for e in self._endpoints()}
        tenants = {e.id: e.tenant for e in self.repository.events()}
        seen: dict[tuple[int, int], int] = {}
        for row in self.store.all_rows():
            pair = refs.get(row.id)
            if pair is None:
                self.violation(f"delivery row {row.id} was not written by a fan-out")
                continue
            if pair in seen:
                self.violation(f"event {pair[0]} has deliveries {seen[pair]} and {row.id}")
            seen[pair] = row.id
            endpoint = endpoints[pair[1]]
            if endpoint.tenant != tenants[pair[0]]:
                self.violation(
                    f"delivery {row.id} takes tenant {tenants[pair[0]]}'s event {pair[0]} to"
                    f" tenant {endpoint.tenant}'s endpoint {pair[1]}"
                )
            if row.status is Status.SKIPPED and (
                endpoint.enabled or "410" not in (endpoint.disabled_reason or "")
            ):
                self.violation(f"delivery {row.id} skipped, its endpoint {pair[1]} never gone")
        fanned = Counter(e.source_outbox_id for e in self.repository.events())
        back_by = self.db_clock.now() + timedelta(seconds=self.lease) + 2 * BACKOFF.cap
        for row in self.outbox.all_rows():
            if fanned[row.id] > 1:
                self.violation(f"outbox row {row.id} fanned out {fanned[row.id]} times")
            if row.status is Status.DISPATCHED and not fanned[row.id]:
                self.violation(f"outbox row {row.id} is dispatched and was never fanned out")
            if row.status is Status.PENDING and row.next_attempt_at > back_by:
                self.violation(f"outbox row {row.id} is pending, due only at {row.next_attempt_at}")

    def _endpoints(self) -> list[Endpoint]:
        # Read in place: the run is over, and a call through the loop would let tasks run on.
        return list(self.repository._endpoints.values())


async def _process(
    drainer: Worker, retries: Worker, fan_out: FanOutHandler, first: BornRows
) -> None:
    """``WebhookWorkers.run``: the drainer and the retry worker until stopped or cancelled, then
    a fan-out round still committing ends and every first attempt started finishes and is
    recorded."""
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(drainer.run())
            group.create_task(retries.run())
    finally:
        await fan_out.wait()
        await first.wait()
