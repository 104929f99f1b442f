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
detached mark) gets an ``asyncio.timeout`` of its own.

A window's sends (the grouped-mark walk) start together and end by the same instant: a
:class:`WindowDeadline` gives them one timer for all, instead of one each. When it fires, every
task still inside one of its scopes is cancelled, and each scope turns that cancellation into
``TimeoutError`` as ``asyncio.timeout`` does.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType
from typing import Any

__all__ = ["Deadlines", "WindowDeadline"]

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


class WindowDeadline:
    """One loop timer for the scopes of a window's sends; see the module docstring."""

    __slots__ = ("_expired", "_handle", "_inside")

    def __init__(self, seconds: float) -> None:
        #: The tasks inside a scope, with their cancellation count when they entered it.
        self._inside: dict[asyncio.Task[Any], int] = {}
        self._expired = False
        self._handle = asyncio.get_running_loop().call_later(max(seconds, 0.0), self._fire)

    def within(self) -> _WindowScope:
        """``async with window.within():`` — the body, cut off at the window's deadline."""
        return _WindowScope(self)

    def close(self) -> None:
        """The window ended: its timer is no longer needed."""
        self._handle.cancel()

    def _fire(self) -> None:
        self._expired = True
        for task in self._inside:
            task.cancel()


class _WindowScope:
    __slots__ = ("_task", "_window")

    def __init__(self, window: WindowDeadline) -> None:
        self._window = window
        self._task: asyncio.Task[Any] | None = None

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a time limit needs a task")
        if self._window._expired:  # noqa: SLF001 - the scope is the window's own part
            raise TimeoutError
        self._task = task
        self._window._inside[task] = task.cancelling()  # noqa: SLF001

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task = self._task
        assert task is not None  # noqa: S101 - set by __aenter__
        cancelling = self._window._inside.pop(task)  # noqa: SLF001
        # Inside the scope when the timer fired, so cancelled by it (as asyncio.timeout, the
        # cancellation is taken back, and only when it was the one that ended the body is it
        # turned into TimeoutError).
        if (
            self._window._expired  # noqa: SLF001
            and task.uncancel() <= cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc
