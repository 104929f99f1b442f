"""The simulated world's side of every port: the shipped in-memory fakes, observed and faulted.

- :class:`SimStore` is :class:`~outbox_adapters.memory.MemoryStore` (the real statements' semantics)
  watching its own compare-and-sets from inside, where each is atomic: a write the fence admitted
  under a token the row does not carry, a terminal row that moved, an attempt count that went
  down, a sent row that still holds a secret key.
- :class:`SimLeader` is :class:`~outbox_adapters.memory.MemoryLeaderLease`, asked who holds a lane.
- :class:`FaultyStore`, :class:`FaultyLeader` and :class:`FaultyMailer` are what one worker is
  given: each port call is a step of the run (:meth:`World.step`, where planned faults fire), goes
  through the worker's gate (dead: never runs; frozen: waits for the thaw, and a cancellation
  meanwhile means it never ran), takes its latency, meets an outage, and may lose its answer.
  The mailer delivers through a :class:`~outbox_adapters.memory.RecordingMailer`: what that one
  records is what the peer got.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

from tests.simulation.plan import Kind
from tests.support.message_ids import rows_by_token, token_of

from outbox_adapters.memory import MemoryLeaderLease, MemoryStore, RecordingMailer
from outbox_adapters.memory.rows import Row
from outbox_core.delivery import SCRUBBED_ON_MARK, TERMINAL, Status
from outbox_core.errors import StoreUnavailable
from outbox_core.mail import OutgoingMail
from outbox_core.messages import ClaimedRow, ClaimToken, Mark, RowId
from outbox_core.outcomes import Outcome
from outbox_core.ports import ClaimRequest, LeaderTerm, MarkResult, RequeueRequest, RequeueResult
from outbox_core.scrub import DEFAULT_SECRET_KEYS

if TYPE_CHECKING:
    from tests.simulation.world import Node, World

__all__ = ["FaultyLeader", "FaultyMailer", "FaultyStore", "SimLeader", "SimStore"]

T = TypeVar("T")


class SimStore(MemoryStore):
    """The in-memory store, checking the invariants of its own writes as it makes them."""

    def __init__(self, world: World, *, ordered_by: Callable[[Row], str] | None = None) -> None:
        super().__init__(clock=world.db_clock, ordered_by=ordered_by)
        self.world = world

    def _fenced_row(self, row_id: RowId, token: ClaimToken) -> Row | None:
        row = super()._fenced_row(row_id, token)
        if row is not None and (row.status is not Status.PENDING or row.claim_token != token):
            self.world.violation(
                f"stale write admitted: row {row.id} is {row.status} under token"
                f" {_short(row.claim_token)}, the write came under {_short(token)}"
            )
        return row

    def _apply(self, mark: Mark) -> MarkResult:
        row = self._rows.get(int(mark.row_id))
        before = None if row is None else (row.status, row.attempts)
        result = super()._apply(mark)
        if row is not None and before is not None:
            status, attempts = before
            if status in TERMINAL and row.status is not status:
                self.world.violation(f"terminal row {row.id} moved from {status} to {row.status}")
            if row.attempts != attempts:
                self.world.violation(
                    f"a mark changed row {row.id}'s attempts {attempts} -> {row.attempts}"
                )
            if row.status in SCRUBBED_ON_MARK and any(
                f'"{key}"' in row.payload for key in DEFAULT_SECRET_KEYS
            ):
                self.world.violation(f"row {row.id} is {row.status} and still holds a secret key")
        self.world.trace("mark", mark.row_id, mark.status, result)
        return result

    def row(self, row_id: int) -> Row:
        return self._rows[row_id]

    def all_rows(self) -> list[Row]:
        return list(self._rows.values())


class SimLeader(MemoryLeaderLease):
    """The in-memory leader lease; :meth:`holds` says whether a holder's lease is live now."""

    def holds(self, lane: str, holder: str) -> bool:
        current = self._lanes.get(lane)
        return (
            current is not None
            and current.holder == holder
            and current.expires_at > self._clock.now()
        )


class _Port:
    """What every faulted port call does around the real one."""

    def __init__(self, world: World, node: Node) -> None:
        self.world = world
        self.node = node

    async def _call(
        self,
        op: str,
        run: Callable[[], Awaitable[T]],
        *,
        rows: Sequence[RowId] = (),
        write: bool = False,
        database: bool = True,
    ) -> T:
        world, node = self.world, self.node
        effects = world.step(node, op)
        if (
            effects.slow and write
        ):  # a write slower than its budget is given up: a duplicate may follow
            world.excuse(rows, f"{op} slowed {effects.slow:.1f}s")
        held = await node.gate()
        if held:  # the request leaves at the thaw; the caller learns nothing of it
            await run()
            raise asyncio.CancelledError
        await asyncio.sleep(world.latency(op) + effects.slow)
        if not node.alive:  # the process died with the request in flight: it never arrived
            raise asyncio.CancelledError
        if database and world.outage():
            if write:
                world.excuse(rows, f"{op} refused by an outage")
            raise StoreUnavailable(f"simulated outage ({op})")
        result = await run()
        if effects.lost_ack and database:
            if write:
                world.excuse(rows, f"{op}'s answer lost")
            raise StoreUnavailable(f"simulated lost answer ({op})")
        return result


