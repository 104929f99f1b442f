"""``MemoryLeaderLease``: the per-lane leader lease in memory (ADR 0008)."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta

import attrs

from outbox_adapters.clock import SystemClock
from outbox_adapters.memory.stamps import stamp
from outbox_core.ports import Clock, LeaderTerm

__all__ = ["MemoryLeaderLease"]


@attrs.define
class _Leadership:
    holder: str
    term: int
    elected_at: datetime
    expires_at: datetime


class MemoryLeaderLease:
    """:class:`outbox_core.ports.LeaderLease` in memory, with PostgresLeaderLease's semantics.

    A live lease is renewed by its holder (same term) and refused to anyone else; an expired one
    goes to whoever asks next with a new term (its old holder included: it stopped trusting itself
    at expiry). Expiry is in the clock's wall time; the term's ``trusted_until`` is the clock's
    monotonic time at the *start* of the attempt + ttl. Like :class:`~.store.MemoryStore`, each
    call yields to the event loop once, then works under a lock without another ``await``.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._lanes: dict[str, _Leadership] = {}

    async def try_acquire(
        self, lane: str, holder: str, *, ttl: timedelta, now: datetime | None = None
    ) -> LeaderTerm | None:
        """Win or renew ``lane``; ``None`` while another holder's lease is live."""
        if ttl <= timedelta(0):
            raise ValueError(f"a leader lease needs a positive ttl, got {ttl!r}")
        started = self._clock.monotonic()
        await asyncio.sleep(0)
        with self._lock:
            at = stamp(self._clock, now)
            current = self._lanes.get(lane)
            if current is None:
                current = self._lanes[lane] = _Leadership(holder, 1, at, at + ttl)
            elif current.holder == holder and current.expires_at > at:
                current.expires_at = at + ttl
            elif current.expires_at <= at:
                self._lanes[lane] = current = _Leadership(holder, current.term + 1, at, at + ttl)
            else:
                return None
            term = current.term
        return LeaderTerm(
            lane=lane, holder=holder, term=term, trusted_until=started + ttl.total_seconds()
        )

    async def release(self, term: LeaderTerm, *, now: datetime | None = None) -> None:
        """Expire the lease at once if it is still ``term``; a lost lease is left alone."""
        await asyncio.sleep(0)
        with self._lock:
            current = self._lanes.get(term.lane)
            if current is not None and (current.holder, current.term) == (term.holder, term.term):
                at = stamp(self._clock, now)
                current.expires_at = min(current.expires_at, at)
