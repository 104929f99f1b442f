"""``InFlight``: the consumer's deliveries handled at once, one key's one after the other.

:class:`~outbox_adapters.lanes.consumer.ChannelConsumer` takes a slot before it asks the broker for
the next delivery (:meth:`InFlight.taken`), so at most ``limit`` deliveries are fetched and not yet
settled. Each delivery runs in a task of its own (:meth:`InFlight.start`); a delivery whose event
key is the key of one still running waits for that one first, so the events of one key are handled
in the order they arrived, as a strictly one-at-a-time consumer handles them (ADR 0021). With
``limit`` 1 the consumer is exactly that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

from outbox_core.errors import ConfigurationError

__all__ = ["InFlight"]

_log = logging.getLogger("outbox_adapters.lanes.consumer")


class InFlight:
    """At most ``limit`` handlings at once; those of one key one after the other."""

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigurationError(
                f"in_flight: the deliveries a consumer handles at once, a positive count;"
                f" got {limit!r}"
            )
        self.limit = limit
        self._free = asyncio.Semaphore(limit)
        #: A slot :meth:`taken` acquired that no :meth:`start` has used yet.
        self._held = False
        self._tasks: set[asyncio.Task[None]] = set()
        #: The last handling started per key (what the next one of the key waits for).
        self._last: dict[str, asyncio.Task[None]] = {}

    @property
    def busy(self) -> bool:
        """Whether a handling is still running."""
        return bool(self._tasks)

    async def taken(self, stop: asyncio.Future[Any]) -> bool:
        """Wait for a free slot (``True``; it is held for the next :meth:`start`) or for ``stop``
        (``False``)."""
        if self._held:
            return True
        acquiring = asyncio.ensure_future(self._free.acquire())
        done, _ = await asyncio.wait({acquiring, stop}, return_when=asyncio.FIRST_COMPLETED)
        if acquiring in done:
            self._held = True
            return True
        acquiring.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await acquiring
        if not acquiring.cancelled():  # acquired as it was being cancelled: hold it
            self._held = True
        return False

    def start(self, key: str | None, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the held slot, after the last handling of ``key`` (``None``: at once)."""
        if not self._held:
            work.close()
            raise RuntimeError("InFlight.start without a slot taken")
        self._held = False
        before = None if key is None else self._last.get(key)
        task = asyncio.create_task(self._run(before, work))
        self._tasks.add(task)
        if key is not None:
            self._last[key] = task
        task.add_done_callback(lambda done: self._ended(done, key))

    async def _run(
        self, before: asyncio.Task[None] | None, work: Coroutine[Any, Any, None]
    ) -> None:
        try:
            if before is not None:
                await asyncio.wait({before})  # its outcome is its own; only its end matters here
            await work
        finally:
            work.close()  # a handling cancelled before it began: nothing to run
            self._free.release()

    def _ended(self, task: asyncio.Task[None], key: str | None) -> None:
        self._tasks.discard(task)
        if key is not None and self._last.get(key) is task:
            del self._last[key]
        if not task.cancelled() and task.exception() is not None:
            _log.error("a delivery's handling ended in error", exc_info=task.exception())

    def give_back(self) -> None:
        """Release a slot :meth:`taken` holds that no :meth:`start` will use."""
        if self._held:
            self._held = False
            self._free.release()

    def cancel(self) -> None:
        """Cancel every handling still running (the consumer itself is being cancelled)."""
        for task in self._tasks:
            task.cancel()

    async def settled(self) -> None:
        """Wait until every handling started has ended."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))
