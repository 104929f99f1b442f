"""Time limits opened one after another: ``asyncio.timeout``'s behaviour on one reused loop timer.

``asyncio.timeout`` arms a loop timer when its scope opens and cancels it when the scope closes. The
strict walk opens two scopes a row (the send's and the mark's); a timer for each, armed and
cancelled, costs about a quarter of the runtime's own Python time a row (docs/benchmarks.md,
"Dispatch, 2026-12-02"). A :class:`Deadlines` keeps ONE timer for the scopes it opens one after
another:

* a scope whose deadline is at or after the armed timer's leaves the timer as it is;
* when the timer fires before the open scope's deadline, it re-arms for that deadline;
* a scope that closes leaves the timer armed: it fires into no scope and does nothing;
* a scope whose deadline comes before the armed timer's re-arms it.

Inside a scope, expiry is ``asyncio.timeout``'s: the task is cancelled, and the scope turns that
cancellation, and only that one, into ``TimeoutError``; a cancellation from elsewhere passes
through. One scope is open at a time: a scope asked for while another is open (another task's: a
window's sends, a detached mark) gets an ``asyncio.timeout`` of its own.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType
from typing import Any

__all__ = ["Deadlines"]

#: How early a loop timer may fire and still count as on time: uvloop arms its timers in whole
#: milliseconds, so a timer can fire up to a millisecond before the instant it was armed for.
#: Without it, a timer that fires a fraction of a millisecond early would re-arm, again and again,
#: until the loop's clock passed the deadline.
_EARLY = 0.001


class Deadlines:
    """Consecutive time limits on one loop timer; see the module docstring."""

    __slots__ = (
        "_armed_at",
        "_cancelling",
        "_delay",
        "_expired",
        "_handle",
        "_loop",
        "_task",
        "_when",
    )

    def __init__(self) -> None:
        self._handle: asyncio.TimerHandle | None = None
        #: The loop the timer is armed on, and when it fires (loop time; inf: not armed).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._armed_at = math.inf
        #: The open scope: its deadline (loop time; None: no scope open), task and state.
        self._when: float | None = None
        self._task: asyncio.Task[Any] | None = None
        self._cancelling = 0
        self._expired = False
        self._delay = 0.0

    def within(self, seconds: float) -> Deadlines | asyncio.Timeout:
        """``async with deadlines.within(seconds):`` — the body, cut off after ``seconds``."""
        if self._when is not None:
            return asyncio.timeout(seconds)
        self._delay = seconds
        return self

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a time limit needs a task")
        loop = task.get_loop()
        self._task = task
        self._cancelling = task.cancelling()
        self._expired = False
        when = self._when = loop.time() + self._delay
        if when < self._armed_at or loop is not self._loop:
            if self._handle is not None:
                self._handle.cancel()
            self._arm(loop, when)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task, self._task, self._when = self._task, None, None
        if self._expired:
            self._expired = False
            assert task is not None  # noqa: S101 - set by __aenter__
            if task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                raise TimeoutError from exc

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self._loop, self._armed_at = loop, when
        self._handle = loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._handle, self._armed_at = None, math.inf
        when, task, loop = self._when, self._task, self._loop
        if when is None or task is None or loop is None or self._expired:
            return  # no scope open: an earlier scope's timer, left armed
        if loop.time() + _EARLY < when:
            self._arm(loop, when)  # fired for an earlier scope: wait for this one's deadline
            return
        self._expired = True
        task.cancel()