class FaultyStore(_Port):
    """:class:`outbox_core.ports.OutboxStore` for one worker, over the shared :class:`SimStore`."""

    def __init__(self, world: World, node: Node, store: SimStore) -> None:
        super().__init__(world, node)
        self.inner = store

    async def claim_due(self, request: ClaimRequest) -> Sequence[ClaimedRow]:
        async def run() -> Sequence[ClaimedRow]:
            rows = await self.inner.claim_due(request)
            self.world.claimed(self.node, request, rows)
            return rows

        return await self._call("claim", run)

    async def mark_if_pending(self, mark: Mark) -> MarkResult:
        return await self._call(
            "mark", lambda: self.inner.mark_if_pending(mark), rows=[mark.row_id], write=True
        )

    async def mark_many(self, marks: Sequence[Mark]) -> Sequence[MarkResult]:
        ids = [mark.row_id for mark in marks]
        return await self._call(
            "mark_many", lambda: self.inner.mark_many(marks), rows=ids, write=True
        )

    async def release(self, row_id: RowId, token: ClaimToken) -> MarkResult:
        async def run() -> MarkResult:
            before = self.inner.row(int(row_id)).attempts
            result = await self.inner.release(row_id, token)
            after = self.inner.row(int(row_id)).attempts
            if result is MarkResult.APPLIED and after != max(before - 1, 0):
                self.world.violation(f"a release moved row {row_id}'s attempts {before} -> {after}")
            return result

        return await self._call("release", run, rows=[row_id], write=True)

    async def requeue_failed(self, request: RequeueRequest) -> RequeueResult:  # pragma: no cover
        return await self.inner.requeue_failed(request)


class FaultyLeader(_Port):
    """:class:`outbox_core.ports.LeaderLease` for one worker, over the shared :class:`SimLeader`."""

    def __init__(self, world: World, node: Node, leader: SimLeader) -> None:
        super().__init__(world, node)
        self.inner = leader

    async def try_acquire(self, lane: str, holder: str, *, ttl: timedelta) -> LeaderTerm | None:
        return await self._call("lead", lambda: self.inner.try_acquire(lane, holder, ttl=ttl))

    async def release(self, term: LeaderTerm) -> None:
        await self._call("step_down", lambda: self.inner.release(term))


class FaultyMailer(_Port):
    """:class:`outbox_core.ports.Mailer` for one worker: the peer's answer, planned or drawn."""

    def __init__(self, world: World, node: Node, peer: RecordingMailer) -> None:
        super().__init__(world, node)
        self.peer = peer

    async def send(self, mail: OutgoingMail, *, budget: timedelta) -> Outcome:
        world, node = self.world, self.node
        effects = world.step(node, "send")
        answer = world.send_answer()
        if await node.gate():  # cut off while frozen: the conversation never finishes
            raise asyncio.CancelledError
        latency = world.latency("send") + effects.slow
        if answer is Kind.SEND_HANG:  # until the worker's own deadline cuts it
            await asyncio.sleep(budget.total_seconds() + 3600)
            return Outcome.transient("simulated: no answer", maybe_delivered=True)
        if answer is Kind.SEND_MAYBE:
            await asyncio.sleep(latency / 2)
            await self._deliver(mail, budget, ambiguous=True)
            if world.coin():  # the connection drops after DATA; or the reply never comes
                return Outcome.transient(
                    "simulated: connection lost after DATA", maybe_delivered=True
                )
            await asyncio.sleep(budget.total_seconds() + 3600)
            return Outcome.transient("simulated: no answer after DATA", maybe_delivered=True)
        await asyncio.sleep(latency)
        if answer is Kind.SEND_4XX:
            return Outcome.transient("451 4.3.0 simulated: try again later")
        if answer is Kind.SEND_5XX:
            return Outcome.permanent("550 5.1.1 simulated: no such user")
        await self._deliver(mail, budget, ambiguous=False)
        return Outcome.sent()

    async def _deliver(self, mail: OutgoingMail, budget: timedelta, *, ambiguous: bool) -> None:
        if not self.node.alive:
            raise asyncio.CancelledError
        await self.peer.send(mail, budget=budget)
        self.world.delivered(self.node, row_of(self.world.store, mail), ambiguous=ambiguous)


def row_of(store: SimStore, mail: OutgoingMail) -> int:
    """The row of ``store`` a message was sent for: the one whose Message-ID it carries (the
    handler's opaque one, lanes.email.row_message_id, compared without its domain)."""
    rows = rows_by_token((row.lane, int(row.id), row.created_at) for row in store.all_rows())
    return rows[token_of(mail.message_id)]


def _short(token: ClaimToken | None) -> str:
    return "none" if token is None else token.value[:8]
