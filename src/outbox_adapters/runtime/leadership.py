"""Leadership of a leader-gated lane: won, renewed between batches AND while a batch runs.

A worker given a :class:`~outbox_core.ports.LeaderLease` claims only while it leads its lane, and
starts a row only if the row ends inside the term it can prove
(:func:`outbox_core.lease.leader_admits_row`); the row's send is also cut at the term's end
(:meth:`Leadership.trusted_until` bounds the row deadline), so a worker that was frozen between the
gate and the send does not start sending on a term that ran out meanwhile.

The term is renewed every ``ttl / 3`` (:data:`~outbox_adapters.runtime.config.LEADER_RENEWALS_PER_TTL`):
between batches by the loop (:meth:`Leadership.lead`), and while a batch runs by a renewal task
beside it (:meth:`Leadership.renewed`), so a long batch never outlives its leadership. When the
row-start gate finds the term too short for a row while that task runs (its renewal is due, or on
its way through a slow database), it asks the task to renew at once and waits for the answer
(:meth:`Leadership.admits`) rather than giving the batch away for a renewal that is merely late.

A renewal that fails (lost to another holder, an error, or no answer within one TTL) ends the trust
at once: the rows not yet started are given back, and the loop goes back to campaigning. Every
election attempt is bounded by the TTL: a later answer could grant nothing provable (the trust is
counted from the attempt's start), and an unbounded one would hang the worker on a silent
network partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator

from outbox_adapters.runtime.config import LEADER_RENEWALS_PER_TTL, LaneConfig
from outbox_core.lease import leader_admits_row
from outbox_core.ports import Clock, LeaderLease, LeaderTerm

__all__ = ["Leadership"]

_log = logging.getLogger("outbox_adapters.runtime")


class Leadership:
    """The term this worker holds on its lane, if any; ``lease=None`` means the lane is not gated."""

    def __init__(
        self, lease: LeaderLease | None, config: LaneConfig, *, holder: str, clock: Clock
    ) -> None:
        self.lease = lease
        self.lane = config.lane
        self.holder = holder
        self.clock = clock
        self.ttl = config.leader_ttl
        self._ttl = self.ttl.total_seconds()
        self._renew_every = self._ttl / LEADER_RENEWALS_PER_TTL
        self.term: LeaderTerm | None = None
        #: The renewal task beside the running batch (None between batches).
        self._renewer: asyncio.Task[None] | None = None
        #: Set to ask the renewal task for a renewal now; it answers by setting ``_answered``.
        self._now_please = asyncio.Event()
        self._answered = asyncio.Event()

    def trusted_until(self) -> float:
        """Monotonic instant until which this worker may act as leader (``inf``: not gated)."""
        if self.lease is None:
            return math.inf
        return -math.inf if self.term is None else self.term.trusted_until

    def _renewal_due(self) -> float:
        assert self.term is not None  # noqa: S101 - only called while a term is held
        return self.term.trusted_until - self._ttl + self._renew_every

    def _fits(self, per_row: float) -> bool:
        return leader_admits_row(
            now=self.clock.monotonic(), trusted_until=self.trusted_until(), per_row=per_row
        )

    async def lead(self) -> bool:
        """Win the lane, or renew the term when a renewal is due; ``True`` while leading."""
        if self.lease is None:
            return True
        if self.term is not None and self.clock.monotonic() < self._renewal_due():
            return True
        await self._acquire()
        return self.term is not None and self.clock.monotonic() < self.term.trusted_until

    async def admits(self, per_row: float) -> bool:
        """The leadership gate: may a row of ``per_row`` seconds start now?

        ``True`` when it ends inside the term this worker can prove. When it would not, but the
        term is held and a renewal task runs beside the batch, that task renews at once and the
        gate decides on its answer: a renewal that is due or slow must not cost the batch.
        """
        if self.lease is None or self._fits(per_row):
            return True
        renewer = self._renewer
        if self.term is None or renewer is None or renewer.done():
            return False
        answered = self._answered
        self._now_please.set()
        with contextlib.suppress(TimeoutError):
            # The attempt is bounded by the TTL; the task may first be finishing a sleep.
            async with asyncio.timeout(2 * self._ttl):
                await answered.wait()
        return self._fits(per_row)

    async def _acquire(self) -> None:
        assert self.lease is not None  # noqa: S101 - lead() checked it
        try:
            async with asyncio.timeout(self._ttl):
                self.term = await self.lease.try_acquire(self.lane, self.holder, ttl=self.ttl)
        except Exception as exc:  # noqa: BLE001 - no answer means no leadership; try again later
            _log.warning("leader election failed for lane %s (%s)", self.lane, type(exc).__name__)
            self.term = None

    @contextlib.asynccontextmanager
    async def renewed(self) -> AsyncIterator[None]:
        """Keep renewing the term while the body (a batch) runs."""
        if self.lease is None:
            yield
            return
        self._now_please.clear()
        done = asyncio.Event()
        task = self._renewer = asyncio.ensure_future(self._keep_renewing(done))
        try:
            yield
        finally:
            self._renewer = None
            # The renewer is told twice: a cancellation can be lost on Python 3.11 (the pool's
            # getconn waits with asyncio.wait_for, which returns the connection it got at the
            # moment it is cancelled), and the renewer would then renew for ever while this
            # waits for it. The flag and the wake-up end it at its next turn.
            done.set()
            self._now_please.set()
            task.cancel()
            # asyncio.wait, not ``await task`` under suppress(CancelledError): a cancellation of
            # this batch while it waits must reach the batch, not be taken for the renewer's.
            await asyncio.wait({task})
            if not task.cancelled():
                task.result()

    async def _keep_renewing(self, done: asyncio.Event) -> None:
        while self.term is not None and not done.is_set():
            # Real time: a fake clock in a test moves only when the test moves it. The gate may
            # ask for the renewal sooner (_now_please), e.g. when the clock jumped.
            wait = max(0.0, self._renewal_due() - self.clock.monotonic())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._now_please.wait()
            if done.is_set():
                return
            self._now_please.clear()
            await self._acquire()
            answered, self._answered = self._answered, asyncio.Event()
            answered.set()
        if self.term is None:
            _log.warning("lane %s: leadership lost while a batch ran", self.lane)

    async def step_down(self) -> None:
        """Give the term back (graceful stop), so a sibling need not wait for the TTL."""
        if self.lease is not None and self.term is not None:
            with contextlib.suppress(Exception):
                await self.lease.release(self.term)
            self.term = None
