"""Leadership of a leader-gated lane: won, renewed between batches AND while a batch runs.

A worker given a :class:`~outbox_core.ports.LeaderLease` claims only while it leads its lane, and
starts a row only if the row ends inside the term it can prove
(:func:`outbox_core.lease.leader_admits_row`). The term is renewed every ``ttl / 3``
(:data:`~outbox_adapters.runtime.config.LEADER_RENEWALS_PER_TTL`): between batches by the loop, and
while a batch runs by a renewal task beside it, so a long batch never outlives its leadership. A
renewal that fails (lost to another holder, or no answer) ends the trust at once: the rows not yet
started are given back, and the loop goes back to campaigning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator

from outbox_adapters.runtime.config import LEADER_RENEWALS_PER_TTL, LaneConfig
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
        self._renew_every = self.ttl.total_seconds() / LEADER_RENEWALS_PER_TTL
        self.term: LeaderTerm | None = None

    def trusted_until(self) -> float:
        """Monotonic instant until which this worker may act as leader (``inf``: not gated)."""
        if self.lease is None:
            return math.inf
        return -math.inf if self.term is None else self.term.trusted_until

    def _renewal_due(self) -> float:
        assert self.term is not None  # noqa: S101 - only called while a term is held
        return self.term.trusted_until - self.ttl.total_seconds() + self._renew_every

    async def lead(self) -> bool:
        """Win the lane, or renew the term when a renewal is due; ``True`` while leading."""
        if self.lease is None:
            return True
        if self.term is not None and self.clock.monotonic() < self._renewal_due():
            return True
        await self._acquire()
        return self.term is not None and self.clock.monotonic() < self.term.trusted_until

    async def _acquire(self) -> None:
        assert self.lease is not None  # noqa: S101 - lead() checked it
        try:
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
        task = asyncio.ensure_future(self._keep_renewing())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _keep_renewing(self) -> None:
        while self.term is not None:
            # Real time: a fake clock in a test moves only when the test moves it.
            await asyncio.sleep(max(0.0, self._renewal_due() - self.clock.monotonic()))
            await self._acquire()
        _log.warning("lane %s: leadership lost while a batch ran", self.lane)

    async def step_down(self) -> None:
        """Give the term back (graceful stop), so a sibling need not wait for the TTL."""
        if self.lease is not None and self.term is not None:
            with contextlib.suppress(Exception):
                await self.lease.release(self.term)
            self.term = None
