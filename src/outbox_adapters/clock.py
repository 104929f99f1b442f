"""Clocks: the system clock for production, a fake one for tests (docs/architecture.md, "Who
owns the clock").

Both satisfy :class:`outbox_core.ports.Clock`: wall time (``now``, always timezone-aware UTC) for
the database-free paths, monotonic time for budgets and lease trust, and ``sleep``.

The core never reads a clock: the worker asks its ``Clock`` and passes ``now`` down. Production uses
:class:`SystemClock`; tests use :class:`FakeClock`, which only moves when told to, so a test about a
360-second lease runs in microseconds and gives the same result every time. The PostgreSQL store
reads neither: its SQL uses the *database* clock (``coalesce(:now, now())``), one clock for every
replica; see :mod:`outbox_adapters.postgres.clock` for reading that one from Python.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

__all__ = ["FakeClock", "SystemClock"]


class SystemClock:
    """The real clocks: ``datetime.now(UTC)``, ``time.monotonic()`` and ``asyncio.sleep``."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


def _as_timedelta(amount: float | timedelta) -> timedelta:
    # A timedelta is kept as it is (exact to the microsecond); seconds are converted once.
    delta = amount if isinstance(amount, timedelta) else timedelta(seconds=amount)
    if delta < timedelta(0):
        raise ValueError(f"a clock only moves forward; cannot advance it by {amount!r}")
    return delta


class FakeClock:
    """A clock that moves only when told to; for tests.

    - :meth:`advance` moves wall time and monotonic time forward together, as real time passing.
    - :meth:`set` moves *only* wall time, to any instant, backwards included: it models the system
      clock being stepped (NTP, an operator), which is exactly what monotonic time is immune to.
      Monotonic time never goes backwards.
    - :meth:`sleep` does not wait. It advances the clock by the requested time and then yields to
      the event loop once (``await asyncio.sleep(0)``), so other tasks get a turn, as they would
      during a real sleep. The clock is shared: when two tasks sleep concurrently, *both* move it,
      so time runs faster than either sleeper asked. That suits the usual test (one loop that
      sleeps between ticks, while the test drives the rest); a test that needs several sleepers
      woken in deadline order should step the clock itself with :meth:`advance`.

    Every sleep is recorded in :attr:`sleeps` (seconds, as asked), so a test can check how long a
    loop chose to wait.
    """

    def __init__(self, start: datetime | None = None, *, monotonic_start: float = 1_000.0) -> None:
        if start is None:
            start = datetime(2026, 1, 1, tzinfo=UTC)
        if start.utcoffset() is None:
            raise ValueError(f"a FakeClock starts at a timezone-aware datetime, got {start!r}")
        self._now = start.astimezone(UTC)
        self._monotonic = float(monotonic_start)
        #: Every ``sleep`` call's argument, in order.
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        # asyncio.sleep treats a negative delay as zero; so does this clock.
        self.advance(max(seconds, 0.0))
        await asyncio.sleep(0)

    def advance(self, amount: float | timedelta) -> datetime:
        """Let ``amount`` (seconds or a timedelta, not negative) pass; returns the new wall time."""
        delta = _as_timedelta(amount)
        self._now += delta
        self._monotonic += delta.total_seconds()
        return self._now

    def set(self, when: datetime) -> None:
        """Step wall time to ``when`` (an aware datetime; earlier is allowed). Monotonic time stays."""
        if when.utcoffset() is None:
            raise ValueError(f"a FakeClock is set to a timezone-aware datetime, got {when!r}")
        self._now = when.astimezone(UTC)

    def __repr__(self) -> str:
        return f"FakeClock({self._now.isoformat()}, monotonic={self._monotonic})"
