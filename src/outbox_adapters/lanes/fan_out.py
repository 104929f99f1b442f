"""The webhook drainer's row handler: the fan-outs of the rows handed over together, in ONE
transaction.

Theory of operation
-------------------
The drainer is an ordinary lane of the one runtime (ADR 0018). Its config (``drain_lane``) has the
runtime send a whole claimed batch at once (``rows_in_flight = batch_size``, grouped marks), so the
runtime calls :class:`FanOutHandler` once per row, each call under the row's own gate, deadline,
decide and mark, all in the same turn of the event loop. The handler does not fan each row out on
its own: the first call of a turn opens a *round*, every call of that turn joins it, and the round
runs ``fan_out_many`` over all of them: one transaction for the batch instead of one per row
(ADR 0017: the grouped fenced mark, the events, the born-leased deliveries, the commit).

- **Every promise is per row.** Each row is fenced by its own claim token inside the transaction; a
  row whose fence refuses gets nothing of its own written and its call reports a transient
  failure (the runtime's mark of it is then stale, as it should be); the others fan out.
- **The round is bounded** by the earliest deadline among its rows, so it ends (committed or
  rolled back whole) before any of their send budgets does. A round cut off raises
  ``TimeoutError`` in every call: each row is then retried by the runtime (nothing was written).
- **The round survives its callers.** A call cancelled while the round runs (the batch's timeout,
  a stopping worker) does not cancel the others' transaction: the round runs to its end, and
  whatever it committed has its first attempts started by the round itself, not by the caller.
  :meth:`FanOutHandler.wait` waits for a round still running.
- The deliveries' first attempts start the moment the round commits, through
  :class:`~outbox_adapters.runtime.born.BornRows` (born leased from an instant taken before the
  transaction began). Given :class:`~outbox_adapters.lanes.fresh_targets.FreshTargets`, the round
  first reads their targets in one query (``delivery_targets``), which the first attempts then
  use instead of a query each.

A drainer configured one row at a time (``drain_lane(rows_in_flight=1)``) makes rounds of one
row: the per-row transaction of before, kept as the bench's "before" column.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Protocol

import attrs

from outbox_adapters.lanes.fresh_targets import FreshTargets
from outbox_adapters.runtime.born import BornRows
from outbox_adapters.webhook_model import event_of
from outbox_core.errors import StoreUnavailable
from outbox_core.messages import ClaimedRow, ClaimToken
from outbox_core.outcomes import Outcome
from outbox_core.ports import Clock

__all__ = ["FanOutHandler", "FanOutStore"]

_log = logging.getLogger("outbox_adapters.lanes.webhooks")


class _FanOut(Protocol):
    @property
    def marked(self) -> bool: ...

    @property
    def deliveries(self) -> Sequence[ClaimedRow]: ...


class FanOutStore(Protocol):
    """What the drainer needs of a webhook repository (PostgreSQL's or the in-memory one)."""

    async def fan_out_many(
        self, rows: Sequence[ClaimedRow], *, birth_lease: timedelta, birth_token: ClaimToken
    ) -> Sequence[_FanOut]: ...


@attrs.define
class _Waiting:
    """One call's row, the instant its deadline ends (monotonic), and where its answer goes."""

    row: ClaimedRow
    ends_at: float
    answer: asyncio.Future[_FanOut]


class FanOutHandler:
    """Drains webhook-outbox rows: the rows handed over in one turn fan out in one transaction,
    then their deliveries' first attempts start (module docstring)."""

    def __init__(
        self,
        repository: FanOutStore,
        first_attempts: BornRows,
        *,
        clock: Clock,
        entropy: Callable[[int], bytes] = secrets.token_bytes,
        targets: FreshTargets | None = None,
    ) -> None:
        self._repository = repository
        #: Where the round leaves the targets of the deliveries it wrote (None: not read here).
        self._targets = targets
        self._first_attempts = first_attempts
        self._clock = clock
        self._entropy = entropy
        #: The calls of the round being gathered (the next round runs them).
        self._waiting: list[_Waiting] = []
        #: Rounds still running, held so none is collected or forgotten at shutdown.
        self._rounds: set[asyncio.Task[Any]] = set()
        #: How many rounds ran, and how many rows they took (the bench and the tests read them).
        self.rounds = 0
        self.rows = 0

    async def __call__(self, row: ClaimedRow, *, budget: timedelta) -> Outcome:
        # A row that is not an event fails at once (InvalidMessage) and never joins a round.
        event_of(row)
        answer: asyncio.Future[_FanOut] = asyncio.get_running_loop().create_future()
        ends_at = self._clock.monotonic() + budget.total_seconds()
        self._waiting.append(_Waiting(row, ends_at, answer))
        if len(self._waiting) == 1:
            # The first call of this turn opens the round; the calls the runtime started in the
            # same turn join it before it takes the list.
            task = asyncio.ensure_future(self._round())
            self._rounds.add(task)
            task.add_done_callback(self._rounds.discard)
        try:
            # Shielded: a call cancelled here leaves the round (the others' transaction) running.
            fan_out = await asyncio.shield(answer)
        except asyncio.CancelledError:
            answer.cancel()  # nobody waits for this answer any more; the round goes on
            raise
        if not fan_out.marked:
            # The row's fence refused its mark inside the fan-out: another claim owns the row now
            # (our lease ran out), and nothing of it was written. The runtime's mark will be stale.
            return Outcome.transient("the row was claimed again by another worker; fan-out undone")
        return Outcome.recorded_by_handler()

    async def wait(self) -> None:
        """Wait for every round still running (each is bounded by its rows' deadlines)."""
        while self._rounds:
            await asyncio.wait(list(self._rounds))

    async def _round(self) -> None:
        # One pass of the loop: every call the runtime started in this turn has joined by then.
        await asyncio.sleep(0)
        waiting, self._waiting = self._waiting, []
        born_at = self._clock.monotonic()  # before the transaction: its now() is no earlier
        token = ClaimToken.from_entropy(self._entropy(16))
        left = min(w.ends_at for w in waiting) - born_at
        self.rounds += 1
        self.rows += len(waiting)
        try:
            async with asyncio.timeout(max(left, 0.0)):
                fanned = await self._repository.fan_out_many(
                    [w.row for w in waiting], birth_lease=self._first_attempts.lease,
                    birth_token=token,
                )  # fmt: skip
        except asyncio.CancelledError:
            for w in waiting:
                w.answer.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - every call of the round gets the round's error
            for w in waiting:
                if not w.answer.done():
                    w.answer.set_exception(exc)
            return
        for w, fan_out in zip(waiting, fanned, strict=True):
            if not w.answer.done():
                w.answer.set_result(fan_out)
        born = [d for fan_out in fanned if fan_out.marked for d in fan_out.deliveries]
        try:
            await self._read_targets(born, born_at + left)
        finally:
            # Whatever happened to the read (even a cancelled round): what committed goes out.
            self._first_attempts.start(born, born_at=born_at)

    async def _read_targets(self, born: Sequence[ClaimedRow], until: float) -> None:
        """The first attempts' targets in one query, within the round's time; on any trouble
        each attempt reads its own, as a retry does."""
        if self._targets is None or not born:
            return
        try:
            async with asyncio.timeout(max(until - self._clock.monotonic(), 0.0)):
                await self._targets.prime([int(d.id) for d in born])
        except (StoreUnavailable, TimeoutError) as exc:
            _log.warning("the first attempts' targets were not read (%s); each reads its own", exc)
