"""Wake-up signals: "your lane may have new work", from a producer to an idle worker (ADR 0011).

Polling is the correctness path; a wake-up only shortens the wait. An idle :class:`~.worker.Worker`
sleeps until its poll interval ends, a stop is requested, or its :class:`Wakeup` fires, whichever
comes first. Nothing is lost when a signal is missed (the next poll finds the row), and a signal
with no work behind it costs one empty claim.

The worker clears its signal *before* each claim, then claims, then waits: a commit that lands while
the claim runs sets the signal again, so the following wait returns at once (no lost wake-up).

=========================  =====================================================================
who                        gives a worker its signal with
=========================  =====================================================================
PostgreSQL                 :meth:`outbox_adapters.postgres.WakeupListener.wakeup` (LISTEN/NOTIFY)
the in-memory store        :meth:`outbox_adapters.memory.MemoryStore.wakeup`
=========================  =====================================================================

Both hand out a :class:`LaneWakeup` per subscriber from a :class:`WakeupHub`: each worker clears
only its own signal, so two workers of one lane in one process don't swallow each other's.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from typing import Protocol, runtime_checkable

__all__ = ["LaneWakeup", "Wakeup", "WakeupHub"]


@runtime_checkable
class Wakeup(Protocol):
    """What a :class:`~outbox_adapters.runtime.Worker` needs to be woken early."""

    def clear(self) -> None:
        """Forget the signals received so far (the worker calls this just before it claims)."""

    async def wait(self) -> object:
        """Return once signalled since the last :meth:`clear`; at once if that already happened."""


class LaneWakeup:
    """One subscriber's signal for one lane: an ``asyncio.Event`` that any thread may set.

    The event belongs to the event loop that waits on it; :meth:`set` called from another thread
    (a synchronous host test enqueueing into a ``MemoryStore``) is handed to that loop.
    """

    def __init__(self, lane: str) -> None:
        #: The lane this signal is about.
        self.lane = lane
        self._event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()

    def set(self) -> None:
        loop = self._loop
        if loop is None or _running_loop() is loop:
            self._event.set()
        elif not loop.is_closed():
            loop.call_soon_threadsafe(self._event.set)

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        """Return once set (at once if it is); bound it with ``asyncio.timeout`` if need be."""
        self._loop = asyncio.get_running_loop()
        await self._event.wait()

    def __repr__(self) -> str:
        return f"LaneWakeup(lane={self.lane!r}, set={self.is_set()})"


class WakeupHub:
    """Fans a lane's wake-up out to every live subscriber of that lane (thread-safe).

    Subscribers are held weakly: a worker that is gone takes its signal with it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lanes: dict[str, weakref.WeakSet[LaneWakeup]] = {}

    def subscribe(self, lane: str) -> LaneWakeup:
        """A new signal for ``lane``; keep a reference to it for as long as it is wanted."""
        signal = LaneWakeup(lane)
        self.add(signal)
        return signal

    def add(self, signal: LaneWakeup) -> None:
        """File a signal made elsewhere (a subclass that notes more than "set") under its lane."""
        with self._lock:
            self._lanes.setdefault(signal.lane, weakref.WeakSet()).add(signal)

    def wake(self, lane: str) -> None:
        """Signal every subscriber of ``lane``."""
        with self._lock:
            signals = list(self._lanes.get(lane, ()))
        for signal in signals:
            signal.set()

    def wake_all(self) -> None:
        """Signal every subscriber of every lane (after a gap in which signals may have been lost)."""
        with self._lock:
            signals = [signal for lane in self._lanes.values() for signal in lane]
        for signal in signals:
            signal.set()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
